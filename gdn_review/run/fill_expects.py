"""Write the missing ``expect`` blocks of a record's cases into its YAML: ``gdn-review snapshot
--fill-expects``.

The record's cases are measured once (one subprocess, every case, as
``snapshot`` does, with every part the harness measures only when asked: the
layout, ``reorder_batch_threshold``, the server fields) on a release, and each
case that needs an ``expect`` (an equivalence check names it, or it is asked for
by id) and states none gets one.

What is written is what the case needs (``case_fields``): the core fields
(``CoreExpectField``), plus every other expect field that the case's expect
already states (an ``expect: {}`` states none), that a claim naming the case
compares through ``fields:`` (equivalence or differential), or that the other
cases of an equivalence claim without ``fields:`` state and it compares (not in
its ``except:``): a case added to "same metadata as these" gets their raw state
indices, a case of "these are views of the persistent buffers" gets
``persistent_views``. The fields come in ``full_expect``'s order (core first, then
``ExpectField``'s). A field needed but not measured on that release (a field of
an open PR) is named in a note. Not every measured field is written: an expect
states what the claims compare, so that an unrelated change of, say, the server
fields fails no claim. ``--print`` shows each case's complete block instead, every
field measured (what ``snapshot --as-expect`` prints), to choose from.

The YAML is edited as text, so its comments and layout stay: the block goes after the case's last
line, indented as the case's keys. The result is loaded and validated again, and must state exactly
the planned expects, before it replaces the file (temp file and rename); nothing is half-written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import yaml

from gdn_review.common import record_format, release_range
from gdn_review.common.files import atomic_write
from gdn_review.common.vocabulary import Verdict
from gdn_review.kb import RecordErrors, parse_record
from gdn_review.kb.measured_rules import CALL_FIELDS
from gdn_review.kb.yaml_source import SAFE_LOADER
from gdn_review.run import snapshot_take
from gdn_review.run.snapshot_take import SnapshotError


@dataclasses.dataclass
class Filled:
    path: Path
    release: str
    device: str
    expects: dict[str, dict]  # case id -> the expect written (or to print)
    left: dict[str, str]  # case id -> why it got none
    notes: list[str]


def needing_expect(record, case_ids: list[str] | None = None) -> list[str]:
    """Cases without an expect that an equivalence check names (or ``case_ids``), in the record's
    order."""
    if case_ids:
        known = {c.id for c in record.cases}
        unknown = [c for c in case_ids if c not in known]
        if unknown:
            raise SnapshotError(
                f"no case {', '.join(map(repr, unknown))} (known: {', '.join(sorted(known))})"
            )
        stated = [c for c in case_ids if record.case(c).expect]
        if stated:
            raise SnapshotError(
                f"case {', '.join(map(repr, stated))} already states an expect: "
                "edit it by hand (or print the measured one with --as-expect)"
            )
        wanted = set(case_ids)
    else:
        wanted = {
            c
            for claim in record.claims
            if claim.check.kind == "equivalence"
            for c in claim.check.cases
        }
    return [case.id for case in record.cases if case.id in wanted and not case.expect]


def fill_expects(
    kb_dir: Path,
    key: int | str,
    version: str | None = None,
    case_ids: list[str] | None = None,
    write: bool = True,
    say: Callable[[str], None] = print,
) -> Filled:
    """Measure the record's cases on ``version`` (default: ``default_release``) and write (or only
    plan) the missing expects."""
    path, record = snapshot_take.record_file(kb_dir, key)
    wanted = needing_expect(record, case_ids)
    if not wanted:  # nothing to measure
        return Filled(
            path,
            version or "",
            "",
            {},
            {},
            [
                f"{path}: no case needs an expect (every case an equivalence "
                "check names states one); name another with --case ID"
            ],
        )
    chosen_note = None
    if version is None:
        version, chosen_note = default_release(record, wanted)
    data = snapshot_take.take_release(path, version, say, all_fields=True)
    release = data["release"]
    expects, left, notes = {}, {}, [chosen_note] if chosen_note else []
    for case_id in wanted:
        measured = data["cases"].get(case_id)
        if measured is None:
            left[case_id] = f"does not apply to vLLM {release} (its releases range)"
        elif (why := snapshot_take.no_metadata(measured)) is not None:
            left[case_id] = f"gives no metadata on vLLM {release}: {why}"
        else:
            # Printed: every field measured, to choose from; written: what the case needs.
            expects[case_id] = (
                needed_expect(record, case_id, measured)
                if write
                else snapshot_take.full_expect(measured)
            )
            notes += _missing_notes(record, case_id, measured, release)
            if not write and (left_out := snapshot_take.absent_fields(measured)):
                notes.append(
                    f"case {case_id}: not on vLLM {release}'s builder, left out: "
                    + ", ".join(left_out)
                )
            notes += _deviation_notes(record, case_id, release)
    if expects and record.schema_version < record_format.CURRENT:
        # The blocks are measured in the current format's form; the record reads them as its own.
        notes.append(
            f"{path}: format {record.schema_version}: its expects compare a tensor written as its "
            "values by its values only; `gdn-review migrate` states their dtypes"
        )
    filled = Filled(path, release, data["device"], expects, left, notes)
    if write and expects:
        text = path.read_text(encoding="utf-8")
        new_text = insert_expects(text, str(path), expects)
        check_filled(new_text, str(path), record, expects)
        atomic_write(path, new_text)
    return filled


def case_fields(record, case_id: str) -> dict[str, str]:
    """The fields beyond the core ones that case ``case_id``'s expect needs -> who asks for it, in
    ``ExpectField`` order."""
    import typing

    from gdn_review.kb.models import CoreExpectField, ExpectField
    from gdn_review.kb.step_config import STEP_EXPECT_FIELDS

    asked: dict[str, str] = {}

    def ask(fields, who: str) -> None:
        for field in fields:
            asked.setdefault(field, who)

    ask(record.case(case_id).expect, "its expect states it")
    if record.case(case_id).step is not None:  # what a step is for: its groups compared
        ask(STEP_EXPECT_FIELDS, "a step compares its groups")
    for claim in record.claims:
        check = claim.check
        if check.kind not in ("equivalence", "differential") or case_id not in check.cases:
            continue
        if check.fields is not None:
            ask(check.fields, f"claim {claim.id} compares it")
        else:  # equivalence: what the claim compares of its other cases
            for other in check.cases:
                if other != case_id:
                    ask(
                        check.compared(record.case(other).expect),
                        f"claim {claim.id} compares it of case {other}",
                    )
    core = set(typing.get_args(CoreExpectField))
    return {
        field: asked[field]
        for field in typing.get_args(ExpectField)
        if field in asked and field not in core
    }


def needed_expect(record, case_id: str, measured: dict) -> dict:
    """The expect to write for a case from its snapshot: the core fields and those ``case_fields``
    names."""
    if record.case(case_id).call is not None:
        # A call case has no batch fields: its outcome is what the call returned or raised.
        return {field: measured[field] for field in CALL_FIELDS if field in measured}
    others = {field: measured[field] for field in case_fields(record, case_id) if field in measured}
    return {**snapshot_take.core_expect(measured), **others}


def _missing_notes(record, case_id: str, measured: dict, release: str) -> list[str]:
    """A field the case needs that its snapshot does not hold (a field no release has, an open
    PR's)."""
    return [
        f"case {case_id}: {field} ({who}) is not measured on vLLM {release}: state it by hand"
        for field, who in case_fields(record, case_id).items()
        if field not in measured
    ]


def default_release(record, wanted: list[str]) -> tuple[str | None, str]:
    """The release an expect should be measured on when none is given, and why (None: the installed
    one).

    An expectation measured on the release the suite then runs can never fail
    there, so it comes from the release the claims speak of: the base release
    (without the PR) for a claim of no change (``before: holds``), the head
    release for a fix or an improvement (``before: fails``). Cases that claims
    of both kinds name need ``--release`` (or ``--case`` per kind).
    """
    befores = {
        claim.before
        for claim in record.claims
        if claim.check.kind == "equivalence" and set(claim.check.cases) & set(wanted)
    }
    base, head = record.target.base_release, record.target.head_release
    if befores == {Verdict.HOLDS} and base:
        return (
            base,
            f"measured on vLLM {base}, the base release: a claim of no change "
            "(before: holds) expects what the release without the PR builds",
        )
    if befores == {Verdict.FAILS} and head:
        return (
            head,
            f"measured on vLLM {head}, the head release: a fix or improvement "
            "(before: fails) expects what the PR builds",
        )
    if befores == {Verdict.FAILS}:  # an open PR: no release has it yet
        return None, (
            "measured on the installed vLLM: the claims naming these cases are fixes "
            "(before: fails) of an open PR, which has no head release; check that the "
            "measured values are what the PR builds (or give --release)"
        )
    if {Verdict.HOLDS, Verdict.FAILS} <= befores:
        raise SnapshotError(
            f"{record.label}: the cases to fill are named by claims of no "
            f"change (before: holds, measured on {base}) and by "
            f"fixes (before: fails, measured on {head}): give --release, or "
            "fill them with --case ID per kind"
        )
    return None, (
        "measured on the installed vLLM: no claim naming these cases "
        "states `before`; an expect measured on the "
        "release the suite runs cannot fail there, so read it through (or give --release)"
    )


def _deviation_notes(record, case_id: str, release: str) -> list[str]:
    """A known deviation of this case on this release: the measured expect is the deviating
    value."""
    notes = []
    for claim in record.claims:
        if claim.check.kind != "equivalence" or case_id not in claim.check.cases:
            continue
        for deviation in claim.known_deviations:
            in_range = release_range.contains(deviation.releases, release)
            if (not deviation.cases or case_id in deviation.cases) and in_range:
                notes.append(
                    f"case {case_id}: claim {claim.id} has a known deviation on vLLM "
                    f"{release} ({deviation.reason.strip()[:80]}); "
                    "its expect is what this release measures: state what the claim expects instead"
                )
    return notes


def _last_line(node: yaml.Node, lines: list[str]) -> int:
    """0-based index of the last line that holds part of ``node`` (not the comments or blank lines
    after it)."""
    if isinstance(node, yaml.ScalarNode):
        if node.style in ("|", ">"):  # a block scalar ends where the next token starts
            end = node.end_mark.line - (1 if node.end_mark.column == 0 else 0)
            while end > node.start_mark.line and not lines[end].strip():
                end -= 1
            return end
        return node.end_mark.line
    if getattr(node, "flow_style", False) or not node.value:
        return node.end_mark.line
    last = node.value[-1]
    if isinstance(node, yaml.MappingNode):
        return max(_last_line(last[0], lines), _last_line(last[1], lines))
    return _last_line(last, lines)


def mapping_keys(node: yaml.Node) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    """A mapping node's entries: key -> (key node, value node); {} for any other node."""
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {key.value: (key, value) for key, value in node.value}


def item_nodes(root: yaml.Node, name: str):
    """(index, node, ``mapping_keys``) of each item of the top-level list ``name`` (cases,
    claims) of a composed record: where an edit of the text goes."""
    items = mapping_keys(root).get(name, (None, None))[1]
    for index, node in enumerate(items.value if isinstance(items, yaml.SequenceNode) else []):
        yield index, node, mapping_keys(node)


def insert_expects(text: str, file: str, expects: dict[str, dict]) -> str:
    """``text`` with an ``expect:`` block after each named case's last line (an empty ``expect``
    replaced)."""
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    edits: list[tuple[int, int, list[str]]] = []  # (first line, lines replaced, new lines)
    for index, node, keys in item_nodes(yaml.compose(text, Loader=SAFE_LOADER), "cases"):
        case_id = keys.get("id", (None, None))[1]
        if case_id is None or case_id.value not in expects:
            continue
        where = f"{file}:{node.start_mark.line + 1}:{node.start_mark.column + 1}: cases[{index}]"
        if node.flow_style:
            raise SnapshotError(
                f"{where}: case {case_id.value!r} is written in flow style "
                f"({{...}}): write it as a block mapping to fill its expect"
            )
        indent = node.value[0][0].start_mark.column
        block = [line + "\n" for line in snapshot_take.expect_block(expects[case_id.value], indent)]
        if "expect" in keys:  # `expect: {}` or `expect:` with nothing: that line is replaced
            key, value = keys["expect"]
            if _last_line(value, lines) != key.start_mark.line:
                raise SnapshotError(
                    f"{where}.expect: an empty expect over several lines: leave it out to fill it"
                )
            edits.append((key.start_mark.line, 1, block))
        else:
            edits.append((_last_line(node, lines) + 1, 0, block))
    for first, count, new in sorted(edits, reverse=True):
        lines[first : first + count] = new
    return "".join(lines)


def check_filled(new_text: str, file: str, before, expects: dict[str, dict]) -> None:
    """The edited text loads, validates, states exactly the planned expects and changes nothing
    else."""
    try:
        after = parse_record(new_text, file, expects_optional=True)
    except RecordErrors as failure:  # its lines are the edited text's, not the file's: say so
        raise SnapshotError(
            f"{file}: the record with the measured expects would not load "
            f"({len(failure.errors)} error(s), first: "
            f"{str(failure.errors[0]).split(': ', 1)[-1]}); nothing was "
            "written: paste the blocks of --print by hand"
        ) from None
    wrong = [
        case.id
        for case in after.cases
        if case.expect != expects.get(case.id, before.case(case.id).expect)
    ]
    if wrong or after.model_dump(exclude={"cases"}) != before.model_dump(exclude={"cases"}):
        raise SnapshotError(
            f"{file}: the edited record would not state the measured expects "
            f"of {', '.join(wrong) or 'its cases'} "
            "(an unusual layout?); nothing was written: paste the blocks of --print by hand"
        )


def filled_lines(filled: Filled, written: bool) -> list[str]:
    """What the command prints: the blocks (or what was written), cases left without one, notes."""
    out = []
    if written:
        if filled.expects:
            out.append(
                f"wrote the expect of {len(filled.expects)} case(s) into "
                f"{filled.path}, measured on vLLM {filled.release} "
                f"({filled.device}): {', '.join(filled.expects)}; read them through (git diff)"
            )
    else:
        for case_id, expect in filled.expects.items():
            out.append(
                f"# expect of case {case_id}, measured on vLLM {filled.release} ({filled.device})"
            )
            out += snapshot_take.expect_block(expect)
    out += [f"no expect for case {case_id}: it {why}" for case_id, why in filled.left.items()]
    out += [f"note: {note}" for note in filled.notes]
    return out
