"""Validate refuses a call target or speculation method the releases at hand cannot give, at its
line (kb.call_targets; issue 55). Read from the releases' files with ast: no vLLM import."""

from __future__ import annotations

from gdn_review.kb import RecordErrors, parse_record
from tests.conftest import ROOT

RECORD = (ROOT / "tests" / "fixtures" / "declarations" / "kb" / "53929.yaml").read_text()
BACKEND_CASE = (
    "    call:\n      function: GDNAttentionBackend.supports_device_cpu_query_lens_mismatch\n"
)


def errors(text: str) -> list[str]:
    try:
        parse_record(text, "53929.yaml")
    except RecordErrors as error:
        return [str(problem) for problem in error.errors]
    return []


def edited(old: str, new: str, text: str = RECORD) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def line_of(text: str, fragment: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if fragment in line)


def test_the_fixture_record_validates():
    """A backend classmethod, a builder classmethod 0.33.0 inherits, per speculation method."""
    assert errors(RECORD) == []


def test_a_target_no_release_has_is_refused_at_its_line():
    text = edited("supports_device_cpu_query_lens_mismatch\n", "supports_everything\n")
    (message,) = errors(text)
    line = line_of(text, "supports_everything")
    assert message.startswith(
        f"53929.yaml:{line}:17: cases[1].call.function: "
        "'GDNAttentionBackend.supports_everything' is not a classmethod, staticmethod or class "
        "attribute of GDNAttentionMetadataBuilder or GDNAttentionBackend (or their bases) in "
    )
    # A class that is neither the builder nor its backend says so.
    (message,) = errors(edited("function: GDNAttentionBackend.", "function: MambaSpec."))
    assert "MambaSpec is neither the case's builder class GDNAttentionMetadataBuilder" in message


def test_what_the_engine_does_not_call_on_the_class_is_refused():
    instance = errors(
        edited(BACKEND_CASE, "    call:\n      function: GDNAttentionMetadataBuilder.build\n")
    )
    assert len(instance) == 1 and "is an instance method" in instance[0], instance
    attribute = errors(
        edited(
            BACKEND_CASE,
            "    call:\n      function: GDNAttentionMetadataBuilder._cudagraph_support\n",
        )
    )
    assert attribute[0].endswith(
        "GDNAttentionMetadataBuilder._cudagraph_support is a class attribute: read it with "
        "`attribute: GDNAttentionMetadataBuilder._cudagraph_support`"
    ), attribute
    method = errors(
        edited(
            BACKEND_CASE,
            BACKEND_CASE.replace("function:", "attribute:"),
        )
    )
    assert "is a classmethod, not a class attribute: call it with `function: " in method[0], method
    private = errors(
        edited(BACKEND_CASE, "    call:\n      function: _resolve_gdn_prefill_backend\n")
    )
    assert "_resolve_gdn_prefill_backend is private" in private[0], private


def test_parameters_and_arguments_must_match():
    text = edited(BACKEND_CASE, "    call:\n      function: plan_flashinfer_checkpoints\n")
    (message,) = errors(text)
    assert "plan_flashinfer_checkpoints on " in message and "which nothing fills" in message
    text = edited(
        BACKEND_CASE,
        BACKEND_CASE + "      arguments: {verbose: true}\n",
    )
    (message,) = errors(text)
    assert (
        message.startswith(f"53929.yaml:{line_of(text, 'verbose')}:")
        and "cases[1].call.arguments.verbose: " in message
    ), message
    assert "has no parameter 'verbose' in any release at hand" in message


def test_configuration_a_target_does_not_take_is_refused():
    text = edited(BACKEND_CASE, "    speculative_tokens: 2\n" + BACKEND_CASE)
    (message,) = errors(text)
    assert (
        "cases[1].call: GDNAttentionBackend.supports_device_cpu_query_lens_mismatch takes no "
        in (message)
    )
    assert message.endswith("leave out speculative_tokens"), message


def test_the_speculation_method_is_checked():
    text = edited("    speculative_method: draft_model\n", "    speculative_method: eagle\n")
    (message,) = errors(text)
    assert f"53929.yaml:{line_of(text, 'eagle')}:25: cases[3].speculative_method: " in message
    text = edited(
        "    speculative_tokens: 2\n    speculative_method: draft_model\n",
        "    speculative_method: draft_model\n",
    )
    messages = errors(text)
    assert any(
        "speculative_method: a speculation method configures speculative decoding: give "
        "speculative_tokens" in m
        for m in messages
    ), messages
