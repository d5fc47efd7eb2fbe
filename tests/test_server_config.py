"""The builder as a GPU server configures it: each record field reaches the builder's real code.

For each field that configures the builder as a server does (kb/server_config.py), the
builder's use of that configuration is broken by hand in 0.33.0's real gdn_attn.py (in a
child on 0.33.0 from the release cache, forked after vLLM is imported; no file is touched;
0.33.0 is the newest release that still reads every field: 0.34.0 has one model runner), and the
generated modules of the records that state it must fail. A field the builder did not
really see would let its mutant pass.
"""

from __future__ import annotations

import pytest

from gdn_review.common import release_trees
from gdn_review.kb import RecordErrors
from gdn_review.kb.load import parse_record
from tests.conftest import ROOT
from tests.forked_mutants import run_mutants

# The release whose gdn_attn.py the edits are written against (run from the release cache).
RELEASE = "0.33.0"
# field -> the edits that break the builder's use of it (0.33.0's text).
BREAKS = {
    # FlashInfer as vLLM resolves it on Hopper: __init__ no longer enables the plan.
    "resolved_prefill_backend": [
        (
            'self.gdn_prefill_backend == "flashinfer"\n            and checkpoint_alignment',
            'self.gdn_prefill_backend == "flashinfer_"\n            and checkpoint_alignment',
        )
    ],
    # Prefix caching in align mode: the checkpoint is never built.
    "prefix_caching": [
        ("checkpoint = self.checkpoint_builder.build(m, request_rows)", "checkpoint = None")
    ],
    # The V2 runner: supports_update_block_table no longer needs a CUDA device.
    "model_runner": [
        (
            'vllm_config.use_v2_model_runner\n            and device.type == "cuda"',
            'vllm_config.use_v2_model_runner\n            or device.type == "cuda"',
        )
    ],
    # The V2 runner's aligned state indices: build() reads the block table instead.
    "aligned_state_indices": [
        (
            "block_table_tensor = aligned_state_indices[: m.num_reqs]",
            "block_table_tensor = m.block_table_tensor[: m.num_reqs]",
        )
    ],
    # The other group's aligned indices: update_block_table keeps the table it was given.
    "second_builder.aligned_state_indices": [
        ("            blk_table = self.mamba_aligned_state_indices\n", "")
    ],
    # A host function on its own: the plan's stride is not the offsets' gcd.
    "call": [("every_n_tokens = math.gcd(*offsets)", "every_n_tokens = max(offsets)")],
    # The override check on a class named by the call: it no longer refuses a subclass.
    "call.arguments.builder_cls": [
        ('if backend != "aiter_flydsl":', 'if backend != "aiter_flydsl" or True:')
    ],
    # FULL and FULL_DECODE_ONLY: staging only under FULL_AND_PIECEWISE.
    "cudagraph_mode": [
        (
            "self.compilation_config.cudagraph_mode.has_full_cudagraphs()",
            'self.compilation_config.cudagraph_mode.name == "FULL_AND_PIECEWISE"',
        )
    ],
}
# Cheapest first: under -x a mutant's run stops at its first failing test, so it runs only the
# modules before the one that catches it. update_block_table (its invariants and boundary
# batches are most of the baseline's time) comes last: only the fields it alone catches run it.
MODULES = [
    "generated_tests/test_pr_57560.py",
    "generated_tests/test_pr_56960.py",
    "generated_tests/test_contract_full_graph_staging.py",
    "generated_tests/test_contract_flashinfer_checkpoint_plan.py",
    "generated_tests/test_contract_update_block_table.py",
]
PYTEST_ARGS = [
    *MODULES,
    "-q",
    "-p",
    "no:cacheprovider",
    "--gdn-no-evidence",
    "-k",
    "cpu and not snapshot",
    "-x",
]
PRELOAD = (
    "gdn_review.harness",
    "vllm.config",
    "vllm.v1.attention.backend",
    "vllm.v1.kv_cache_interface",
    "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    "vllm.models.kimi_k3.amd.kda_metadata",
)


@pytest.fixture(scope="module")
def broken_runs(tmp_path_factory):
    chosen = {
        field: [[find, replace, 1] for find, replace in edits] for field, edits in BREAKS.items()
    }
    runs = run_mutants(
        chosen,
        PYTEST_ARGS,
        ROOT,
        tmp_path_factory.mktemp("server"),
        env=release_trees.environment(release_trees.tree(RELEASE)),
        preload=PRELOAD,
        clear=(("gdn_review.harness.builders", "make_builder"),),
    )
    assert runs["(baseline)"]["returncode"] == 0, (
        "the generated modules must pass unbroken:\n" + runs["(baseline)"]["stdout"][-3000:]
    )
    return runs


@pytest.mark.slow
@pytest.mark.xdist_group("server-config-breaks")  # one worker: one vLLM import
@pytest.mark.parametrize("field", sorted(BREAKS))
def test_breaking_the_builders_use_of_a_server_field_fails_its_records(field, broken_runs):
    done = broken_runs[field]
    assert done["returncode"] == 1, (
        f"expected failing tests (exit 1), got {done['returncode']}:\n{done['stdout'][-3000:]}"
    )
    assert "failed" in done["stdout"].strip().splitlines()[-1]


# --- What vLLM refuses is a record error, at file:line:col -------------------------------

BASE = """\
schema_version: 1
contract: {{id: server_probe, title: t, releases: ">=0.31"}}
target: {{file: vllm/v1/attention/backends/gdn_attn.py, symbol: GDNAttentionMetadataBuilder.build}}
claims:
  - id: C1
    text: t
    check: {{kind: equivalence, cases: [a], fields: [checkpoint_offsets]}}
cases:
  - id: a
    text: t
{case}    rows:
      - {{seq_len: 9, query_len: 1, prefilling: false}}
      - {{seq_len: 300, query_len: 300}}
    expect: {{checkpoint_offsets: null}}
"""
PC = "{hash_block_size: 64, cache_hit_alignment_tokens: 64, prefill_checkpoint_alignment: 64}"


@pytest.mark.parametrize(
    "case, where, message",
    [
        (
            "    block_size: 64\n    max_model_len: 1024\n    "
            f"mamba_cache_mode: none\n    prefix_caching: {PC}\n",
            "cases[0].mamba_cache_mode",
            "prefix_caching is mamba align mode",
        ),
        (
            "    block_size: 96\n    max_model_len: 1024\n    "
            "prefix_caching: {hash_block_size: 64, "
            "cache_hit_alignment_tokens: 64}\n",
            "cases[0].prefix_caching.hash_block_size",
            "not a multiple of hash_block_size",
        ),
        (
            "    block_size: 64\n    max_model_len: 1024\n    "
            "prefix_caching: {hash_block_size: 64, "
            "cache_hit_alignment_tokens: 96}\n",
            "cases[0].prefix_caching.cache_hit_alignment_tokens",
            "cache hits land on hash blocks",
        ),
        (
            "    block_size: 64\n    max_model_len: 1024\n    "
            f"prefix_caching: {PC}\n    aligned_state_indices: [[1], [2]]\n",
            "cases[0].aligned_state_indices",
            "only the V2 model runner",
        ),
        (
            "    max_model_len: 1024\n    model_runner: v2\n    "
            "aligned_state_indices: [[1], [2]]\n",
            "cases[0].aligned_state_indices",
            "only in mamba align mode",
        ),
        (
            "    block_size: 64\n    max_model_len: 1024\n    "
            f"prefix_caching: {PC}\n    model_runner: v2\n    "
            "aligned_state_indices: [[1], [2], [3]]\n",
            "cases[0].aligned_state_indices",
            "3 rows of aligned indices for 2 requests",
        ),
        (
            "    resolved_prefill_backend: tilelang\n    max_model_len: 1024\n",
            "cases[0].resolved_prefill_backend",
            "Input should be",
        ),
    ],
)
def test_a_server_configuration_vllm_refuses_is_a_record_error(case, where, message):
    with pytest.raises(RecordErrors) as caught:
        parse_record(BASE.format(case=case), "kb/server_probe.yaml")
    found = [str(e) for e in caught.value.errors]
    assert any(f": {where}: " in e and message in e for e in found), found
    assert all(e.startswith("kb/server_probe.yaml:") for e in found)


def test_a_call_case_takes_no_batch_and_names_only_vllms_classes():
    call = (
        "    call: {function: "
        "GDNAttentionMetadataBuilder._check_chunk_metadata_override, "
        "arguments: {builder_cls: os.system, backend: x}}\n"
    )
    text = BASE.format(case=call).replace(
        "    rows:\n      - {seq_len: 9, query_len: 1, prefilling: "
        "false}\n      - {seq_len: 300, query_len: 300}\n",
        "",
    )
    with pytest.raises(RecordErrors) as caught:
        parse_record(text, "kb/server_probe.yaml")
    assert any("not a builder class a call can pass" in str(e) for e in caught.value.errors)
    both = BASE.format(
        case="    call: {function: plan_flashinfer_checkpoints, arguments: "
        "{offsets: [64], query_lens: [100]}}\n"
    )
    with pytest.raises(RecordErrors) as caught:
        parse_record(both, "kb/server_probe.yaml")
    assert any("give it no rows" in str(e) for e in caught.value.errors)


def test_configuration_words_name_the_server_and_say_no_kernel_runs():
    from gdn_review.kb import load_record

    record = load_record(ROOT / "kb" / "flashinfer_checkpoint_plan.yaml")
    words = record.case("flashinfer_first_chunk").configuration()
    assert words.startswith(
        "configured as on CUDA: prefill backend flashinfer; prefix caching in align mode"
    )
    assert words.endswith("no kernel runs")
    assert (
        record.case("plan_one_checkpoint")
        .configuration()
        .startswith("host function plan_flashinfer_checkpoints called on its own")
    )
    assert (
        load_record(ROOT / "kb" / "57560.yaml")
        .case("aiter_decodes")
        .configuration()
        .startswith("configured as on ROCm")
    )


def test_a_contracts_claims_skip_outside_its_releases():
    # The FlashInfer plan is 0.33.0's: on 0.32.0 its claims are not applicable, never failures.
    from gdn_review.kb import load_record

    record = load_record(ROOT / "kb" / "flashinfer_checkpoint_plan.yaml")
    assert {record.claim_releases(claim) for claim in record.claims} == {">=0.33"}
    module = (ROOT / "generated_tests" / "test_contract_flashinfer_checkpoint_plan.py").read_text(
        encoding="utf-8"
    )
    assert module.count("harness.skip_outside_claim_releases('>=0.33', ") == len(record.claims)


def test_the_harness_measures_exactly_the_server_expect_fields():
    # The harness (exported, so it cannot import the KB) and the record format name them apart.
    from gdn_review.harness.server import server_fields
    from gdn_review.kb.server_config import SERVER_EXPECT_FIELDS

    assert set(server_fields(None, object())) == set(SERVER_EXPECT_FIELDS)


def test_the_resolved_backends_are_those_the_installed_release_returns():
    """A record may state every GDN prefill backend the installed release's resolver returns, and
    no other: kb's list is the Literal of _resolve_gdn_prefill_backend's return annotation, read
    from the release's file (0.34.0 added sycl and hip), so a release that adds one fails here."""
    import ast
    import importlib.util
    from pathlib import Path
    from typing import get_args

    from gdn_review.kb.server_config import BACKEND_DEVICE, ResolvedBackend

    package = Path(importlib.util.find_spec("vllm").origin).parent
    source = (package / "model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py").read_text()
    (resolver,) = [
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef) and node.name == "_resolve_gdn_prefill_backend"
    ]
    returned = {
        value.value
        for literal in ast.walk(resolver.returns)
        if isinstance(literal, ast.Subscript) and ast.unparse(literal.value) == "Literal"
        for value in ast.walk(literal.slice)
        if isinstance(value, ast.Constant)
    }
    assert returned == set(get_args(ResolvedBackend)) == set(BACKEND_DEVICE), returned
