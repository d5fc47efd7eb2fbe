"""A case names its builder class (issue 46): validation, construction and attribute expects,
per-device expects, and #54636 through the subclass that its bug broke."""

from __future__ import annotations

import sys

import pytest

from gdn_review import generate
from gdn_review.common import interrupts, release_trees
from gdn_review.common.release_trees import CLAIMS_ON_ANY_RELEASE
from gdn_review.kb import RecordErrors, load_record, parse_record
from gdn_review.kb.builder_family import known_builders
from tests.conftest import MINIMAL, ROOT

ROCM_ON_AITER = "RuntimeError: KimiK3ROCmKDAMetadataBuilder builds its own FLA chunk metadata"


def case_with(lines: str) -> str:
    """MINIMAL with these lines added to its case."""
    old = "    speculative_tokens: 2\n"
    assert old in MINIMAL
    return MINIMAL.replace(old, old + lines, 1)


def errors_of(text: str) -> list[str]:
    with pytest.raises(RecordErrors) as failure:
        parse_record(text, "7.yaml")
    return [str(e) for e in failure.value.errors]


def test_the_family_is_found_in_the_release_cache_not_a_list():
    # On a fresh machine no other test may have fetched 0.29.0 yet: the test fetches what it reads.
    release_trees.entry("0.29.0")
    known_builders.cache_clear()
    family = known_builders()
    assert {"KimiK3KDAMetadataBuilder", "KimiK3ROCmKDAMetadataBuilder"} <= set(family)
    assert family["KimiK3ROCmKDAMetadataBuilder"].module == "vllm.models.kimi_k3.amd.kda_metadata"
    assert "_build_chunk_metadata" in family["KimiK3ROCmKDAMetadataBuilder"].methods
    assert "0.29.0" in family["KimiK3KDAMetadataBuilder"].releases


@pytest.mark.parametrize(
    "lines, message",
    [
        pytest.param(
            "    builder: KimiK9Builder\n",
            "7.yaml:24:14: cases[0].builder: no release in the release cache ships a builder "
            "class 'KimiK9Builder' that subclasses GDNAttentionMetadataBuilder (known: "
            "GDNAttentionMetadataBuilder, KimiK3KDAMetadataBuilder, "
            "KimiK3ROCmKDAMetadataBuilder)",
            id="unknown builder",
        ),
        pytest.param(
            "    use_kda_recoverssm: true\n",
            "7.yaml:24:25: cases[0].use_kda_recoverssm: use_kda_recoverssm configures Kimi-K3's "
            "KDA builders: give builder: KimiK3KDAMetadataBuilder or "
            "KimiK3ROCmKDAMetadataBuilder",
            id="kda field without a Kimi-K3 builder",
        ),
        pytest.param(
            "    builder: KimiK3KDAMetadataBuilder\n    kda_prefill_backend: fused\n",
            "7.yaml:25:26: cases[0].kda_prefill_backend: vLLM refuses fused off ROCm "
            "('--kda-prefill-backend=fused is only available on ROCm.'): give builder: "
            "KimiK3ROCmKDAMetadataBuilder",
            id="fused on the nvidia builder",
        ),
        pytest.param(
            "    builder: KimiK3ROCmKDAMetadataBuilder\n"
            "    resolved_prefill_backend: aiter_flydsl\n",
            "7.yaml:25:31: cases[0].resolved_prefill_backend: KimiK3ROCmKDAMetadataBuilder "
            "builds its own FLA chunk metadata, so its constructor refuses the aiter_flydsl GDN "
            "prefill backend (_check_chunk_metadata_override, 0.32.0 on): state the refusal "
            "(expect: raised) or choose another backend",
            id="a construction vLLM refuses",
        ),
        pytest.param(
            "    expect: {num_decodes: 0}\n    expect_on_cuda: {device: cuda}\n",
            "7.yaml:25:30: cases[0].expect_on_cuda.device: 'device' is not in expect: "
            "expect_on_cuda overrides a field expect states (give its value off CUDA in expect)",
            id="expect_on_cuda of a field expect lacks",
        ),
    ],
)
def test_a_builder_vllm_would_not_construct_is_an_error_at_its_field(lines, message):
    assert errors_of(case_with(lines)) == [message]


def test_recoverssm_needs_speculative_decoding():
    text = case_with("    builder: KimiK3KDAMetadataBuilder\n    use_kda_recoverssm: true\n")
    text = text.replace("    speculative_tokens: 2\n", "", 1).replace("drafted: 2}", "}")
    assert any(
        "use_kda_recoverssm: vLLM turns RecoverSSM on only with speculative decoding" in e
        for e in errors_of(text)
    )


def test_a_refused_construction_the_case_states_is_valid_and_its_words_name_the_builder():
    text = case_with(
        "    builder: KimiK3ROCmKDAMetadataBuilder\n"
        "    resolved_prefill_backend: aiter_flydsl\n"
        "    expect: {raised: 'RuntimeError: ...'}\n"
    )
    case = parse_record(text, "7.yaml").cases[0]
    assert case.configuration() == (
        "builder KimiK3ROCmKDAMetadataBuilder; configured as on ROCm: prefill backend "
        "aiter_flydsl; no kernel runs"
    )
    kimi = parse_record(
        case_with("    builder: KimiK3KDAMetadataBuilder\n    use_kda_recoverssm: true\n"),
        "7.yaml",
    ).cases[0]
    assert kimi.configuration() == "builder KimiK3KDAMetadataBuilder (RecoverSSM on)"


def test_attribute_and_construction_expects_tell_the_harness_what_to_measure():
    record = load_record(ROOT / "kb" / "54636.yaml")
    inputs = record.case_inputs()
    assert inputs["kimi_spec_decodes"]["builder_fields"] == ["device", "layer_names"]
    assert inputs["kimi_spec_decodes"]["expect_on_cuda"] == {"device": "cuda"}
    assert inputs["kimi_recoverssm_spec_decodes"]["raises"] is True
    assert "expect_on_cuda" not in inputs["kimi_recoverssm_spec_decodes"]


def test_a_per_device_expect_is_rendered_only_where_a_case_states_one():
    source = generate.render_module(
        load_record(ROOT / "kb" / "update_block_table.yaml"), "kb/update_block_table.yaml"
    )
    c8 = source.split("def test_C8_equivalence", 1)[1].split("\ndef ", 1)[0]
    assert "expected = harness.expected_on(device, CASES[case_id], expected)" in c8
    c1 = generate.render_module(load_record(ROOT / "kb" / "55404.yaml"), "kb/55404.yaml")
    assert "expected_on" not in c1


def test_expect_on_cuda_overrides_only_on_cuda():
    from gdn_review.harness.server import expected_on

    case = {"expect_on_cuda": {"supports_update_block_table": True}}
    expected = {"supports_update_block_table": False, "num_decodes": 1}
    assert expected_on("cpu", case, expected) == expected
    assert expected_on("cuda", case, expected) == {
        "supports_update_block_table": True,
        "num_decodes": 1,
    }


def test_construction_raises_what_the_case_states_on_the_real_builder():
    from gdn_review import harness

    record = load_record(ROOT / "kb" / "57560.yaml")
    run = harness.build_case("cpu", record.case_inputs()["kimi_rocm_constructed_on_aiter"])
    # The case states `raised: RuntimeError` and `message`: the type and the first line apart.
    assert run.metadata["raised"] == "RuntimeError"
    assert ("RuntimeError: " + run.metadata["message"]).startswith(ROCM_ON_AITER)


def test_message_needs_raised_and_a_call_case_keeps_the_one_line_form(tmp_path):
    from gdn_review.kb.cases import Case

    with pytest.raises(ValueError, match="state both"):
        Case(id="c", text="t", rows=[{"seq_len": 1, "query_len": 1}], expect={"message": "m"})
    call = {"function": "plan_flashinfer_checkpoints", "arguments": {}}
    with pytest.raises(ValueError, match="not `message`"):
        Case(id="c", text="t", call=call, expect={"raised": "KeyError", "message": "m"})


def test_attributes_are_measured_from_the_real_builder_and_an_absent_one_names_its_error():
    from gdn_review import harness

    case = {
        "builder": "KimiK3KDAMetadataBuilder",
        "speculative_tokens": 2,
        "mamba_cache_mode": "none",
        "rows": [{"seq_len": 9, "query_len": 3, "drafted": 2}],
        "builder_fields": ["layer_names", "device", "_cudagraph_support", "kernel_block_size"],
        "raises": True,
    }
    measured = harness.build_case("cpu", case, count_ops=False).metadata
    assert measured["layer_names"] == ["model.layers.0.linear_attn"]
    assert measured["device"] == "cpu"
    assert measured["_cudagraph_support"] in {
        "ALWAYS",
        "UNIFORM_BATCH",
        "UNIFORM_SINGLE_TOKEN_DECODE",
    }
    # No builder of the family has a kernel block size: it reads as absent, with the error.
    assert measured["kernel_block_size"] == (
        "(no such field: AttributeError: 'KimiK3KDAMetadataBuilder' object has no attribute "
        "'kernel_block_size')"
    )
    assert measured["raised"] is None


@pytest.mark.slow
def test_54636_fails_on_0_29_0_with_the_real_attribute_error_and_holds_on_0_30_0(tmp_path):
    """The record's generated module on the PR's base and head, every claim checked (as the
    matrix checks the base): on 0.29.0 both claims fail, naming the AttributeError."""
    results = {}
    for release in ("0.29.0", "0.30.0"):
        env = release_trees.environment(release_trees.tree(release))
        env[CLAIMS_ON_ANY_RELEASE] = "1"
        done = interrupts.run_child(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
            + ["generated_tests/test_pr_54636.py", "-k", "equivalence"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        results[release] = done
    assert results["0.30.0"].returncode == 0, results["0.30.0"].stdout[-2000:]
    assert "2 passed" in results["0.30.0"].stdout
    failed = results["0.29.0"].stdout
    assert "2 failed" in failed, failed[-2000:]
    assert (
        "object has no attribute 'layer_names'" in failed and "'KimiK3KDAMetadataBuilder'" in failed
    )
