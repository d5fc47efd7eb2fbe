"""Stored full-metadata snapshots: ``kb/snapshots/<key>/<release>.json``, their format, reading and
writing.

A snapshot holds every field ``build()`` returns, per case of a record, taken
on one release (``snapshot_take``); each file names the release, the device
and the command that made it. Generated tests compare the loaded release's
build() with it field by field (``harness.snapshot_compare``); the release
matrix compares the snapshots of consecutive releases (``differences``).
"""

from __future__ import annotations

import json
from pathlib import Path

# /2: tensors stored by the dtype rule (``usual_dtypes``); a /1 file (values only) is not read.
SNAPSHOT_FORMAT = "gdn-review-snapshot/2"


FOLDER = "snapshots"


def snapshot_dir(kb_dir: Path, key: int | str) -> Path:
    return Path(kb_dir) / FOLDER / str(key)


def snapshot_path(kb_dir: Path, key: int | str, release: str) -> Path:
    return snapshot_dir(kb_dir, key) / f"{release}.json"


def command_for(key: int | str, release: str) -> str:
    return f"gdn-review snapshot --record {key} --release {release}"


def document(key: int | str, taken: dict) -> dict:
    """A snapshot file's content. ``usual_dtypes``: the harness's table of each tensor
    field's usual dtype when it was taken (``harness.values.USUAL_DTYPES``): a tensor
    stored as its values has that dtype, any other states its own (the dtype rule)."""
    return {
        "format": SNAPSHOT_FORMAT,
        "record": key,
        "release": taken["release"],
        "device": taken["device"],
        "made_by": command_for(key, taken["release"]),
        "usual_dtypes": taken.get("usual_dtypes", {}),
        "cases": taken["cases"],
    }


def dumps(data: dict) -> str:
    """Deterministic JSON: one line per case (compact), so a diff names the cases that changed."""
    head = {k: v for k, v in sorted(data.items()) if k != "cases"}
    lines = ["{"]
    for key, value in head.items():
        lines.append(f" {json.dumps(key)}: {json.dumps(value, sort_keys=True)},")
    cases = sorted(data.get("cases", {}).items())
    lines.append(' "cases": {')
    for index, (case_id, metadata) in enumerate(cases):
        comma = "," if index < len(cases) - 1 else ""
        lines.append(
            f"  {json.dumps(case_id)}: "
            f"{json.dumps(metadata, sort_keys=True, separators=(',', ':'))}{comma}"
        )
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def load(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("format") != SNAPSHOT_FORMAT
        or not isinstance(data.get("cases"), dict)
    ):
        return None
    return data


def stored(kb_dir: Path, key: int | str) -> dict[str, dict]:
    """release -> stored snapshot document of record ``key``."""
    found = {}
    folder = snapshot_dir(kb_dir, key)
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            data = load(path)
            if data is not None:
                found[str(data["release"])] = data
    return found


def differences(
    before: dict, after: dict, usual_before: dict | None = None, usual_after: dict | None = None
) -> list[dict]:
    """Field-level differences between two snapshots' cases: [{case, field, before, after}],
    values in stored form; a tensor whose values stayed and whose dtype or shape moved also
    says so (``change``: ``dtype int32 → int64``), read with each snapshot's ``usual_dtypes``."""
    found = []
    for case_id in sorted(set(before) | set(after)):
        old, new = before.get(case_id), after.get(case_id)
        if old is None or new is None:
            found.append(
                {
                    "case": case_id,
                    "field": "(case)",
                    "before": "absent" if old is None else "present",
                    "after": "absent" if new is None else "present",
                }
            )
            continue
        for field in sorted(set(old) | set(new)):
            if field not in old or field not in new:
                found.append(
                    {
                        "case": case_id,
                        "field": field,
                        "before": old.get(field, "(no such field)"),
                        "after": new.get(field, "(no such field)"),
                    }
                )
            elif old[field] != new[field]:
                found.append(
                    {"case": case_id, "field": field, "before": old[field], "after": new[field]}
                )
                change = tensor_change(
                    _tensor(old[field], (usual_before or {}).get(field)),
                    _tensor(new[field], (usual_after or {}).get(field)),
                )
                if change:
                    found[-1]["change"] = change
    return found


TENSOR_KEYS = {"dtype", "values", "shape"}


def _tensor(value, usual: str | None):
    """(dtype, shape, values) of a stored value that is a tensor (the dtype rule of
    ``harness.values.stored_form``: values alone have the field's usual dtype), else None."""
    if isinstance(value, dict) and {"dtype", "values"} <= set(value) <= TENSOR_KEYS:
        return value["dtype"], value.get("shape", _implied_shape(value["values"])), value["values"]
    if isinstance(value, list) and usual is not None:
        return usual, _implied_shape(value), value
    return None


def _implied_shape(values) -> list[int]:
    shape = []
    while isinstance(values, list):
        shape.append(len(values))
        if not values:
            break
        values = values[0]
    return shape


def tensor_change(old, new) -> str | None:
    """``dtype int32 → int64`` or ``shape [0] → [0, 3]`` where a tensor's values stayed and its
    dtype or shape moved; None otherwise."""
    if old is None or new is None or old[2] != new[2]:
        return None
    if old[0] != new[0]:
        return f"dtype {old[0]} → {new[0]}"
    if old[1] != new[1]:
        return f"shape {old[1]} → {new[1]}"
    return None
