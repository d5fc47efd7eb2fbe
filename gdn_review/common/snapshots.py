"""Stored full-metadata snapshots, ``kb/snapshots/<record>/<release>.json``: where
they lie, their format, reading and writing, how two compare, and the name of a field
one lacks. A snapshot holds every field ``build()`` returns, per case of a record, on
one release (``run.snapshot_take``). No torch here; the export copies the definitions
the harness uses from here, so this file keeps to vLLM's line length, as the harness
does.
"""

from __future__ import annotations

import json
from pathlib import Path

# /2: tensors stored by the dtype rule (``usual_dtypes``); a /1 file is not read.
SNAPSHOT_FORMAT = "gdn-review-snapshot/2"
FOLDER = "snapshots"  # in the KB folder: kb/snapshots/<record>/<release>.json
# What a comparison shows for a field that one side lacks.
NO_FIELD = "(no such field)"
# The keys of a tensor's stored form where it states its dtype (``values.stored_form``).
TENSOR_KEYS = {"dtype", "values", "shape"}


class SnapshotFileError(ValueError):
    """A stored snapshot file that is not of its format (not JSON, another format)."""


def snapshot_dir(kb_dir: Path, key: int | str) -> Path:
    """The folder of record ``key``'s stored snapshots."""
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
    """Deterministic JSON: one line per case (compact), so a diff names the cases that
    changed."""
    head = {k: v for k, v in sorted(data.items()) if k != "cases"}
    lines = ["{"]
    for key, value in head.items():
        lines.append(f" {json.dumps(key)}: {json.dumps(value, sort_keys=True)},")
    cases = sorted(data.get("cases", {}).items())
    lines.append(' "cases": {')
    for index, (case_id, metadata) in enumerate(cases):
        comma = "," if index < len(cases) - 1 else ""
        compact = json.dumps(metadata, sort_keys=True, separators=(",", ":"))
        lines.append(f"  {json.dumps(case_id)}: {compact}{comma}")
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def read(path: Path) -> dict:
    """A stored snapshot file's content; SnapshotFileError naming the file where it is
    not one (not JSON, another format)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SnapshotFileError(f"{path}: not a stored snapshot ({error})") from None
    if (
        not isinstance(data, dict)
        or data.get("format") != SNAPSHOT_FORMAT
        or not isinstance(data.get("cases"), dict)
    ):
        why = f"not a {SNAPSHOT_FORMAT} file"
        raise SnapshotFileError(f"{path}: not a stored snapshot ({why})")
    return data


def load(path: Path) -> dict | None:
    """``read``'s content, or None where the file is missing or not a snapshot."""
    try:
        return read(path)
    except SnapshotFileError:
        return None


def of_release(folder: Path | None, key: int | str, release: str) -> tuple:
    """(the stored snapshot of ``release`` in ``folder``, record ``key``'s, or None; why
    none is, with the command that makes one). None folder: none is stored.
    SnapshotFileError where the file is no snapshot."""
    path = None if folder is None else Path(folder) / f"{release}.json"
    if path is None or not path.exists():
        make = f"make one with `{command_for(key, release)}`"
        return None, f"no stored snapshot of vLLM {release}: {make}"
    return read(path), ""


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


def differences(before: dict, after: dict, usual_before=None, usual_after=None) -> list:
    """Field-level differences between two snapshots' cases: [{case, field, before,
    after}], values in stored form, ``NO_FIELD`` for a field one lacks; a tensor whose
    values stayed and whose dtype or shape moved also says so (``change``: ``dtype int32
    → int64``), read with each snapshot's ``usual_dtypes``."""
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
            a, b = old.get(field, NO_FIELD), new.get(field, NO_FIELD)
            # Each read with its own table: a list of one and {dtype, values} of the
            # other are the same tensor where the dtypes agree.
            same = explicit_form(a, field, usual_before or {}) == explicit_form(
                b, field, usual_after or {}
            )
            if same:
                continue
            found.append({"case": case_id, "field": field, "before": a, "after": b})
            change = tensor_change(
                tensor_parts(a, (usual_before or {}).get(field)),
                tensor_parts(b, (usual_after or {}).get(field)),
            )
            if change:
                found[-1]["change"] = f"{change[0]} {change[1]} → {change[2]}"
    return found


def explicit_form(form, name: str | None, usual: dict[str, str]):
    """A stored form (an expect's value, a snapshot's field) with every tensor that
    states no dtype but has one by ``usual`` written ``{dtype, values}``: what it
    means, read with the table it was written with, so that it compares the same read
    with any other. A list of a field ``usual`` does not name stays a list (its values
    only)."""
    if isinstance(form, dict):
        # A tensor that states its dtype, or {values}: that it states none.
        if "values" in form and set(form) <= TENSOR_KEYS:
            return form
        return {k: explicit_form(item, str(k), usual) for k, item in form.items()}
    if isinstance(form, list) and name in usual:
        return {"dtype": usual[name], "values": form}
    if isinstance(form, list):
        return [explicit_form(item, name, usual) for item in form]
    return form


def implied_shape(values) -> list[int]:
    """The shape a nested list of values implies: [] -> [0], [[], []] -> [2, 0]."""
    shape = []
    while isinstance(values, list):
        shape.append(len(values))
        if not values:
            break
        values = values[0]
    return shape


def tensor_parts(form, usual: str | None):
    """(dtype, shape, values) of a stored form that is a tensor: ``{dtype, values}``
    states its own, a list has its field's ``usual`` dtype (None: the field holds no
    tensor); else None."""
    if isinstance(form, dict) and {"dtype", "values"} <= set(form) <= TENSOR_KEYS:
        values = form["values"]
        return form["dtype"], form.get("shape", implied_shape(values)), values
    if isinstance(form, list) and usual is not None:
        return usual, implied_shape(form), form
    return None


def tensor_change(first, second):
    """("dtype" or "shape", first's, second's) where two tensors (``tensor_parts``)
    have the same values and their dtype or shape differ; None otherwise."""
    if first is None or second is None or first[2] != second[2]:
        return None
    if first[0] != second[0]:
        return "dtype", first[0], second[0]
    if first[1] != second[1]:
        return "shape", first[1], second[1]
    return None
