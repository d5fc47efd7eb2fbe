"""The only part of gdn-review that imports vLLM.

Generated tests import from here and nothing else of ours; the steps they all
share (applicability, known deviations, device set-up) are in pytest_checks.py.
Everything the harness returns is plain data (ints, lists, dicts), so a test
compares values, not tensors, and the evidence can be written as JSON.
"""

import re

import pytest

from gdn_review.harness.environment import prepare_platform, vllm_cache_per_release

# Before anything imports vLLM: it picks its platform once, at first import, and a
# test that reached vLLM through a helper that does not prepare it (a bare
# VllmConfig) left a whole pytest worker on the wrong platform.
vllm_cache_per_release()
prepare_platform()

from gdn_review.harness import properties as _properties
from gdn_review.harness.builders import (
    GDN_BUILDER,
    BuilderSettings,
    builder_class,
    engine_config,
    make_builder,
    warm_up,
)
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
    device_skip_reason,
    environment,
    prepare_platform,
    target_source,
    vllm_release,
)
from gdn_review.harness.pytest_checks import (
    check_deviation_unchanged,
    deviation_reason,
    known_deviation,
    prepare_device,
    skip_outside_claim_releases,
    skip_outside_releases,
)
from gdn_review.harness.release_ranges import active_deviation, release_in_range
from gdn_review.harness.server import expected_on
from gdn_review.harness.snapshot_compare import (
    expect_differences,
    field_differences,
    snapshot_differences,
    stored_snapshot,
)
from gdn_review.harness.strategies import boundary_batches, configured, random_batches
from gdn_review.harness.values import describe_differences, stored_form


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


def check_invariant(
    device, prop, deviation, batch, cases, record_property, builder=None
) -> None:
    """One invariant test's body: property ``prop`` on one batch (a named case, a random
    example or a boundary batch), under the claim's known ``deviation`` (or None).

    ``builder``: the claim's builder part (``BUILDER_<claim>`` of the generated module:
    an in-tree subclass of GDNAttentionMetadataBuilder, the fields ``mirrors_gdn``
    compares with GDN's own build, the claim's configuration): every batch, the named
    cases too, is built by that class in that configuration (``strategies.configured``),
    and the evidence names it; a release without the class skips the test as not
    applicable.

    The batch is recorded before anything runs, and again as ``failed_batch`` when
    the check fails: Hypothesis replays the shrunk failing example last, and runs the
    explicit examples after a failing one, so a failed test's last ``failed_batch`` is
    the batch that failed.
    """
    __tracebackhide__ = True
    measured = {"property": prop}
    if builder is not None:
        builder_class(builder["builder"])  # a skip where the release has no such class
        batch = configured(batch, builder)
        cases = {case_id: configured(case, builder) for case_id, case in cases.items()}
        measured.update(builder=builder["builder"], compared_with=GDN_BUILDER)
    record_property("measured", measured)
    record_property("batch", batch)
    try:
        _check_one(device, prop, deviation, batch, cases, record_property)
    except (Exception, pytest.fail.Exception):
        record_property("failed_batch", batch)
        raise


def _check_one(device, prop, deviation, batch, cases, record_property) -> None:
    __tracebackhide__ = True
    if not release_in_range(batch.get("releases")):
        # A named case outside this release says nothing here.
        record_property(
            "not_applicable",
            f"a case covers vLLM {batch['releases']}; loaded {vllm_release()}",
        )
        return
    try:
        run = build_case(device, batch, count_ops=False)
    except pytest.skip.Exception as skip:  # a case this release cannot run
        record_property("not_applicable", str(skip))
        return
    except AssertionError as error:
        if batch.get("builder") is None:
            raise
        # A crash of the subclass's build() is an error, never its known deviation
        # (which xfails on a failed assertion).
        raise RuntimeError(
            f"{batch['builder']}.build() raised AssertionError: {error}"
        ) from error
    if deviation is not None and deviation.get("instead"):
        try:
            check_property(deviation["instead"], batch, run, cases)
        except AssertionError as error:  # what holds instead must hold: a real failure
            pytest.fail(
                f"{deviation['instead']} (which holds instead of {prop}) fails: "
                f"{error}",
                pytrace=False,
            )
    # A property that says nothing of this batch's entry point returns why.
    try:
        not_applicable = check_property(prop, batch, run, cases)
    except AssertionError as error:
        if deviation is None or not batch.get("boundary"):
            raise
        # A boundary batch the known deviation concerns (see known_deviation).
        first = str(error).strip().splitlines()[0]
        pytest.xfail(f"{deviation_reason(deviation)}; here: {first}")
    if not_applicable is not None:
        record_property("not_applicable", not_applicable)


def boundary_params(boundaries: dict[str, dict]) -> list:
    """The boundary batches as pytest parameters: the name as the value (the evidence
    keeps it), a short id of letters, digits and dashes for the command line."""
    return [
        pytest.param(name, id=re.sub(r"[^A-Za-z0-9=]+", "-", name).strip("-"))
        for name in boundaries
    ]


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
    if batch.get("boundary"):
        return f"boundary batch '{batch['boundary']}'", shape
    return (f"case {named}" if named else "a generated batch"), shape


__all__ = [
    "BuilderSettings",
    "active_deviation",
    "boundary_batches",
    "boundary_params",
    "check_invariant",
    "build_case",
    "check_deviation_unchanged",
    "check_property",
    "count_device_origin_reads",
    "count_sync_warnings",
    "describe_differences",
    "device_skip_reason",
    "environment",
    "expect_differences",
    "expected_on",
    "field_differences",
    "known_deviation",
    "engine_config",
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
    "stored_form",
    "stored_snapshot",
    "target_source",
    "vllm_release",
    "warm_up",
]
