"""Full-metadata snapshots: every field ``build()`` returns, per case of a record, per release.

A snapshot is the harness's plain-data snapshot (``harness.run.snapshot``) of
every case of a record, taken on one release, stored as JSON next to the
record: ``kb/snapshots/<number>/<release>.json``. Each file names the release,
the device and the command that made it. Generated tests compare the loaded
release's snapshot with the stored one field by field; the release matrix
compares the snapshots of consecutive releases (drift) and looks for the
related PR that explains each difference.

Taking a snapshot imports vLLM (through the harness), so it runs in a
subprocess with the release's sources first on ``PYTHONPATH``:
``python -m gdn_review.run.snapshot RECORD.yaml OUT.json``.

Some parts the harness measures only for a case that asks (``Record.case_inputs``
sets the flags when the case's expect states such a field): the layout
(``persistent_views``, ``noncontiguous``), the builder's ``reorder_batch_threshold``
and the server fields (``checkpoint_*``, ``flashinfer_plan_*``, ...). A stored
snapshot keeps to what the record asks, so that it stays what the generated
tests compare. ``--as-expect`` (and ``--fill-expects``, ``fill_expects.py``)
measure with every flag set (``--every-field``): ``--as-expect`` prints every
expect field the harness measured for the case, the core fields first, then the
others in ``ExpectField``'s order (the raw state indices, the layout, the
builder's and the server's fields, ...), a complete block to paste and trim.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gdn_review.common import interrupts, release_trees
from gdn_review.common.files import atomic_write

SNAPSHOT_FORMAT = "gdn-review-snapshot/1"
FOLDER = "snapshots"


def snapshot_dir(kb_dir: Path, number: int) -> Path:
    return Path(kb_dir) / FOLDER / str(number)


def snapshot_path(kb_dir: Path, number: int, release: str) -> Path:
    return snapshot_dir(kb_dir, number) / f"{release}.json"


def command_for(number: int, release: str) -> str:
    return f"gdn-review snapshot --record {number} --release {release}"


def case_inputs(record) -> dict[str, dict]:
    """The record's cases as build() inputs (what generated modules hold as CASES)."""
    return record.case_inputs()


# The harness's flags for the parts it measures only when asked (harness.run.build_case).
MEASURE_FLAGS = ("layout", "builder_fields", "server_fields")


def every_field(cases: dict[str, dict]) -> dict[str, dict]:
    """These cases with every measuring flag set: their snapshots hold every field the harness can measure."""
    return {case_id: {**case, **dict.fromkeys(MEASURE_FLAGS, True)} for case_id, case in cases.items()}


def take(cases: dict[str, dict], device: str = "cpu", all_fields: bool = False) -> dict:
    """Snapshots of these cases on the loaded vLLM (imports it: call in a subprocess or a test).

    ``all_fields``: also the parts the harness measures only when asked (``every_field``).
    """
    from gdn_review import harness

    release = str(harness.vllm_release())
    taken = {}
    for case_id, case in sorted((every_field(cases) if all_fields else cases).items()):
        if not harness.release_in_range(case.get("releases")):
            continue
        try:
            taken[case_id] = harness.snapshot_case(device, case)
        except pytest.skip.Exception as skip:  # an API the release lacks, a device absent here
            # Without the release's number, so that consecutive releases compare equal.
            taken[case_id] = {"not_applicable": re.sub(r"vLLM \d[\w.+-]*", "vLLM", str(skip.msg))}

    return {"release": release, "device": device, "cases": taken}


def document(number: int, taken: dict) -> dict:
    return {
        "format": SNAPSHOT_FORMAT,
        "record": number,
        "release": taken["release"],
        "device": taken["device"],
        "made_by": command_for(number, taken["release"]),
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
        lines.append(f"  {json.dumps(case_id)}: {json.dumps(metadata, sort_keys=True, separators=(',', ':'))}{comma}")
    lines.append(" }")
    lines.append("}")
    return "\n".join(lines) + "\n"


def load(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != SNAPSHOT_FORMAT or not isinstance(data.get("cases"), dict):
        return None
    return data


def stored(kb_dir: Path, number: int) -> dict[str, dict]:
    """release -> stored snapshot document of record ``number``."""
    found = {}
    folder = snapshot_dir(kb_dir, number)
    if folder.is_dir():
        for path in sorted(folder.glob("*.json")):
            data = load(path)
            if data is not None:
                found[str(data["release"])] = data
    return found


def differences(before: dict, after: dict) -> list[dict]:
    """Field-level differences between two snapshots' cases: [{case, field, before, after}]."""
    found = []
    for case_id in sorted(set(before) | set(after)):
        old, new = before.get(case_id), after.get(case_id)
        if old is None or new is None:
            found.append({"case": case_id, "field": "(case)", "before": "absent" if old is None else "present", "after": "absent" if new is None else "present"})
            continue
        for field in sorted(set(old) | set(new)):
            if field not in old or field not in new:
                found.append({"case": case_id, "field": field, "before": old.get(field, "(no such field)"), "after": new.get(field, "(no such field)")})
            elif old[field] != new[field]:
                found.append({"case": case_id, "field": field, "before": old[field], "after": new[field]})
    return found


def take_in_subprocess(
    record_path: Path, pythonpath: Path | None, out: Path, device: str = "cpu", all_fields: bool = False,
) -> subprocess.CompletedProcess:
    """Take a record's snapshots in a fresh interpreter whose vLLM is the tree at ``pythonpath`` (None: the installed)."""
    command = [sys.executable, "-m", "gdn_review.run.snapshot", str(record_path), str(out), "--device", device]
    if all_fields:
        command.append("--every-field")
    env = release_trees.environment(pythonpath)
    return interrupts.run_child(command, check=False, env=env, capture_output=True, text=True)


class SnapshotError(Exception):
    """A snapshot could not be taken or printed (bad input: exit 2)."""


def snapshot_command(
    kb_dir: Path, number: int, versions: list[str], case_id: str | None, as_expect: bool,
    say: Callable[[str], None] = print,
) -> list[str]:
    """``gdn-review snapshot``: store (or, with ``as_expect``, print) the record's snapshots; lines to show."""
    from gdn_review.run.selection import load_records

    if as_expect:  # the case to print may state no expect yet
        record_path, record = record_file(kb_dir, number)
    else:
        (record_path, record), = load_records(kb_dir, (number,)).items()
    if case_id and case_id not in {c.id for c in record.cases}:
        raise SnapshotError(f"{record_path}: no case {case_id!r} (known: {', '.join(sorted(c.id for c in record.cases))})")
    shown = []
    for version in versions or [None]:
        data = take_release(record_path, version, say, all_fields=as_expect)
        if as_expect:
            shown += expect_lines(data, case_id, data["release"])
            continue
        target = snapshot_path(kb_dir, number, data["release"])
        atomic_write(target, dumps(data))
        shown.append(f"wrote {target} ({len(data['cases'])} cases, vLLM {data['release']}, {data['device']})")
    return shown


def record_file(kb_dir: Path, number: int):
    """(path, record) of ``kb_dir/<number>.yaml``, loaded with its cases' expects optional."""
    from gdn_review.kb import load_record

    path = Path(kb_dir) / f"{number}.yaml"
    if not path.is_file():
        raise SnapshotError(f"no record for PR {number} in {kb_dir} (no {path})")
    return path, load_record(path, expects_optional=True)


def take_release(record_path: Path, version: str | None, say: Callable[[str], None] = print, all_fields: bool = False) -> dict:
    """The snapshot of every case of a record on ``version`` (default: the installed vLLM), in one subprocess.

    ``all_fields``: with the parts the harness measures only when asked (for an expect, not to store).
    """
    import tempfile

    from gdn_review.common import release_cache

    version = version or release_cache.loaded()[0]
    path = release_trees.tree(version, say=say)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "snapshot.json"
        done = take_in_subprocess(record_path, path, out, all_fields=all_fields)
        data = load(out) if done.returncode == 0 else None
        if data is None:
            say(done.stderr[-3000:])
            raise SnapshotError(f"vLLM {version}: the snapshot could not be taken (exit code {done.returncode})")
    return data


def core_expect(measured: dict) -> dict:
    """The core expect fields (what ``--fill-expects`` writes for every case) of one case's snapshot."""
    import typing

    from gdn_review.kb.models import CoreExpectField

    return {field: measured[field] for field in typing.get_args(CoreExpectField) if field in measured}


def full_expect(measured: dict) -> dict:
    """Every expect field the case's snapshot holds (what ``--as-expect`` prints): the core ones first, then the
    others in ``ExpectField``'s order (raw tensors, layout, builder and server fields, a call's result)."""
    import typing

    from gdn_review.kb.models import ExpectField

    core = core_expect(measured)
    return {**core, **{field: measured[field] for field in typing.get_args(ExpectField) if field in measured and field not in core}}


def no_metadata(measured: dict) -> str | None:
    """Why a case's snapshot holds no metadata (the release raised, or cannot run it); None: it holds some.

    A ``call`` case's snapshot states ``returned`` and ``raised`` (what the host function
    raised, or None): that is its metadata, not a failure.
    """
    if "not_applicable" in measured:
        return measured["not_applicable"]
    if "raised" in measured and "returned" not in measured:
        return measured["raised"]
    return None


def expect_lines(data: dict, case_id: str, version: str) -> list[str]:
    """A case's complete ``expect`` block (YAML) from a snapshot (taken with ``all_fields``), to read through,
    trim to what the claims compare and paste into the record."""
    case = data["cases"].get(case_id)
    if case is None:
        raise SnapshotError(f"case {case_id!r} does not apply to vLLM {version} (its releases range)")
    why = no_metadata(case)
    if why is not None:
        raise SnapshotError(f"case {case_id!r} gives no metadata on vLLM {version}: {why}")
    head = (f"# expect of case {case_id}, measured on vLLM {version} ({data['device']}): every field measured, "
            "core ones first; read it through before pasting")
    return [head, *expect_block(full_expect(case))]


def expect_block(expect: dict, indent: int = 0) -> list[str]:
    """``expect:`` and one line per field, its value in flow style (``spec_state_cells: [[[1, 1]]]``), indented."""
    import yaml

    lines = [" " * indent + "expect:"]
    for field, value in expect.items():
        lines.append(" " * (indent + 2) + yaml.safe_dump({field: value}, default_flow_style=True, width=1 << 30).strip()[1:-1])
    return lines


# --- As a pytest plugin (``-p gdn_review.run.snapshot``): the release matrix takes the
# snapshots in the same process as the generated tests, vLLM imported once.


def pytest_addoption(parser):
    group = parser.getgroup("gdn-review-snapshot", "gdn-review full-metadata snapshots")
    group.addoption("--gdn-snapshot-record", action="append", default=[], metavar="RECORD.yaml", help="take this record's case snapshots at the end of the session (repeatable, one --gdn-snapshot-out each)")
    group.addoption("--gdn-snapshot-out", action="append", default=[], metavar="PATH", help="where the snapshot JSON of the record given at the same position goes")


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    record_paths, outs = config.getoption("gdn_snapshot_record"), config.getoption("gdn_snapshot_out")
    if len(record_paths) != len(outs):
        raise pytest.UsageError("--gdn-snapshot-record and --gdn-snapshot-out go in pairs")
    from gdn_review.kb import load_record

    for record_path, out in zip(record_paths, outs):
        record = load_record(Path(record_path))
        atomic_write(Path(out), dumps(document(record.number, take(case_inputs(record)))))


def _main(argv: list[str]) -> int:
    import argparse

    from gdn_review.kb import load_record

    parser = argparse.ArgumentParser(prog="python -m gdn_review.run.snapshot")
    parser.add_argument("record")
    parser.add_argument("out")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--every-field", action="store_true", help="also the parts measured only when a case asks (for an expect)")
    args = parser.parse_args(argv)
    record = load_record(Path(args.record), expects_optional=True)  # a snapshot needs no expect
    taken = take(case_inputs(record), args.device, all_fields=args.every_field)
    atomic_write(Path(args.out), dumps(document(record.number, taken)))
    return 0


if __name__ == "__main__":
    from gdn_review.common.fast_exit import exit_now

    exit_now(_main(sys.argv[1:]))
