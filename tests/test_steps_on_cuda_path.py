"""An engine step on the path CUDA takes, run on CPU (the first H200 run's 54 failures of #52297).

On a CUDA device 0.33.0's builder has ``supports_update_block_table`` (V2 runner, device cuda,
``gdn_attn.py`` lines 185-193), so a step's later group re-gathers with ``update_block_table``;
in align mode that asserts the aligned state indices the V2 runner hands every group's builder
first (``mamba_hybrid.py`` lines 303-318). Here the builders get what their ``__init__`` sets on
CUDA (the device check alone is emulated; the builders, the config and every call are vLLM's
own), and the step must give each group what build() gives it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys

import pytest

from gdn_review.harness.case_build import _step_builders
from gdn_review.harness.environment import prepare_platform
from gdn_review.harness.inputs import build_arguments
from gdn_review.harness.steps import STATE_INDEX_FIELDS, run_step, step_snapshot
from gdn_review.harness.values import snapshot
from tests.conftest import ROOT

# What update_block_table re-gathers; every other field is the first group's, shared.
REGATHERED = {*STATE_INDEX_FIELDS, "checkpoint"}


def _record_module():
    """#52297's generated module: its cases and its invariant's boundary batches."""
    path = ROOT / "generated_tests" / "test_pr_52297.py"
    spec = importlib.util.spec_from_file_location("pr_52297_on_cuda_path", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODULE = _record_module()
STEP_CASES = {
    name: MODULE.CASES[name] for name in ("mixed_step", "spec_only_step", "non_spec_step")
}
STEP_CASES.update({f"boundary:{name}": batch for name, batch in MODULE.BOUNDARIES_C5.items()})


def _step(case: dict, as_on_cuda: bool):
    """Run the case's step on CPU; ``as_on_cuda``: each builder as its __init__ leaves it on
    a CUDA device (supports_update_block_table, mamba_aligned_state_indices = None)."""
    import vllm

    prepare_platform()
    # The V2 runner as the case's model runner: the H200's default (its torch brings
    # Triton); without Triton, as here, vLLM falls back to V1. Only the builder's
    # construction reads it.
    builders, settings = _step_builders("cpu", dict(case, model_runner="v2"))
    if not hasattr(builders[0], "update_block_table"):
        pytest.skip(f"vLLM {vllm.__version__} has no update_block_table")
    for builder in builders:
        assert builder.supports_update_block_table is False  # CPU: the device check
        assert builder.vllm_config.cache_config.mamba_cache_mode == "align"
        if as_on_cuda:
            builder.supports_update_block_table = True
            builder.mamba_aligned_state_indices = None
    kwargs, _, columns = build_arguments(case, settings)
    # Which of the builders' own methods the step called, on which group's builder
    # (observed by the interpreter's profiler; nothing is replaced).
    groups, calls = {id(builder): group for group, builder in enumerate(builders)}, []

    def observe(frame, event, arg):
        code = frame.f_code
        if (
            event == "call"
            and code.co_name in ("build", "update_block_table")
            and code.co_filename.endswith("gdn_attn.py")
            and id(frame.f_locals.get("self")) in groups
        ):
            calls.append((groups[id(frame.f_locals["self"])], code.co_name))

    sys.setprofile(observe)
    try:
        metadatas, _ = run_step(builders, case, kwargs)
    finally:
        sys.setprofile(None)
    return metadatas, columns, calls


@pytest.mark.parametrize("name", sorted(STEP_CASES))
def test_a_later_group_re_gathers_as_on_cuda_and_gets_what_its_build_gives(name):
    case = STEP_CASES[name]
    offset = case.get("block_table_offset", 0)
    built, columns, built_calls = _step(case, as_on_cuda=False)
    regathered, _, calls = _step(case, as_on_cuda=True)
    assert built_calls == [(0, "build"), (1, "build")]
    # The second group re-gathered: the first group's metadata with its state indices
    # replaced (every other field the first group's own object).
    assert calls == [(0, "build"), (1, "update_block_table")]
    first, second = regathered
    assert all(
        getattr(second, field.name) is getattr(first, field.name)
        for field in dataclasses.fields(second)
        if field.name not in REGATHERED
    )
    # Each group: what build() gives it.
    for group in range(2):
        assert snapshot(regathered[group], columns) == snapshot(built[group], columns)
    # The second group's state indices come from its own table and, read as the first
    # group's entries, equal the first group's.
    data = step_snapshot(regathered, columns, offset)
    assert data["group_differences"] == [[]]
    assert data["group_state_tables"] == step_snapshot(built, columns, offset)["group_state_tables"]
