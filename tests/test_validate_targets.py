"""Validate refuses what run cannot check: expect keys a case's kind does not measure, `needs:`
names no release at hand defines, targets that do not exist; each at its file:line:col.

The first two are the mistakes of the #53929 trial record (a test-first record of an open PR): a
batch case with `expect: {returned: 4}` validated and `run` raised `KeyError: 'returned'` inside
the check; `needs: [supports_device_cpu_query_lens_mismatch]`, a classmethod of the backend class,
read "vLLM 0.33.0 has no ..." although 0.33.0's backend has it.
"""

from __future__ import annotations

import textwrap

import pytest

from gdn_review.kb import RecordErrors, load_record, parse_record
from gdn_review.kb.release_names import lookup

# The trial record's shape: an open PR, one batch case, an equivalence claim on it.
TRIAL = textwrap.dedent(
    """\
    schema_version: 1
    pr:
      number: 53929
      repo: vllm-project/vllm
      title: A trial PR
      state: open
    target:
      file: vllm/v1/attention/backends/gdn_attn.py
      symbol: GDNAttentionMetadataBuilder.build
      base_release: 0.33.0
    claims:
      - id: C1
        text: The batch is classified as the PR says.
        before: fails
        check:
          kind: equivalence
          cases: [spec]
    cases:
      - id: spec
        text: Two spec decodes.
        speculative_tokens: 2
        rows:
          - {seq_len: 10, query_len: 3, drafted: 2}
          - {seq_len: 12, query_len: 3, drafted: 2}
        expect:
          num_spec_decodes: 2
    """
)


def trial(old: str, new: str, text: str = TRIAL) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def errors(text: str, file: str = "53929.yaml") -> list[str]:
    """The record's errors as people read them (none: it validates)."""
    try:
        parse_record(text, file)
    except RecordErrors as failure:
        return [str(error) for error in failure.errors]
    return []


def needing(*names: str, text: str = TRIAL) -> str:
    return trial(
        "    speculative_tokens: 2\n",
        f"    speculative_tokens: 2\n    needs: [{', '.join(names)}]\n",
        text,
    )


@pytest.fixture(scope="module")
def releases_at_hand():
    """The releases validate scans: the installed vLLM at least (without one it cannot tell, and
    these tests would prove nothing)."""
    found = lookup(None).releases
    assert "installed" in found, found
    return found


def test_the_trial_record_as_fixed_validates():
    assert errors(TRIAL) == []


def test_a_batch_case_expecting_returned_is_refused_at_its_line():
    text = trial("      num_spec_decodes: 2\n", "      returned: 4\n")
    assert errors(text) == [
        "53929.yaml:26:17: cases[0].expect.returned: a batch case measures the metadata fields "
        "its entry point returns (path, num_*, *_state_rows, *_query_start_loc, "
        "has_initial_state, num_accepted_tokens, ...), the builder's attributes, server and "
        "layout fields where it states them, and raised (with message): what constructing the "
        "builder and calling its entry point raise; returned is what a call case measures (call: "
        "a host function on its own, no rows)"
    ]


def test_a_call_case_measures_returned_and_raised_only():
    text = trial(
        "    speculative_tokens: 2\n    rows:\n"
        "      - {seq_len: 10, query_len: 3, drafted: 2}\n"
        "      - {seq_len: 12, query_len: 3, drafted: 2}\n",
        "    call:\n      function: plan_flashinfer_checkpoints\n"
        "      arguments: {offsets: [64], query_lens: [100]}\n",
    )
    text = trial(
        "      num_spec_decodes: 2\n",
        "      returned: [64, [0, 1], [0]]\n      num_decodes: 1\n",
        text,
    )
    assert errors(text) == [
        "53929.yaml:26:20: cases[0].expect.num_decodes: a call case measures returned and raised: "
        "what its host function returned, or raised ('Type: first line'; null: nothing); "
        "num_decodes is what a batch case measures (rows, no call)"
    ]


def test_where_a_case_raises_it_measures_nothing_but_raised():
    text = trial(
        "      num_spec_decodes: 2\n", "      raised: 'RuntimeError: no'\n      path: spec\n"
    )
    (message,) = errors(text)
    assert message.startswith("53929.yaml:27:13: cases[0].expect.path: the case expects raised: ")
    assert "only raised and message" in message
    # raised: null (it must not raise) beside metadata fields is measured where it builds.
    assert (
        errors(trial("      num_spec_decodes: 2\n", "      raised: null\n      path: spec\n")) == []
    )


def test_group_fields_need_a_step_and_a_step_measures_no_raised():
    text = trial("      num_spec_decodes: 2\n", "      group_state_tables: [[0], [1]]\n")
    (message,) = errors(text)
    assert message.startswith("53929.yaml:26:27: cases[0].expect.group_state_tables: ")
    assert "give the case a step" in message
    step = trial(
        "    speculative_tokens: 2\n", "    speculative_tokens: 2\n    step: {groups: 2}\n"
    )
    text = trial("      num_spec_decodes: 2\n", "      raised: null\n", step)
    (message,) = errors(text)
    assert message.startswith("53929.yaml:27:15: cases[0].expect.raised: a step case measures")


def test_a_differential_compares_only_fields_its_cases_measure():
    # The builder's attributes are measured only for a case whose expect states them: unstated on
    # both sides, the field would be absent from both and "agree", a check that cannot fail.
    text = trial(
        "    check:\n      kind: equivalence\n      cases: [spec]\n",
        "    check:\n      kind: differential\n      pairs: [[spec, other]]\n"
        "      fields: [num_spec_decodes, layer_names]\n",
    )
    text += (
        "  - id: other\n    text: The same batch, eager.\n    speculative_tokens: 2\n"
        "    cudagraph_mode: NONE\n    rows:\n      - {seq_len: 10, query_len: 3, drafted: 2}\n"
        "      - {seq_len: 12, query_len: 3, drafted: 2}\n"
    )
    assert errors(text) == [
        "53929.yaml:18:34: claims[0].check.fields[1]: case 'spec' does not measure layer_names: "
        "the harness measures it only for a case whose expect states it"
    ]
    stated = text.replace("      num_spec_decodes: 2\n", "      layer_names: [a]\n")
    stated += "    expect:\n      layer_names: [a]\n"
    assert errors(stated) == []


def test_needs_of_a_backend_method_is_found_where_the_release_defines_it(releases_at_hand):
    # AttentionBackend.supports_device_cpu_query_lens_mismatch, inherited by GDNAttentionBackend
    # (the class whose get_builder_cls returns the builder); 0.33.0 has it.
    assert errors(needing("supports_device_cpu_query_lens_mismatch")) == []
    # A metadata field, a builder attribute (set in __init__), a module-level function.
    assert (
        errors(needing("prefill_state_indices", "kv_cache_spec", "plan_flashinfer_checkpoints"))
        == []
    )


def test_a_made_up_need_is_refused_naming_its_line_and_where_it_looked(releases_at_hand):
    (message,) = errors(needing("supports_device_cpu_query_lens_mismatch", "made_up_name"))
    assert message.startswith(
        "53929.yaml:22:54: cases[0].needs[1]: 'made_up_name' is defined nowhere in the releases "
        "at hand: not a field of GDNAttentionMetadata, an attribute or method of "
        "GDNAttentionMetadataBuilder (or its bases), of GDNAttentionBackend (whose "
        "get_builder_cls returns it; or its bases), nor a module-level name of "
        "vllm.v1.attention.backends.gdn_attn, in "
    )
    assert message.endswith(
        " (installed); a name the open PR adds: a metadata field kb.types declares, or one its "
        "diff beside the record (kb/53929.diff) adds"
    )


def test_what_an_open_pr_adds_is_declared_or_in_its_diff(write_record, releases_at_hand):
    # A metadata field no release has, which kb.types declares (an open PR's, #55504): an open
    # PR's record may need it, and a case expecting it must.
    declared = needing("spec_decode_src_indices")
    assert errors(declared) == []
    merged = trial("  state: open\n", "  merged_at: '2026-01-02'\n", declared)
    merged = trial(
        "  base_release: 0.33.0\n", "  base_release: 0.32.0\n  head_release: 0.33.0\n", merged
    )
    merged = trial("    before: fails\n", "", merged)
    (message,) = errors(merged)
    assert message.startswith(
        "53929.yaml:22:13: cases[0].needs[0]: 'spec_decode_src_indices' is defined nowhere"
    )
    assert message.endswith(
        "check the spelling (a name only an open PR adds belongs in that PR's record)"
    )
    expected = trial("      num_spec_decodes: 2\n", "      spec_decode_src_indices: [0, 1]\n")
    (message,) = errors(expected)
    assert message.startswith(
        "53929.yaml:26:32: cases[0].expect.spec_decode_src_indices: no release at hand has"
    )
    assert "list it in needs" in message
    # A method only the PR adds: its diff beside the record says so.
    kb = write_record(needing("compute_spec_metadata"), name="53929.yaml")
    with pytest.raises(
        RecordErrors, match=r"53929.yaml:22:13: cases\[0\].needs\[0\]: 'compute_spec_metadata'"
    ):
        load_record(kb / "53929.yaml")
    (kb / "53929.diff").write_text(
        "--- a/vllm/v1/attention/backends/gdn_attn.py\n"
        "+++ b/vllm/v1/attention/backends/gdn_attn.py\n"
        "@@ -400,0 +401,3 @@\n"
        "+    def compute_spec_metadata(self, common_attn_metadata):\n"
        "+        return None\n",
        encoding="utf-8",
    )
    assert load_record(kb / "53929.yaml").case("spec").needs == ["compute_spec_metadata"]


def test_targets_a_case_names_are_validated_at_their_line():
    call = trial(
        "    speculative_tokens: 2\n    rows:\n"
        "      - {seq_len: 10, query_len: 3, drafted: 2}\n"
        "      - {seq_len: 12, query_len: 3, drafted: 2}\n",
        "    call:\n      function: plan_checkpoints\n",
    )
    call = trial("      num_spec_decodes: 2\n", "      returned: 1\n", call)
    (message,) = errors(call)
    # Looked up in the releases at hand (kb.call_targets), not a hand list.
    assert message.startswith(
        "53929.yaml:22:17: cases[0].call.function: 'plan_checkpoints' is not a public function "
        "of vllm.v1.attention.backends.gdn_attn in "
    )
    builder = trial(
        "    speculative_tokens: 2\n", "    speculative_tokens: 2\n    builder: NoSuchBuilder\n"
    )
    (message,) = errors(builder)
    assert message.startswith(
        "53929.yaml:22:14: cases[0].builder: no release in the release cache ships a builder "
        "class 'NoSuchBuilder'"
    )
    # A claim's builder too: at run time it would skip every test as "has no NoSuchBuilder".
    claim = trial(
        "    check:\n      kind: equivalence\n      cases: [spec]\n",
        "    check:\n      kind: invariant\n      properties: [partition]\n"
        "      builder: NoSuchBuilder\n",
    )
    (message,) = errors(claim)
    assert message.startswith(
        "53929.yaml:18:16: claims[0].check.builder: no release in the release cache ships a "
        "builder class 'NoSuchBuilder'"
    )


def test_needs_is_looked_up_at_run_time_where_validate_looks():
    """On the installed vLLM (0.33.0), a case needing the backend's classmethod runs; a made-up
    name skips, naming the places it looked."""
    from gdn_review import harness
    from gdn_review.harness.case_build import skip_what_cannot_run
    from gdn_review.harness.origin import SKIP_KIND

    builder = harness.make_builder(harness.BuilderSettings(device="cpu", speculative_tokens=2))
    rows = [{"seq_len": 10, "query_len": 3, "drafted": 2}]
    for found in (
        "supports_device_cpu_query_lens_mismatch",  # the backend's (AttentionBackend's) classmethod
        "plan_flashinfer_checkpoints",  # a module-level function
        "prefill_state_indices",  # a metadata field
        "num_spec",  # the builder's
    ):
        assert skip_what_cannot_run({"rows": rows, "needs": [found]}, builder) is None, found
    import vllm

    with pytest.raises(pytest.skip.Exception) as skipped:
        skip_what_cannot_run({"rows": rows, "needs": ["made_up_name"]}, builder)
    assert str(skipped.value) == (
        f"not applicable: vLLM {vllm.__version__} has no made_up_name (metadata, builder, "
        "backend or module)"
    )
    assert getattr(skipped.value, SKIP_KIND) == "absent"  # what the PR adds: pending if open
