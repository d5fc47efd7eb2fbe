"""The generated suite must fail when the builder is broken the way a risk says.

Each mutant of kb/52078.yaml that applies to the loaded vLLM is applied to the
real gdn_attn.py source in a child forked after vLLM is imported (the module is
compiled from the edited text and put in sys.modules; the installed file is
never touched), then the generated module runs on CPU. It must fail.
"""

from __future__ import annotations

import pytest

from gdn_review import harness
from gdn_review.kb import load_record
from tests.conftest import ROOT
from tests.forked_mutants import run_mutants

RECORD = load_record(ROOT / "kb" / "52078.yaml")
# The two hand edits of the acceptance list, from the record...
MUTANTS = [
    pytest.param([(mutant.find, mutant.replace)], mutant.releases, id=f"{risk.id}-{mutant.id}")
    for risk in RECORD.risks
    for mutant in risk.mutants
    if mutant.id in {"ge_to_gt", "drop_non_spec_invert"}
]
# ...and breakages a review found surviving an earlier suite (for vLLM >= 0.29).
MUTANTS += [
    pytest.param(
        [
            (
                "query_lens_cpu[non_spec_sequence_masks_cpu],\n",
                "query_lens_cpu[~spec_sequence_masks_cpu],\n",
            ),
            (
                "query_lens[non_spec_sequence_masks_cpu],\n",
                "query_lens[~spec_sequence_masks_cpu],\n",
            ),
        ],
        ">=0.29",
        id="partial-revert-changes-the-known-deviation",
    ),
    pytest.param(
        [
            (
                "non_spec_query_lens_cpu = query_lens_cpu[non_spec_sequence_masks_cpu]",
                "non_spec_query_lens_cpu = query_lens_cpu[spec_sequence_masks_cpu.logical_not()]",
            )
        ],
        ">=0.29",
        id="inversion-recomputed-with-logical_not",
    ),
    pytest.param(
        [
            (
                "non_spec_token_indx = index[:num_non_spec_tokens]\n             "
                "   spec_token_indx = index[num_non_spec_tokens:]",
                "spec_token_indx = index[:num_spec_decode_tokens]\n              "
                "  non_spec_token_indx = index[num_spec_decode_tokens:]",
            )
        ],
        ">=0.29",
        id="spec-and-non-spec-token-indices-swapped",
    ),
    pytest.param(
        [
            (
                "spec_sequence_masks_cpu, : self.num_spec + 1\n                ]",
                "spec_sequence_masks_cpu, :1\n                ]",
            )
        ],
        ">=0.29",
        id="spec-state-keeps-one-slot",
    ),
]

PYTEST_ARGS = [
    "generated_tests/test_pr_52078.py",
    "-q",
    "-p",
    "no:cacheprovider",
    "--gdn-no-evidence",
    "-k",
    "cpu",
    "-x",
]
PRELOAD = (
    "gdn_review.harness",
    "vllm.config",
    "vllm.v1.attention.backend",
    "vllm.v1.kv_cache_interface",
)


@pytest.fixture(scope="module")
def mutant_runs(tmp_path_factory):
    """Every applicable mutant's pytest run, all in one interpreter that imports vLLM once."""
    chosen = {
        p.id: [[find, replace, 1] for find, replace in p.values[0]]
        for p in MUTANTS
        if harness.release_in_range(p.values[1])
    }
    runs = run_mutants(
        chosen,
        PYTEST_ARGS,
        ROOT,
        tmp_path_factory.mktemp("mutants"),
        preload=PRELOAD,
        clear=(("gdn_review.harness.builders", "make_builder"),),
    )
    assert runs["(baseline)"]["returncode"] == 0, "the generated suite must pass without a mutant"
    return runs


@pytest.mark.slow
@pytest.mark.xdist_group("generated-suite-mutants")  # one worker runs them all: one vLLM import
@pytest.mark.parametrize("edits, releases", MUTANTS)
def test_generated_suite_fails_on_mutant(edits, releases, mutant_runs, request):
    if not harness.release_in_range(releases):
        pytest.skip(f"this mutant is written for vLLM {releases}")
    done = mutant_runs[request.node.callspec.id]
    assert done["returncode"] == 1, (
        f"expected failing tests (exit 1), got {done['returncode']}:\n{done['stdout'][-3000:]}"
    )
    assert "failed" in done["stdout"].strip().splitlines()[-1]
