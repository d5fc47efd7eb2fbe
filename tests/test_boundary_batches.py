"""Boundary batches and seeded examples: what an invariant checks does not depend on luck.

- Every invariant also runs the boundary batches of its own parameters (named, the same on
  every run): the capture bound made strict fails through one of them.
- Its random examples are seeded from the record and the claim: editing a template's text
  leaves the batches drawn unchanged (Hypothesis's ``derandomize`` seeded from the test
  function's source, and lost the one example that reached the capture bound).
"""

from __future__ import annotations

import shutil
import types

import pytest

from gdn_review import generate, harness
from gdn_review.generate.model import claim_seed
from gdn_review.kb import load_record
from tests.conftest import ROOT
from tests.forked_mutants import run_mutants


def test_boundaries_stand_on_the_capture_bound_in_requests_and_tokens():
    found = harness.boundary_batches(speculative_tokens=[1, 2], max_rows=8)
    names = list(found)
    assert "8 rows (max_rows); 8 rows at the capture bound in tokens (16), k=1" in names
    assert "only padding (1 padded row), no speculation" in names
    at_tokens = found["8 rows (max_rows); 8 rows at the capture bound in tokens (16), k=1"]
    assert sum(row["query_len"] for row in at_tokens["rows"]) == 16 == 8 * (1 + 1)
    for name, batch in found.items():
        bound = harness.properties.capture_bound(batch)
        requests = len(batch["rows"]) + batch["padded_rows"]
        tokens = sum(row["query_len"] for row in batch["rows"])
        if "one above the capture bound in tokens" in name:
            assert tokens == bound + 1, name
        if "one above the capture bound in requests" in name:
            assert (requests, tokens) == (bound + 1, bound), name
        if "at the capture bound in requests" in name:
            assert requests == bound, name
        assert batch["boundary"] == name
    # From the parameters alone: the same set on every call, k's order aside.
    assert harness.boundary_batches([2, 1], 8) == found


def test_boundary_ids_are_short_and_distinct():
    params = harness.boundary_params(harness.boundary_batches([1, 2, 3], 8))
    ids = [param.id for param in params]
    assert len(set(ids)) == len(ids)
    assert all(
        set(i) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789=-")
        for i in ids
    )


def _module(source: str, path):
    """The module imported from a file of its own: Hypothesis reads a test's source from its
    file (inspect.getsource), as it does for the generated suite."""
    import importlib.util

    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _drawn(module, function: str, prop: str) -> list[dict]:
    """The batches the module's invariant test is given, in order (the harness's body is
    replaced by a recorder: only the drawing is under test here)."""
    seen = []

    def record(device, prop, deviation, batch, cases, record_property):
        seen.append(batch)

    module.harness = types.SimpleNamespace(check_invariant=record)
    getattr(module, function)(
        device="cpu",
        prop=prop,
        **{f"claim_{function.split('_')[1]}": None},
        record_property=lambda *a: None,
    )
    return seen


def test_a_template_edit_leaves_the_examples_drawn_unchanged(tmp_path):
    record = load_record(ROOT / "kb" / "55404.yaml")
    source = generate.render_module(record, "kb/55404.yaml")
    edited_templates = tmp_path / "templates"
    shutil.copytree(ROOT / "templates", edited_templates)
    template = edited_templates / "checks" / "invariant.py.j2"
    text = template.read_text()
    anchor = '    """invariant: properties of build() on every valid batch'
    assert anchor in text
    # The test function's text changes (a docstring and a comment), as a template edit would.
    template.write_text(
        text.replace(
            anchor, "    # an edit of the template's text\n" + anchor.replace("every", "each")
        )
    )
    edited = generate.render_module(record, "kb/55404.yaml", templates=edited_templates)
    assert edited != source
    first = _drawn(
        _module(source, tmp_path / "first_module.py"), "test_C3_invariant", "capture_matches_build"
    )
    second = _drawn(
        _module(edited, tmp_path / "second_module.py"), "test_C3_invariant", "capture_matches_build"
    )
    assert len(first) >= 15
    assert first == second
    # The seed is the record's and the claim's: another claim draws other batches.
    assert claim_seed(55404, "C3") != claim_seed(55404, "C4")
    assert f"@seed({claim_seed(55404, 'C3')})" in source


PYTEST_ARGS = [
    "generated_tests/test_pr_55404.py",
    "-q",
    "-p",
    "no:cacheprovider",
    "--gdn-no-evidence",
    "-k",
    "C3 and cpu",
]


@pytest.mark.slow
@pytest.mark.xdist_group("boundary-mutants")
def test_the_capture_bound_made_strict_fails_through_a_named_boundary_batch(tmp_path):
    """The two survivors of bdd4333's whole-file score (vLLM >= 0.31), killed by a boundary
    batch, whatever the random examples are."""
    if not harness.release_in_range(">=0.31"):
        pytest.skip("build_for_cudagraph_capture's bound is written so from vLLM 0.31")
    mutants = {
        "requests-strict": [
            [
                "m.num_reqs <= self.decode_cudagraph_max_bs",
                "m.num_reqs < self.decode_cudagraph_max_bs",
                1,
            ]
        ],
        "tokens-strict": [
            [
                "m.num_actual_tokens <= self.decode_cudagraph_max_bs",
                "m.num_actual_tokens < self.decode_cudagraph_max_bs",
                1,
            ]
        ],
    }
    # Only the boundary test: the random examples and named cases are left out on purpose.
    runs = run_mutants(
        mutants,
        [*PYTEST_ARGS[:-1], "C3 and cpu and boundary"],
        ROOT,
        tmp_path,
        preload=("gdn_review.harness",),
        clear=(("gdn_review.harness.builders", "make_builder"),),
    )
    assert runs["(baseline)"]["returncode"] == 0, runs["(baseline)"]["stdout"][-2000:]
    # (pytest's ids of the boundary batches: their names, dashed)
    expected = {
        "requests-strict": "8-one-token-rows-at-the-capture-bound-in-requests-8-no-speculation",
        "tokens-strict": "8-rows-max-rows-8-rows-at-the-capture-bound-in-tokens-16-k=1",
    }
    for ident, boundary in expected.items():
        done = runs[ident]
        assert done["returncode"] == 1, done["stdout"][-2000:]
        failed = [line for line in done["stdout"].splitlines() if line.startswith("FAILED")]
        assert any(boundary in line for line in failed), failed
        assert "fails on boundary batch '" in done["stdout"], done["stdout"][-3000:]


# --- The builder family's differential (mirrors_gdn, issue 46) --------------------------

KDA = "KimiK3KDAMetadataBuilder"
MIRROR_FIELDS = ["num_prefills", "num_decodes", "num_spec_decodes", "num_prefill_tokens"]
# One plain one-token decode beside a spec decode (#34871's mixed_decode_and_spec_decode):
# GDN reclassifies the decode as a prefill, Kimi-K3's nvidia builder keeps it a decode.
MIXED = {
    "speculative_tokens": 2,
    "rows": [{"seq_len": 65, "query_len": 1}, {"seq_len": 20, "query_len": 3, "drafted": 2}],
}
PURE_SPEC = {
    "speculative_tokens": 2,
    "rows": [
        {"seq_len": 50, "query_len": 3, "drafted": 2},
        {"seq_len": 30, "query_len": 3, "drafted": 2},
    ],
}


def _mirror(batch: dict, builder: str) -> None:
    """mirrors_gdn on ``batch`` built by ``builder``, as a generated invariant test runs it."""
    recorded = []
    part = {"builder": builder, "mamba_cache_mode": "none", "mirror_fields": MIRROR_FIELDS}
    harness.check_invariant(
        "cpu",
        "mirrors_gdn",
        None,
        batch,
        {"mixed": MIXED},
        lambda *p: recorded.append(p),
        builder=part,
    )
    # The evidence names the builder (the matrix's column per builder reads it).
    assert recorded[0] == (
        "measured",
        {
            "property": "mirrors_gdn",
            "builder": builder,
            "compared_with": "GDNAttentionMetadataBuilder",
        },
    )


def test_decodes_only_draws_no_prefill_and_leaves_out_the_prefill_boundary():
    import random

    from gdn_review.harness.strategies import draw_batch

    found = harness.boundary_batches(speculative_tokens=[1, 2], max_rows=4, decodes_only=True)
    assert found and not any("prefill" in name for name in found)
    rng = random.Random(7)
    drawn = [draw_batch(rng.randint, rng.choice, [1, 2], 6, decodes_only=True) for _ in range(30)]
    for batch in [*found.values(), *drawn]:
        for row in batch["rows"]:  # a spec decode, or a plain one-token decode
            assert row.get("drafted") is not None or (
                row["query_len"] == 1 and row["prefilling"] is False
            ), batch


def test_mirrors_gdn_holds_where_the_subclass_mirrors_and_names_the_difference_where_not():
    _mirror(PURE_SPEC, KDA)  # the same classification: holds
    _mirror(MIXED, "GDNAttentionMetadataBuilder")  # GDN against itself: holds
    with pytest.raises(AssertionError) as failed:
        _mirror(MIXED, KDA)  # the real nvidia builder keeps the decode: #34871's deviation
    message = str(failed.value)
    assert message.startswith(
        f"mirrors_gdn fails on case mixed: {KDA} differs from GDNAttentionMetadataBuilder"
    )
    assert "num_prefills: 0, GDN's 1" in message and "num_decodes: 1, GDN's 0" in message


def test_a_mirror_claim_needs_a_subclass_and_its_fields():
    from pydantic import ValidationError

    from gdn_review.kb.checks import InvariantCheck

    with pytest.raises(ValidationError, match="name it in builder"):
        InvariantCheck(kind="invariant", properties=["mirrors_gdn"], fields=["num_decodes"])
    with pytest.raises(ValidationError, match="list them in fields"):
        InvariantCheck(kind="invariant", properties=["mirrors_gdn"], builder=KDA)
    with pytest.raises(ValidationError, match="add it to properties"):
        InvariantCheck(kind="invariant", properties=["partition"], fields=["num_decodes"])
    InvariantCheck(
        kind="invariant", properties=["mirrors_gdn"], builder=KDA, fields=["num_decodes"]
    )


# --- Checkpoint strides: boundaries from every bound a configuration names (issue 55) ---

CHECKPOINTS = {
    "block_size": 64,
    "max_model_len": 1024,
    "prefix_caching": {
        "hash_block_size": 64,
        "cache_hit_alignment_tokens": 64,
        "num_prefill_checkpoint_blocks": 1,
        "prefill_checkpoint_alignment": 64,
    },
}


def test_a_checkpoint_configuration_adds_prefills_at_one_short_of_and_one_past_the_stride():
    found = harness.boundary_batches([1, 2], 4, configuration=CHECKPOINTS)
    strides = {name: batch for name, batch in found.items() if "checkpoint stride" in name}
    edges = {"at": 0, "one short of": -1, "one past": 1}
    for edge, delta in edges.items():
        for padded in (0, 1):
            named = [
                batch
                for name, batch in strides.items()
                if f"prefills ending {edge} the checkpoint stride" in name
                and ("+ 1 padded" in name) == bool(padded)
            ]
            assert named, (edge, padded, list(strides))
            for batch in named:
                assert batch["padded_rows"] == padded
                prefills = [
                    row
                    for row in batch["rows"]
                    if row.get("drafted") is None and row.get("prefilling") is not False
                ]
                # First chunks and a continuing chunk, each ending on the edge of a stride.
                assert {row["seq_len"] % 64 for row in prefills} == {delta % 64}
                assert any(row["seq_len"] == row["query_len"] for row in prefills)
                assert any(row["seq_len"] > row["query_len"] for row in prefills)
    # Without checkpoints (no alignment, or no prefix caching) the stride names no batch.
    plain = dict(CHECKPOINTS, prefix_caching={"hash_block_size": 64})
    for configuration in (None, plain, {"mamba_cache_mode": "none"}):
        found = harness.boundary_batches([1, 2], 4, configuration=configuration)
        assert not any("checkpoint stride" in name for name in found)
    # decodes_only draws no prefill: none of these either.
    found = harness.boundary_batches([1], 4, configuration=CHECKPOINTS, decodes_only=True)
    assert not any("checkpoint stride" in name for name in found)


@pytest.mark.slow
@pytest.mark.xdist_group("boundary-mutants")
def test_the_checkpoint_stride_miscounted_fails_through_a_named_boundary_batch(tmp_path):
    """FlashInfer's checkpoint plan counts the states its prefill emits, one every N tokens
    of a sequence (plan_flashinfer_checkpoints, vLLM >= 0.33): counted one short where a
    prefill ends exactly on the stride, the boundary batch at the stride fails and those one
    short of and one past it do not, whatever the random examples are."""
    if not harness.release_in_range(">=0.33"):
        pytest.skip("plan_flashinfer_checkpoints is in gdn_attn.py from vLLM 0.33")
    find = "cu_starts.append(cu_starts[-1] + query_len // every_n_tokens)"
    mutants = {
        "stride-count-short": [[find, find.replace("query_len //", "(query_len - 1) //"), 1]],
    }
    runs = run_mutants(
        mutants,
        [
            "generated_tests/test_contract_flashinfer_checkpoint_plan.py",
            "-q",
            "-p",
            "no:cacheprovider",
            "--gdn-no-evidence",
            "-k",
            "C5 and cpu and boundary",
        ],
        ROOT,
        tmp_path,
        preload=("gdn_review.harness",),
        clear=(("gdn_review.harness.builders", "make_builder"),),
    )
    assert runs["(baseline)"]["returncode"] == 0, runs["(baseline)"]["stdout"][-2000:]
    done = runs["stride-count-short"]
    assert done["returncode"] == 1, done["stdout"][-2000:]
    failed = [line for line in done["stdout"].splitlines() if line.startswith("FAILED")]
    # A padded row (query length 0) counts -1 states under this mutant, so every padded batch
    # fails; of the batches without padding, exactly those whose prefills end at the stride.
    unpadded = [line for line in failed if "1-padded" not in line]
    assert unpadded and all("ending-at-the-checkpoint-stride" in line for line in unpadded), failed
    assert "fails on boundary batch '" in done["stdout"], done["stdout"][-3000:]
