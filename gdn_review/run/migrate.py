"""Bring records to the current record format: ``gdn-review migrate``.

A record of an older format (``schema_version``) is read with that format's meaning
(``common.record_format``); migrating states what the current format adds, measured,
never guessed. For format 1 -> 2 that is each expected tensor's dtype (and a shape its
values do not imply): every case of the records is built once on a release (default:
the installed vLLM; one child for all records, as ``snapshot`` takes them), and each
tensor an ``expect`` (or a known deviation's pinned ``expect``) writes as its values
gets the measured dtype: its values where that is its field's usual dtype, else
``{dtype, values}``. The values stay the record's: the record's claim is not rewritten.

Each claim is then compared, case by case, as the generated tests compare it, read in
the old format and in the new, on the measured release: a claim whose verdict would
change is reported (and the command exits 1), never silently. A tensor that could not
be measured (its case does not apply to the release, gives no metadata, or the field
is not measured there) is named: in the current format it would read as its field's
usual dtype, so it is left for a person to state (``--release`` in its range).

The YAML is edited as text, as ``snapshot --fill-expects`` edits it (``fill_expects``):
comments, layout and key order stay; the result is loaded and must state exactly the
planned change before it replaces the file (temp file and rename).
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import tempfile
from collections.abc import Callable
from pathlib import Path

import yaml

from gdn_review.common import record_format, release_range, release_trees
from gdn_review.common.files import atomic_write
from gdn_review.common.snapshots import TENSOR_KEYS, explicit_form, implied_shape
from gdn_review.common.vocabulary import Verdict
from gdn_review.kb import RecordErrors, load_kb, parse_record
from gdn_review.kb.yaml_source import SAFE_LOADER
from gdn_review.run import snapshot_take
from gdn_review.run.fill_expects import item_nodes, mapping_keys
from gdn_review.run.snapshot_take import SnapshotError, flow


@dataclasses.dataclass
class Migration:
    """One record's migration: what was (or would be) written, and what a person must read."""

    path: Path
    old_version: int
    release: str  # where the dtypes were measured ("" when nothing was measured)
    diff: str  # unified diff of the file
    changed_verdicts: list[str]  # a claim whose verdict would change, and why
    unmeasured: list[str]  # a tensor written as values that could not be measured


def behind(kb_dir: Path, keys=()) -> dict[Path, object]:
    """The records (of ``keys``; default: all) whose format is older than the current one."""
    records = load_kb(Path(kb_dir))
    wanted = {str(key) for key in keys}
    return {
        path: record
        for path, record in records.items()
        if record.schema_version < record_format.CURRENT
        and (not wanted or str(record.key) in wanted)
    }


def migrate(
    kb_dir: Path,
    keys=(),
    version: str | None = None,
    write: bool = True,
    say: Callable[[str], None] = print,
) -> list[Migration]:
    """Migrate the records behind (of ``keys``) to the current format, measuring on
    ``version`` (default: the installed vLLM); ``write=False``: plan and diff only."""
    records = behind(kb_dir, keys)
    if not records:
        return []
    measured = _measure(list(records), version, say)
    done = []
    for path, record in records.items():
        data = measured[path]
        text = path.read_text(encoding="utf-8")
        plan = plan_record(record, data)
        new_text = edit_text(text, str(path), plan)
        check_edited(new_text, str(path), record, plan)
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                new_text.splitlines(keepends=True),
                f"a/{path.name}",
                f"b/{path.name}",
            )
        )
        migrated = parse_record(new_text, str(path))
        changed = changed_verdicts(record, migrated, data)
        if write:
            atomic_write(path, new_text)
        done.append(
            Migration(path, record.schema_version, data["release"], diff, changed, plan.unmeasured)
        )
    return done


def _measure(paths: list[Path], version: str | None, say) -> dict[Path, dict]:
    """Every case of each record built once on ``version`` (default: the installed vLLM),
    every part measured; one child for all: path -> snapshot document."""
    from gdn_review.common import release

    version = version or release.loaded()[0]
    tree = release_trees.tree(version, say=say)
    with tempfile.TemporaryDirectory() as scratch:
        pairs = [(path, Path(scratch) / f"{index}.json") for index, path in enumerate(paths)]
        done = snapshot_take.take_in_subprocess(pairs, tree, all_fields=True)
        return {
            path: snapshot_take.read_taken(done, out, f"vLLM {version}: the measurement", say)
            for path, out in pairs
        }


# --- The plan: which value of which expect becomes what ---------------------------


@dataclasses.dataclass
class Plan:
    """New values by where they are in the record: ("cases", index, field) or ("claims",
    claim index, deviation index, field); the notes of what could not be measured."""

    values: dict[tuple, object]
    unmeasured: list[str]


def measured_cases(data: dict) -> dict[str, dict]:
    """A measurement's cases that gave metadata, every tensor's dtype stated
    (``explicit_form`` with the table it was taken with)."""
    usual = data.get("usual_dtypes", {})
    return {
        case_id: explicit_form(case, None, usual)
        for case_id, case in data["cases"].items()
        if snapshot_take.no_metadata(case) is None
    }


def plan_record(record, data: dict) -> Plan:
    """What migrating ``record`` to the current format writes, from its cases measured on
    one release (``data``, a snapshot document)."""
    cases = measured_cases(data)
    release = data["release"]
    plan = Plan({}, [])
    for index, case in enumerate(record.cases):
        for field, value in case.expect.items():
            where = f"case {case.id}: expect.{field}"
            found = cases.get(case.id, {}).get(field, NOT_MEASURED)
            new = _stated(value, found, field, where, plan)
            if new != value:
                plan.values[("cases", index, field)] = new
        if case.id not in cases:
            _unmeasured_case(case, release, data, plan)
    for c_index, claim in enumerate(record.claims):
        for d_index, deviation in enumerate(claim.known_deviations):
            for field, value in (deviation.expect or {}).items():
                where = f"claim {claim.id}: known_deviations[{d_index}].expect.{field}"
                found = _deviation_measure(record, claim, deviation, field, cases, release)
                new = _stated(value, found, field, where, plan)
                if new != value:
                    plan.values[("claims", c_index, d_index, field)] = new
    return plan


def _unmeasured_case(case, release: str, data: dict, plan: Plan) -> None:
    if any(_guessable(field, value) for field, value in case.expect.items()):
        why = (
            "does not apply to it"
            if case.id not in data["cases"]
            else f"gives no metadata there: {snapshot_take.no_metadata(data['cases'][case.id])}"
        )
        plan.unmeasured.append(
            f"case {case.id}: not measured on vLLM {release} (it {why}): its tensors are "
            "written {values: [...]}, their dtype not stated (compared by values, as in "
            "format 1); state it, or migrate with --release in its range"
        )


def _deviation_measure(record, claim, deviation, field, cases: dict, release: str):
    """The field as measured on the first case of ``claim`` that ``deviation`` covers, where
    the deviation applies to ``release`` (``NOT_MEASURED``: nowhere)."""
    if not release_range.contains(deviation.releases, release):
        return NOT_MEASURED
    for case_id in deviation.cases or getattr(claim.check, "cases", None) or []:
        if case_id in cases and field in cases[case_id]:
            return cases[case_id][field]
    return NOT_MEASURED


# A place no measurement reached (its case did not run, or has no such field).
NOT_MEASURED = object()


def _is_tensor_form(value) -> bool:
    """A stored tensor that states its dtype, or ``{values}`` that it states none."""
    return isinstance(value, dict) and "values" in value and set(value) <= TENSOR_KEYS


def _guessable(field: str, value) -> bool:
    """Whether the current format would read ``value`` of ``field`` with a dtype the record
    does not state: a list of a field with a usual dtype."""
    return isinstance(value, list) and field in record_format.USUAL_DTYPES


def _stated(value, measured, field: str, where: str, plan: Plan):
    """``value`` (the record's) in the current format, its dtype taken from ``measured``
    (the same place measured, explicit form; ``NOT_MEASURED``); a tensor of a field with a
    usual dtype that was not measured is written ``{values}`` (noted in ``plan``)."""
    if not isinstance(value, list):
        return value  # a scalar, or a tensor that states its dtype already
    if _is_tensor_form(measured) and "dtype" in measured:
        shape = measured.get("shape", implied_shape(measured["values"]))
        # The shape only where the record's values are what was measured: other values
        # are the record's claim, and their shape is what they imply.
        if measured["values"] != value or shape == implied_shape(value):
            shape = None
        if shape is None and measured["dtype"] == record_format.USUAL_DTYPES.get(field):
            return value
        form = {"dtype": measured["dtype"], "values": value}
        if shape is not None:
            form["shape"] = shape
        return form
    if not _guessable(field, value):
        return value  # no tensor there (rows, cells), or no usual dtype: values only
    if measured is not NOT_MEASURED:
        plan.unmeasured.append(
            f"{where}: measured {measured!r}, no tensor: written {{values: [...]}}, its dtype "
            "not stated"
        )
    return {"values": value}


# --- Editing the text ---------------------------------------------------------------


def edit_text(text: str, file: str, plan: Plan) -> str:
    """``text`` with ``schema_version`` current and each planned value written in place
    (flow style, on the value's own span); comments and key order stay."""
    root = yaml.compose(text, Loader=SAFE_LOADER)
    edits: list[tuple[int, int, str]] = []  # (start, end, new text), character offsets
    cases = {index: keys for index, _, keys in item_nodes(root, "cases")}
    claims = {index: keys for index, _, keys in item_nodes(root, "claims")}
    for where, new in plan.values.items():
        if where[0] == "cases":
            expect = cases[where[1]]["expect"][1]
        else:
            deviations = claims[where[1]]["known_deviations"][1]
            expect = mapping_keys(deviations.value[where[2]])["expect"][1]
        node = mapping_keys(expect)[where[-1]][1]
        if not getattr(node, "flow_style", True):
            raise SnapshotError(
                f"{file}:{node.start_mark.line + 1}:{node.start_mark.column + 1}: "
                f"{where[-1]}: written over several lines: write it in flow style "
                "([...]) to migrate it"
            )
        edits.append((node.start_mark.index, node.end_mark.index, flow(new)))
    version = mapping_keys(root).get("schema_version")
    current = str(record_format.CURRENT)
    if version is not None:
        edits.append((version[1].start_mark.index, version[1].end_mark.index, current))
    else:  # before the first key: a record that names no version is read as format 1
        first = root.value[0][0].start_mark.index
        edits.append((first, first, f"schema_version: {current}\n"))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def planned_dump(record, plan: Plan) -> dict:
    """The record as it should load once migrated (``model_dump``)."""
    data = copy.deepcopy(record.model_dump())
    data["schema_version"] = record_format.CURRENT
    for where, new in plan.values.items():
        if where[0] == "cases":
            data["cases"][where[1]]["expect"][where[2]] = new
        else:
            data["claims"][where[1]]["known_deviations"][where[2]]["expect"][where[3]] = new
    return data


def check_edited(new_text: str, file: str, before, plan: Plan) -> None:
    """The edited text loads and states exactly the planned change, nothing else."""
    try:
        after = parse_record(new_text, file)
    except RecordErrors as failure:
        raise SnapshotError(
            f"{file}: the migrated record would not load ({len(failure.errors)} error(s), "
            f"first: {str(failure.errors[0]).split(': ', 1)[-1]}); nothing was written"
        ) from None
    if after.model_dump() != planned_dump(before, plan):
        raise SnapshotError(
            f"{file}: the edited record would not state the planned change (an unusual "
            "layout?); nothing was written"
        )


# --- Verdicts: each claim read in both formats ----------------------------------------


def changed_verdicts(old, new, data: dict) -> list[str]:
    """Each claim of an equivalence check (and each known deviation's pinned fields) whose
    outcome on a measured case differs between the record read in its old format and
    migrated: what the generated tests would then say differently."""
    from gdn_review.harness.values import Tensor, describe_differences, stored_differences

    def tensors(form):
        if _is_tensor_form(form):
            shape = form.get("shape", implied_shape(form["values"]))
            return Tensor(form["values"], form["dtype"], shape)
        if isinstance(form, dict):
            return {key: tensors(item) for key, item in form.items()}
        if isinstance(form, list):
            return [tensors(item) for item in form]
        return form

    cases = {case_id: tensors(case) for case_id, case in measured_cases(data).items()}
    old_usual = record_format.usual_dtypes(old.schema_version)
    new_usual = record_format.usual_dtypes(new.schema_version)
    found = []

    def compare(label: str, case_id: str, before: dict, after: dict) -> None:
        measured = cases[case_id]
        was = stored_differences(measured, before, list(before), old_usual)
        now = stored_differences(measured, after, list(after), new_usual)
        if bool(was) != bool(now):
            why = describe_differences(now or was)
            found.append(
                f"{label}, case {case_id}: {Verdict.FAILS if now else Verdict.HOLDS} once migrated "
                f"({'held' if not was else 'failed'} in format {old.schema_version}): {why}"
            )

    for old_claim, new_claim in zip(old.claims, new.claims):
        if old_claim.check.kind != "equivalence":
            continue
        for case_id in old_claim.check.cases:
            if case_id in cases:
                compare(
                    f"claim {old_claim.id}",
                    case_id,
                    old_claim.check.compared(old.case(case_id).expect),
                    new_claim.check.compared(new.case(case_id).expect),
                )
        for index, (was, now) in enumerate(
            zip(old_claim.known_deviations, new_claim.known_deviations)
        ):
            if not was.expect or not release_range.contains(was.releases, data["release"]):
                continue
            for case_id in was.cases or old_claim.check.cases:
                if case_id in cases:
                    label = f"claim {old_claim.id} (known_deviations[{index}])"
                    compare(label, case_id, was.expect, now.expect)
    return found


def migration_lines(migration: Migration, written: bool) -> list[str]:
    """What ``migrate`` prints of one record: the diff, then what a person must read."""
    verb = "migrated" if written else "would migrate"
    measured = f", dtypes measured on vLLM {migration.release}" if migration.release else ""
    lines = [
        f"{verb} {migration.path}: format {migration.old_version} -> "
        f"{record_format.CURRENT}{measured}"
    ]
    lines += migration.diff.rstrip("\n").splitlines()
    lines += [f"verdict changes: {line}" for line in migration.changed_verdicts]
    lines += [f"not measured: {line}" for line in migration.unmeasured]
    return lines
