"""The only part of gdn-review that imports vLLM.

Generated tests import from here and nothing else of ours; the steps they all
share (applicability, known deviations, device set-up) are in pytest_checks.py.
Everything the harness returns is plain data (ints, lists, dicts), so a test
compares values, not tensors, and the evidence can be written as JSON.
"""

from gdn_review.harness.environment import prepare_platform, vllm_cache_per_release

# Before anything imports vLLM: it picks its platform once, at first import, and a
# test that reached vLLM through a helper that does not prepare it (a bare
# VllmConfig) left a whole pytest worker on the wrong platform.
vllm_cache_per_release()
prepare_platform()

from gdn_review.harness import properties as _properties
from gdn_review.harness.builders import BuilderSettings, make_builder, warm_up
from gdn_review.harness.case_build import (
    BuildRun,
    build_case,
    count_device_origin_reads,
    count_sync_warnings,
    op_counts,
    prepare_builders,
    snapshot_case,
)
from gdn_review.harness.environment import (
    cuda_skip_reason,
    device_skip_reason,
    environment,
    prepare_platform,
    target_source,
    vllm_release,
)
from gdn_review.harness.pytest_checks import (
    check_deviation_unchanged,
    known_deviation,
    prepare_device,
    skip_outside_claim_releases,
    skip_outside_releases,
)
from gdn_review.harness.release_ranges import (
    active_deviation,
    claim_in_range,
    release_in_range,
)
from gdn_review.harness.snapshot_compare import (
    field_differences,
    snapshot_differences,
    stored_snapshot,
)
from gdn_review.harness.strategies import random_batches


def check_property(
    name: str, batch: dict, run: BuildRun, cases: dict | None = None
) -> str | None:
    """Assert invariant ``name`` of one build (``check_<name>`` of
    harness/properties.py).

    Returns why the property says nothing of this batch's entry point (None: it was
    checked). A failure names the batch: the case of ``cases`` it is, or its rows.
    """
    __tracebackhide__ = True
    reason = _properties.not_applicable_reason(name, batch)
    if reason is not None:
        return reason
    try:
        getattr(_properties, "check_" + name)(batch, run)
    except AssertionError as error:
        # Reports show a failure's first line: the batch goes there, the rest after it.
        label, shape = batch_words(batch, cases or {})
        first, _, rest = str(error).strip().partition("\n")
        message = f"{name} fails on {label}: {first} ({shape})" + (
            f"\n{rest}" if rest else ""
        )
        raise AssertionError(message) from None
    return None


def batch_words(batch: dict, cases: dict) -> tuple[str, str]:
    """A batch as a report names it: the record's case it is (or "a generated batch"),
    and its shape."""
    named = next(
        (case_id for case_id, case in sorted(cases.items()) if case == batch), None
    )
    rows = ", ".join(
        f"({row['seq_len']}, {row['query_len']}, {row.get('drafted')})"
        for row in batch.get("rows", [])
    )
    k = batch.get("speculative_tokens")
    shape = f"rows (seq_len, query_len, drafted) [{rows}]" + (
        f", k = {k}" if k else ", no speculation"
    )
    if batch.get("padded_rows"):
        shape += f", {batch['padded_rows']} padded"
    if batch.get("drafts", "given") != "given":
        shape += f", drafts {batch['drafts']}"
    return (f"case {named}" if named else "a generated batch"), shape


__all__ = [
    "BuildRun",
    "BuilderSettings",
    "active_deviation",
    "build_case",
    "check_deviation_unchanged",
    "check_property",
    "claim_in_range",
    "count_device_origin_reads",
    "count_sync_warnings",
    "cuda_skip_reason",
    "device_skip_reason",
    "environment",
    "field_differences",
    "known_deviation",
    "make_builder",
    "op_counts",
    "prepare_builders",
    "prepare_device",
    "prepare_platform",
    "random_batches",
    "release_in_range",
    "skip_outside_claim_releases",
    "skip_outside_releases",
    "snapshot_case",
    "snapshot_differences",
    "stored_snapshot",
    "target_source",
    "vllm_release",
    "warm_up",
]
