"""What a case can measure: its ``expect`` keys by case kind, and the names its ``needs`` lists.

A check compares the fields a case's ``expect`` states with what the harness measured
(``harness.case_build.build_case``); a key the case's kind never measures is a
``KeyError`` inside the check at run time, so it is a record error here, at its line:

- a batch case (rows: ``entry`` build, capture or update_block_table) measures the
  metadata its entry point returns (``harness.values.snapshot``: the fields of
  ``GDNAttentionMetadata`` and the rows, cells and path derived from them), and where
  it states one, the builder's attributes, a server configuration's parts and the
  layout fields; with ``raised`` (and ``message``), what constructing the builder and
  calling its entry point raise, and where that raises, nothing else;
- a case with a ``step`` measures the first group's metadata (as a batch case) and the
  step's group fields, never ``raised``;
- a ``call`` case measures ``returned`` and ``raised``, nothing else.

A ``needs`` entry, and a metadata field no release defines, are looked up where the
releases at hand define them (``kb.release_names``, the places the run-time skip reads).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import get_args

from gdn_review.kb.release_names import lookup, metadata_fields, releases_words
from gdn_review.kb.server_config import BUILDER_EXPECT_FIELDS, SERVER_EXPECT_FIELDS
from gdn_review.kb.step_config import STEP_EXPECT_FIELDS
from gdn_review.kb.types import ExpectField
from gdn_review.kb.yaml_source import Problems

CALL_FIELDS = ("returned", "raised")
RAISE_FIELDS = ("raised", "message")
LAYOUT_FIELDS = ("persistent_views", "noncontiguous")
# The fields of build()'s metadata (and those derived from it) an expect may state.
METADATA_FIELDS = tuple(
    field
    for field in get_args(ExpectField)
    if field
    not in (
        *CALL_FIELDS,
        *RAISE_FIELDS,
        *LAYOUT_FIELDS,
        *BUILDER_EXPECT_FIELDS,
        *SERVER_EXPECT_FIELDS,
        *STEP_EXPECT_FIELDS,
    )
)

# Snapshot fields the harness derives from the metadata (harness.values.snapshot): every
# release measures them.
_DERIVED = (
    "path",
    "spec_state_rows",
    "spec_state_cells",
    "non_spec_state_rows",
    "prefill_state_rows",
)


BATCH_MEASURES = (
    "a batch case measures the metadata fields its entry point returns (path, num_*, "
    "*_state_rows, *_query_start_loc, has_initial_state, num_accepted_tokens, ...), the "
    "builder's attributes, server and layout fields where it states them, and raised (with "
    "message): what constructing the builder and calling its entry point raise"
)
CALL_MEASURES = (
    "a call case measures returned and raised: what its host function returned, or raised "
    "('Type: first line'; null: nothing)"
)


def expect_problems(case) -> Problems:
    """Each key of the case's ``expect`` that its kind does not measure, at the key."""
    problems = Problems()
    for key in case.expect:
        message = _not_measured(case, key)
        if message is not None:
            problems.add(("expect", key), message)
    return problems


def _not_measured(case, key: str) -> str | None:
    """Why the case's kind does not measure ``key`` (None: it does)."""
    if case.call is not None:
        if key in CALL_FIELDS:
            return None
        return f"{CALL_MEASURES}; {key} is what a batch case measures (rows, no call)"
    if key == "returned":
        return (
            f"{BATCH_MEASURES}; returned is what a call case measures (call: a host function "
            "on its own, no rows)"
        )
    if key in STEP_EXPECT_FIELDS and case.step is None:
        return (
            f"{key} compares the KV-cache groups of an engine step: give the case a step "
            "(groups: 2 or more), or leave it out"
        )
    if key in RAISE_FIELDS and case.step is not None:
        return (
            "a step case measures the first group's metadata and the step's group fields, not "
            f"{key}: what a step raises fails its checks as the builder's behaviour; state "
            "raised on a case without a step"
        )
    raised = case.expect.get("raised")
    if key not in RAISE_FIELDS and isinstance(raised, str):
        return (
            f"the case expects raised: {raised!r}: where it raises, it measures only raised "
            f"and message (no metadata is returned), so {key} has nothing to compare; state "
            "it on a case that builds"
        )
    return None


def compared_problems(record, check, base: tuple) -> Problems:
    """Each field a differential check compares that a case of its pairs does not measure: both
    sides would lack it and agree, a check that cannot fail."""
    problems = Problems()
    case_ids = {case.id for case in record.cases}
    for f_index, field in enumerate(check.fields):
        for case_id in check.cases:
            message = _not_measured(record.case(case_id), field) if case_id in case_ids else None
            if message is None and field in _STATED_ONLY and field not in _stated(record, case_id):
                message = "the harness measures it only for a case whose expect states it"
            if message is not None:
                problems.add(
                    base + ("fields", f_index),
                    f"case {case_id!r} does not measure {field}: {message}",
                )
                break
    return problems


# Fields the harness measures only for a case whose expect states them (or, for layout and
# server fields, one of their kind).
_STATED_ONLY = (*LAYOUT_FIELDS, *BUILDER_EXPECT_FIELDS, *SERVER_EXPECT_FIELDS, *RAISE_FIELDS)


def _stated(record, case_id: str) -> set[str]:
    """The fields of ``_STATED_ONLY`` the case's run measures."""
    case = record.case(case_id)
    stated = set(case.expect)
    for kind in (LAYOUT_FIELDS, SERVER_EXPECT_FIELDS):
        if stated & set(kind):
            stated |= set(kind)
    if case.call is not None:
        stated.add("raised")
    return stated


def needs_problems(record, case, source: Path | None) -> Problems:
    """Each ``needs`` entry the releases at hand define nowhere, and each metadata field the
    case expects that no release defines and ``needs`` does not list (every release would
    read it as absent: a KeyError in the check, not a skip).

    A record of an open PR may need what the PR adds: a metadata field ``kb.types``
    declares (``ExpectField``), or a name its diff beside the record (``kb/N.diff``) adds.
    """
    problems = Problems()
    wanted = [key for key in case.expect if key in METADATA_FIELDS and key not in _DERIVED]
    releases, fields = metadata_fields() if wanted and case.call is None else ((), frozenset())
    # Only where the installed vLLM is among them: a machine with a few older releases alone
    # (a bundle's) cannot tell a field of a later release from a misnamed one.
    for key in wanted:
        if "installed" in releases and key not in fields and key not in (case.needs or []):
            problems.add(
                ("expect", key),
                f"no release at hand has {key} ({releases_words(releases)}): list it in needs, so "
                f"that a release without it reads 'not applicable: vLLM X has no {key}'",
            )
    if not case.needs:
        return problems
    found = lookup(case.builder)
    if "installed" not in found.releases:  # as above: validation cannot tell
        return problems
    builder = case.builder or "GDNAttentionMetadataBuilder"
    added = _diff_adds(record, source)
    for index, name in enumerate(case.needs):
        if found.defines(name) or (record.is_open and (name in METADATA_FIELDS or added(name))):
            continue
        problems.add(
            ("needs", index),
            f"{name!r} is defined nowhere in the releases at hand: "
            f"{found.where_looked(builder)}; "
            + (
                "a name the open PR adds: a metadata field kb.types declares, or one its "
                f"diff beside the record (kb/{record.key}.diff) adds"
                if record.is_open
                else "check the spelling (a name only an open PR adds belongs in that PR's record)"
            ),
        )
    return problems


def _diff_adds(record, source: Path | None):
    """A test: does the open PR's diff beside the record add a definition of this name?"""
    diff = source.with_suffix(".diff") if source is not None else None
    if not record.is_open or diff is None or not diff.is_file():
        return lambda name: False
    added = [
        line[1:]
        for line in diff.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]

    def adds(name: str) -> bool:
        pattern = re.compile(
            rf"^\s*(?:(?:async\s+)?def|class)\s+{name}\b|^\s*(?:self\.)?{name}\s*[:=](?!=)"
        )
        return any(pattern.search(line) for line in added)

    return adds
