"""Taking full-metadata snapshots on a release, and the ``gdn-review snapshot`` command's flow.

A snapshot is the harness's plain-data snapshot (``harness.case_build.snapshot_case``)
of every case of a record, on one release; where it is stored and how is
``common.snapshots``. Taking one imports vLLM (through the harness), so it runs in a
child on the release's tree (``common.release_trees``):
``python -m gdn_review.run.snapshot_take RECORD.yaml OUT.json``; the release matrix
takes them in its own pytest session, this module being its plugin
(``-p gdn_review.run.snapshot_take``).

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

A case whose set-up raised (``CouldNotRun``: the release's platform, its ``VllmConfig``)
or whose snapshot raised in gdn-review's own code is stored as not taken, with why
(``NOT_TAKEN``): it measured nothing, so drift never compares it, and a stored snapshot
never holds one. As the matrix's plugin it also probes the release once, before any
test runs (``--gdn-probe-out``): a release whose set-up raises runs none of its tests.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from gdn_review.common import interrupts, release, release_trees
from gdn_review.common.files import atomic_write
from gdn_review.common.release import Release
from gdn_review.common.snapshots import FOLDER, document, dumps, load, snapshot_path
from gdn_review.common.vocabulary import Outcome
from gdn_review.kb.subjects import key_label

# The harness's flags for the parts it measures only when asked (harness.case_build.build_case).
MEASURE_FLAGS = ("layout", "builder_fields", "server_fields")
# A case's snapshot that measured nothing: its key -> the outcome it is.
NOT_TAKEN = {"could_not_run": Outcome.COULD_NOT_RUN, "error_in_the_check": Outcome.CHECK_ERROR}


def not_taken(measured: dict | None) -> tuple[str, str] | None:
    """(outcome, why) of a case's snapshot that measured nothing; None: it measured."""
    for key, outcome in NOT_TAKEN.items():
        if key in (measured or {}):
            return outcome, measured[key]
    return None


def every_field(cases: dict[str, dict]) -> dict[str, dict]:
    """These cases with every measuring flag set: their snapshots hold every field the harness can
    measure."""
    return {
        case_id: {**case, **dict.fromkeys(MEASURE_FLAGS, True)} for case_id, case in cases.items()
    }


def take(cases: dict[str, dict], device: str = "cpu", all_fields: bool = False) -> dict:
    """Snapshots of these cases on the loaded vLLM (imports it: call in a subprocess or a test).

    ``all_fields``: also the parts the harness measures only when asked (``every_field``).
    """
    from gdn_review import harness
    from gdn_review.harness.origin import CouldNotRun, first_line, last_frame
    from gdn_review.harness.values import USUAL_DTYPES

    release = str(harness.vllm_release())
    taken = {}
    for case_id, case in sorted((every_field(cases) if all_fields else cases).items()):
        if not harness.release_in_range(case.get("releases")):
            continue
        try:
            # Stored form: a tensor's dtype (and shape) stated where not its field's usual one.
            taken[case_id] = harness.stored_form(harness.snapshot_case(device, case))
        except pytest.skip.Exception as skip:  # an API the release lacks, a device absent here
            # Without the release's number, so that consecutive releases compare equal.
            taken[case_id] = {"not_applicable": re.sub(r"vLLM \d[\w.+-]*", "vLLM", str(skip.msg))}
        except CouldNotRun as error:  # set-up raised before the builder was entered
            taken[case_id] = {"could_not_run": str(error).removeprefix("could not run: ")}
        except Exception as error:  # noqa: BLE001  (not the builder's: snapshot_case re-raised)
            taken[case_id] = {
                "error_in_the_check": f"{type(error).__name__}: {first_line(error)} "
                f"(at {last_frame(error)}); a gdn-review bug to report"
            }

    return {"release": release, "device": device, "cases": taken, "usual_dtypes": USUAL_DTYPES}


def take_in_subprocess(
    record_path: Path | list[tuple[Path, Path]],
    pythonpath: Path | None,
    out: Path | None = None,
    device: str = "cpu",
    all_fields: bool = False,
) -> subprocess.CompletedProcess:
    """Take a record's snapshots (or, given [(record, out), ...], several records') in a fresh
    interpreter whose vLLM is the tree at ``pythonpath`` (None: the installed)."""
    pairs = record_path if isinstance(record_path, list) else [(record_path, out)]
    command = [sys.executable, "-m", "gdn_review.run.snapshot_take"]
    for record, written in pairs:
        command += [str(record), str(written)]
    command += ["--device", device]
    if all_fields:
        command.append("--every-field")
    env = release_trees.environment(pythonpath)
    return interrupts.run_child(command, check=False, env=env, capture_output=True, text=True)


class SnapshotError(Exception):
    """A snapshot could not be taken or printed (bad input: exit 2)."""


def take_snapshots(
    kb_dir: Path,
    key: int | str,
    versions: list[str],
    case_id: str | None,
    as_expect: bool,
    say: Callable[[str], None] = print,
) -> list[str]:
    """``gdn-review snapshot``: store (or, with ``as_expect``, print) the record's snapshots; lines
    to show."""
    from gdn_review.run.selection import load_records

    if as_expect:  # the case to print may state no expect yet
        record_path, record = record_file(kb_dir, key)
    else:
        ((record_path, record),) = load_records(kb_dir, (key,)).items()
    if case_id and case_id not in {c.id for c in record.cases}:
        raise SnapshotError(
            f"{record_path}: no case {case_id!r} (known: "
            f"{', '.join(sorted(c.id for c in record.cases))})"
        )
    shown = []
    for version in versions or [None]:
        data = take_release(record_path, version, say, all_fields=as_expect)
        if as_expect:
            shown += expect_lines(data, case_id, data["release"])
            continue
        refuse_not_taken(data, f"vLLM {data['release']}")
        target = snapshot_path(kb_dir, key, data["release"])
        atomic_write(target, dumps(data))
        shown.append(
            f"wrote {target} ({len(data['cases'])} cases, vLLM {data['release']}, {data['device']})"
        )
    return shown


def retake_stored(kb_dir: Path, say: Callable[[str], None] = print) -> list[str]:
    """``gdn-review snapshot --stored``: take again every stored snapshot (every record's, on
    the release it was taken on), one interpreter per release; lines to show.

    What a format change of the snapshots (the dtype rule) needs once: the files are
    rewritten as the harness now takes them, and ``git diff kb/snapshots`` shows what moved.
    """
    import tempfile

    from gdn_review.run.selection import load_records

    folder = Path(kb_dir) / FOLDER
    by_release: dict[str, list[str]] = {}
    for path in sorted(folder.glob("*/*.json")) if folder.is_dir() else []:
        by_release.setdefault(path.stem, []).append(path.parent.name)
    records = {str(record.key): path for path, record in load_records(kb_dir).items()}
    shown = []
    for version, release_keys in sorted(by_release.items(), key=lambda kv: Release(kv[0])):
        tree = release_trees.tree(version, say=say)
        with tempfile.TemporaryDirectory() as scratch:
            # A folder of a record no longer in kb/ is left as it is.
            release_keys = [key for key in release_keys if key in records]
            pairs = [(records[key], Path(scratch) / f"{key}.json") for key in release_keys]
            done = take_in_subprocess(pairs, tree)
            for key, (_, out) in zip(release_keys, pairs):
                data = read_taken(done, out, f"vLLM {version}: the snapshots", say)
                if data["release"] != version:
                    raise SnapshotError(f"vLLM {version}: the child loaded vLLM {data['release']}")
                refuse_not_taken(data, f"vLLM {version}")
                target = snapshot_path(kb_dir, key, version)
                atomic_write(target, dumps(data))
                shown.append(f"wrote {target} ({len(data['cases'])} cases, vLLM {version})")
    return shown


def refuse_not_taken(data: dict, where: str) -> None:
    """SnapshotError where a case's snapshot measured nothing: a stored snapshot is what the
    generated tests compare, so it never holds a set-up's or our own error."""
    for case_id, measured in sorted(data["cases"].items()):
        found = not_taken(measured)
        if found is not None:
            raise SnapshotError(
                f"{where}: case {case_id!r} {found[0]}: {found[1]}; nothing stored "
                "(the snapshot would hold no values)"
            )


def record_file(kb_dir: Path, key: int | str):
    """(path, record) of ``kb_dir/<key>.yaml`` (a PR's number or a contract's id), loaded with its
    cases' expects optional."""
    from gdn_review.kb import load_record

    path = Path(kb_dir) / f"{key}.yaml"
    if not path.is_file():
        raise SnapshotError(f"no record {key_label(key)} in {kb_dir} (no {path})")
    return path, load_record(path, expects_optional=True)


def take_release(
    record_path: Path,
    version: str | None,
    say: Callable[[str], None] = print,
    all_fields: bool = False,
) -> dict:
    """The snapshot of every case of a record on ``version`` (default: the installed vLLM), in one
    subprocess.

    ``all_fields``: with the parts the harness measures only when asked (for an expect, not to
    store).
    """
    import tempfile

    version = version or release.loaded()[0]
    path = release_trees.tree(version, say=say)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "snapshot.json"
        done = take_in_subprocess(record_path, path, out, all_fields=all_fields)
        return read_taken(done, out, f"vLLM {version}: the snapshot", say)


def read_taken(done: subprocess.CompletedProcess, out: Path, what: str, say) -> dict:
    """The snapshot a child wrote at ``out``; where it wrote none, its stderr is said and
    SnapshotError says that ``what`` could not be taken."""
    data = load(out) if done.returncode == 0 else None
    if data is None:
        say(done.stderr[-3000:])
        raise SnapshotError(f"{what} could not be taken (exit code {done.returncode})")
    return data


def core_expect(measured: dict) -> dict:
    """The core expect fields (what ``--fill-expects`` writes for every case) of one case's
    snapshot."""
    import typing

    from gdn_review.kb.models import CoreExpectField

    return {
        field: measured[field] for field in typing.get_args(CoreExpectField) if field in measured
    }


def full_expect(measured: dict) -> dict:
    """Every expect field the case's snapshot holds (what ``--as-expect`` prints): the core ones
    first, then the others in ``ExpectField``'s order (raw tensors, layout, builder and server
    fields, a call's result)."""
    import typing

    from gdn_review.kb.models import ExpectField

    others = {
        field: measured[field]
        for field in typing.get_args(ExpectField)
        if field in measured and field not in absent_fields(measured)
    }
    return {**core_expect(measured), **others}


def absent_fields(measured: dict) -> list[str]:
    """The builder attributes this release's builder lacks (measured as "(no such field: ...)"):
    no expect to offer, since a release that had them would fail it."""
    return [
        field
        for field, value in measured.items()
        if isinstance(value, str) and value.startswith("(no such field")
    ]


def no_metadata(measured: dict) -> str | None:
    """Why a case's snapshot holds no metadata (the release raised, or cannot run it); None: it
    holds some.

    A ``call`` case's snapshot states ``returned`` and ``raised`` (what the host function
    raised, or None): that is its metadata, not a failure.
    """
    if "not_applicable" in measured:
        return measured["not_applicable"]
    found = not_taken(measured)
    if found is not None:
        return f"{found[0]}: {found[1]}"
    if "raised" in measured and "returned" not in measured:
        return measured["raised"]
    return None


def expect_lines(data: dict, case_id: str, version: str) -> list[str]:
    """A case's complete ``expect`` block (YAML) from a snapshot (taken with ``all_fields``), to
    read through, trim to what the claims compare and paste into the record."""
    case = data["cases"].get(case_id)
    if case is None:
        raise SnapshotError(
            f"case {case_id!r} does not apply to vLLM {version} (its releases range)"
        )
    why = no_metadata(case)
    if why is not None:
        raise SnapshotError(f"case {case_id!r} gives no metadata on vLLM {version}: {why}")
    head = (
        f"# expect of case {case_id}, measured on vLLM {version} "
        f"({data['device']}): every field measured, "
        "core ones first; read it through before pasting"
    )
    left_out = absent_fields(case)
    note = [f"# left out, not on this release's builder: {', '.join(left_out)}"] if left_out else []
    return [head, *note, *expect_block(full_expect(case))]


def expect_block(expect: dict, indent: int = 0) -> list[str]:
    """``expect:`` and one line per field, its value in flow style (``spec_state_cells: [[[1,
    1]]]``), indented."""
    lines = [" " * indent + "expect:"]
    for field, value in expect.items():
        lines.append(" " * (indent + 2) + flow({field: value})[1:-1])
    return lines


def flow(value) -> str:
    """A value as YAML in flow style on one line (``{dtype: int64, values: [4]}``)."""
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30)
    return text.removesuffix("\n...\n").strip()


# --- As a pytest plugin (``-p gdn_review.run.snapshot``): the release matrix takes the
# snapshots in the same process as the generated tests, vLLM imported once.


def pytest_addoption(parser):
    group = parser.getgroup("gdn-review-snapshot", "gdn-review full-metadata snapshots")
    group.addoption(
        "--gdn-snapshot-record",
        action="append",
        default=[],
        metavar="RECORD.yaml",
        help="take this record's case snapshots at the end of the session "
        "(repeatable, one --gdn-snapshot-out each)",
    )
    group.addoption(
        "--gdn-probe-out",
        default=None,
        metavar="PATH",
        help="before collecting, build one builder on the loaded vLLM; where its set-up "
        "raises (could not run), write why to PATH as JSON and run no test and take no snapshot",
    )
    group.addoption(
        "--gdn-snapshot-out",
        action="append",
        default=[],
        metavar="PATH",
        help="where the snapshot JSON of the record given at the same position goes",
    )


# The stash key of a release whose probe could not run: why (None: it ran).
_COULD_NOT_RUN = pytest.StashKey[str]()


def probe_release() -> str | None:
    """Why the loaded vLLM cannot run a check here (vLLM's message and where it came from), or
    None: one builder with the default settings is made, as each test's set-up makes it.

    Only the set-up counts (``CouldNotRun``: importing the builder, MambaSpec, VllmConfig);
    a constructor that raises is the builder's behaviour, which the tests themselves show.
    """
    from gdn_review import harness
    from gdn_review.harness.origin import CouldNotRun

    try:
        harness.make_builder(harness.BuilderSettings())
    except CouldNotRun as error:
        return str(error).removeprefix("could not run: ")
    except Exception:  # noqa: BLE001  (the builder's own: its tests say what it raised)
        pass
    return None


def pytest_sessionstart(session):
    out = session.config.getoption("gdn_probe_out")
    if out is None:
        return
    why = probe_release()
    atomic_write(Path(out), json.dumps({"could_not_run": why}) + "\n")
    if why is not None:
        session.config.stash[_COULD_NOT_RUN] = why


def pytest_collection_modifyitems(session, config, items):
    if config.stash.get(_COULD_NOT_RUN, None) is None:
        return
    config.hook.pytest_deselected(items=list(items))  # the release could not run: no test does
    items[:] = []


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if config.stash.get(_COULD_NOT_RUN, None) is not None:
        return  # no snapshot: every case's set-up would raise as the probe's did
    record_paths, outs = (
        config.getoption("gdn_snapshot_record"),
        config.getoption("gdn_snapshot_out"),
    )
    if len(record_paths) != len(outs):
        raise pytest.UsageError("--gdn-snapshot-record and --gdn-snapshot-out go in pairs")
    for record_path, out in zip(record_paths, outs):
        write_snapshot(Path(record_path), Path(out))


def _main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m gdn_review.run.snapshot_take")
    parser.add_argument("pairs", nargs="+", metavar="RECORD OUT", help="record, output; repeatable")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--every-field",
        action="store_true",
        help="also the parts measured only when a case asks (for an expect)",
    )
    args = parser.parse_args(argv)
    if len(args.pairs) % 2:
        parser.error("records and outputs go in pairs")
    for record, out in zip(args.pairs[::2], args.pairs[1::2]):
        write_snapshot(Path(record), Path(out), args.device, all_fields=args.every_field)
    return 0


def write_snapshot(record_path: Path, out: Path, device: str = "cpu", all_fields: bool = False):
    """A record's snapshots on the loaded vLLM, written to ``out`` (what the child of
    ``take_in_subprocess`` does)."""
    from gdn_review.kb import load_record

    # A snapshot needs no expect; the parent checked the record (record_file).
    record = load_record(Path(record_path), expects_optional=True, checked=False)
    taken = take(record.case_inputs(), device, all_fields=all_fields)
    atomic_write(Path(out), dumps(document(record.key, taken)))


if __name__ == "__main__":
    from gdn_review.common.fast_exit import exit_now

    exit_now(_main(sys.argv[1:]))
