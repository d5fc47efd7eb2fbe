"""Stored full-metadata snapshots (`gdn-review snapshot`), read by generated tests."""

from __future__ import annotations

import json
import os

from gdn_review.harness.release_ranges import release_for_ranges
from gdn_review.harness.values import Tensor, stored_differences, stored_form

NO_FIELD = "(no such field)"


def stored_snapshot(
    module_file: str, folder: str, record: int, case_id: str, device: str
) -> tuple[dict | None, str]:
    """(the stored snapshot of a case for the loaded release, or None; why not).

    ``folder`` is relative to the generated module's own folder.
    """
    release = str(release_for_ranges())
    base = os.path.dirname(os.path.abspath(module_file))
    path = os.path.join(base, folder, release + ".json")
    make = f"make one with `gdn-review snapshot --record {record} --release {release}`"
    if not os.path.exists(path):
        return None, f"no stored snapshot of vLLM {release}: {make}"
    with open(path, encoding="utf-8") as handle:
        stored = json.load(handle)
    if stored.get("device") != device:
        taken = stored.get("device")
        return None, f"the stored snapshot of vLLM {release} was taken on {taken}"
    if case_id not in stored.get("cases", {}):
        return None, f"the snapshot of vLLM {release} has no case {case_id}: {make}"
    return stored["cases"][case_id], ""


def snapshot_differences(measured: dict, stored: dict) -> dict:
    """field -> (measured, stored) of every field whose value, dtype or shape differs,
    or that appears or goes (both in stored form: ``values.stored_form``)."""
    return stored_differences(measured, stored, missing=NO_FIELD)


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
