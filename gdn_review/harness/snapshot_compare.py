"""A build's metadata compared with a stored full-metadata snapshot (where they lie,
reading them and the name of a missing field: ``common.snapshots``), or two scenarios'
builds with each other; read by generated tests and copied into exported modules."""

from __future__ import annotations

import os

from gdn_review.common import snapshots
from gdn_review.common.record_format import usual_dtypes
from gdn_review.common.snapshots import NO_FIELD, explicit_form
from gdn_review.harness.release_ranges import release_for_ranges
from gdn_review.harness.values import Tensor, stored_differences, stored_form


def stored_snapshot(
    module_file: str, folder: str, record: int, case_id: str, device: str
) -> tuple[dict | None, str]:
    """(the stored snapshot of a case for the loaded release, or None; why not).

    ``folder`` is relative to the generated module's own folder.
    """
    release = release_for_ranges()
    base = os.path.dirname(os.path.abspath(module_file))
    stored, why = snapshots.of_release(os.path.join(base, folder), record, release)
    if stored is None:
        return None, why
    if stored.get("device") != device:
        taken = stored.get("device")
        return None, f"the stored snapshot of vLLM {release} was taken on {taken}"
    if case_id not in stored["cases"]:
        make = f"make one with `{snapshots.command_for(record, release)}`"
        return None, f"the snapshot of vLLM {release} has no case {case_id}: {make}"
    # Read with the table it was taken with: its values-only tensors have those dtypes.
    usual = stored.get("usual_dtypes", {})
    return explicit_form(stored["cases"][case_id], None, usual), ""


def snapshot_differences(measured: dict, stored: dict) -> dict:
    """field -> (measured, stored) of every field whose value, dtype or shape differs,
    or that appears or goes (both in stored form: ``values.stored_form``); ``stored``
    states every tensor's dtype (``stored_snapshot`` reads it so)."""
    return stored_differences(measured, stored)


def expect_differences(measured: dict, expected: dict, record_format: int) -> dict:
    """``snapshot_differences`` of a case's expected fields, read as the record's format
    reads them (``common.record_format``): in format 1 a tensor written as its values
    compares its values only; in format 2 it has its field's usual dtype."""
    return stored_differences(measured, expected, usual=usual_dtypes(record_format))


def field_differences(
    first: dict, second: dict, fields, compare: str = "equal"
) -> dict:
    """field -> (first, second) (stored forms) where two scenarios disagree in value,
    dtype or shape; ``prefix``: the first's lists only need to be a prefix of the
    second's (the real rows of a padded build), of the same dtype."""
    found = {}
    for field in fields:
        a, b = first.get(field, NO_FIELD), second.get(field, NO_FIELD)
        if compare == "prefix" and isinstance(a, list) and isinstance(b, list):
            differ = list(b[: len(a)]) != list(a) or (
                isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype != b.dtype
            )
        else:
            differ = a != b
        if differ:
            found[field] = (stored_form(a, field), stored_form(b, field))
    return found
