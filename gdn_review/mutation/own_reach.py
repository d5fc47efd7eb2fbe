"""The PR's own lines reached: which cases execute each line a record's PR added or changed.

A record's claims can hold without its cases ever running the PR's change (a FULL-graph
decode case of #35431 held, yet never executed the line the PR changed). This stage says,
per line of the record's own hunks (``target.own_hunks``, else the whole diff between its
base and head releases: ``catalogue.own_hunks``, ``operators.pr_hunks``), mapped by content
onto the loaded release's file (``operators.map_hunks``), which cases execute it, and for
each line no case reaches the case that came closest.

**Closest**, defined simply: the case that executes the nearest line *before* it in the same
function (what ran up to where the case turned away); failing that, the nearest line after
it in the function; when no case enters the function, the case that executes the most of
the PR's other lines. Ties go to the case that executes more of the PR's lines, then by name.

A line is a statement inside a function body (a compound statement: its header); a line at
module or class level runs at import and is not judged, nor is a docstring. Construction
code runs once per cached builder in a pytest session, under the first test that needs that
builder: a line of ``__init__`` (or what it calls on ``self``) that the session ran but none
of the record's cases did reads "during construction". ``validate --reach`` builds each case
with builders of its own, so there each case's construction is its own.

States of a record: **reached** (every own line), **partly reached** (the unreached named),
**not tied** (none: its claims are *not tied to the change*), **no own lines stated** (a
contract, or ``own_hunks: []``), **not judged** (an open PR, the releases' sources missing,
the hunks gone from the loaded file). The result is a part of the evidence file (``reach``),
which the report reads.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Callable

from gdn_review.common import release, release_trees
from gdn_review.kb import Record
from gdn_review.kb.subjects import key_label
from gdn_review.mutation import operators, reach
from gdn_review.mutation.catalogue import own_hunks
from gdn_review.mutation.guard_lines import construction_functions
from gdn_review.run import evidence_file

SHOWN_CASES = 4  # cases named per line in the command's output; the evidence keeps them all
JUDGED = ("reached", "partly reached", "not tied")


@dataclasses.dataclass(frozen=True)
class OwnLine:
    line: int  # first line of the statement in the loaded file
    function: str
    code: str
    span: tuple[int, ...]  # the lines whose execution means it ran


@dataclasses.dataclass
class OwnLines:
    record: str
    release: str
    target: str
    lines: list[OwnLine]
    state: str | None = None  # set when nothing can be judged: "no own lines stated", "not judged"
    reason: str = ""
    construction: frozenset[str] = frozenset()
    bodies: dict[str, frozenset[int]] = dataclasses.field(default_factory=dict)  # function -> lines


def own_lines(record: Record, fetch: bool = True, say: Callable[[str], None] = print) -> OwnLines:
    """The statements of the loaded release's target file that carry the record's own hunks."""
    key, target = str(record.key), record.target.file
    try:
        loaded_release, root = release.loaded()
        loaded = (root / target).read_text(encoding="utf-8")
    except (release.ReleaseError, OSError) as error:
        return OwnLines(key, "?", target, [], "not judged", f"the loaded vLLM: {error}")

    def none(state: str, reason: str) -> OwnLines:
        return OwnLines(key, loaded_release, target, [], state, reason)

    if record.contract is not None:
        return none("no own lines stated", "a contract record has no PR diff")
    if record.target.own_hunks == []:
        return none("no own lines stated", "target.own_hunks is empty")
    base, head = record.target.base_release, record.target.head_release
    if record.is_open or not base or not head:
        return none("not judged", "no release has the PR's lines (its change is not merged)")
    texts = {}
    for version in (base, head):
        try:
            texts[version] = (
                loaded
                if version == loaded_release
                else release_trees.source(version, target, fetch=fetch, say=say)
            )
        except release.ReleaseError as error:
            texts[version] = None
            say(f"note: {key_label(record.key)}: vLLM {version} unavailable: {error}")
    missing = [v for v in (base, head) if texts[v] is None]
    if missing:
        return none(
            "not judged",
            f"the PR's diff needs vLLM {' and '.join(missing)} "
            "(not in the release cache; `gdn-review mutate` fetches it)",
        )
    hunks = own_hunks(record, operators.pr_hunks(texts[base], texts[head]))
    mapped, gone = operators.map_hunks(hunks, loaded)
    statements = _statements(loaded, mapped)
    if not statements:
        why = (
            f"the PR's {len(gone)} changed block(s) are no longer in vLLM {loaded_release}"
            if gone
            else "the PR's lines are outside function bodies (they run at import)"
        )
        return none("not judged", why)
    bodies: dict[str, set[int]] = {}
    for start, end, _, function in reach.function_statements(ast.parse(loaded)):
        if function in {own.function for own in statements}:
            bodies.setdefault(function, set()).update(range(start, end + 1))
    return OwnLines(
        key,
        loaded_release,
        target,
        statements,
        construction=frozenset(construction_functions(loaded)),
        bodies={function: frozenset(lines) for function, lines in bodies.items()},
    )


def _statements(source: str, mapped: set[int]) -> list[OwnLine]:
    """The innermost function-body statement holding each mapped line (a compound one: its header
    when the line is there); docstrings left out."""
    tree = ast.parse(source)
    docstrings = {
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }
    statements = reach.function_statements(tree)
    text = source.splitlines()
    found: dict[tuple[int, ...], OwnLine] = {}
    for line in sorted(mapped):
        holding = [s for s in statements if s[0] <= line <= s[1]]
        if not holding:
            continue
        start, end, header_end, function = min(holding, key=lambda s: s[1] - s[0])
        if start in docstrings:
            continue
        span = tuple(range(start, (header_end if line <= header_end else end) + 1))
        if span not in found:
            found[span] = OwnLine(start, function, text[start - 1].strip()[:90], span)
    return sorted(found.values(), key=lambda own: own.line)


def judge(
    own: OwnLines,
    cases: dict[str, set[int]],
    session_lines: set[int] | None = None,
    how: str = "pytest",
) -> dict:
    """The ``reach`` part of one record: per own line the cases that execute it, the unreached with
    the closest case, and the record's state."""
    part = {"release": own.release, "target": own.target, "how": how}
    if own.state is not None:
        return {**part, "state": own.state, "reason": own.reason, "lines": [], "unreached": []}
    hits = {  # named cases first, then an invariant's examples (``C3 partition``)
        own_line.line: sorted(
            (c for c, seen in cases.items() if seen.intersection(own_line.span)),
            key=lambda c: (" " in c, c),
        )
        for own_line in own.lines
    }
    count = {c: sum(c in by for by in hits.values()) for c in cases}
    rows, unreached = [], []
    for own_line in own.lines:
        row = {"line": own_line.line, "function": own_line.function, "code": own_line.code}
        if hits[own_line.line]:
            rows.append({**row, "cases": hits[own_line.line]})
            continue
        if own_line.function in own.construction and (session_lines or set()).intersection(
            own_line.span
        ):
            rows.append({**row, "cases": [], "construction": True})
            continue
        body = own.bodies.get(own_line.function, frozenset())
        closest, why = _closest(own_line, body, cases, count)
        unreached.append({**row, "closest": closest, "why": why})
        rows.append({**row, "cases": []})
    reached = len(own.lines) - len(unreached)
    state = "reached" if not unreached else ("partly reached" if reached else "not tied")
    return {
        **part,
        "state": state,
        "reason": f"{reached} of {len(own.lines)} own lines executed by the record's cases",
        "lines": rows,
        "unreached": unreached,
    }


def _closest(
    own_line: OwnLine, body: frozenset[int], cases: dict[str, set[int]], count: dict[str, int]
) -> tuple[str | None, str]:
    """(case, why) of the case that came closest to an unreached line (see the module's doc);
    ``body``: the lines of its function."""
    rank = sorted(cases, key=lambda c: (-count[c], c))
    before = [(line, c) for c in rank for line in cases[c] & body if line < own_line.line]
    if before:
        line = max(at for at, _ in before)
        case = next(c for at, c in before if at == line)
        return case, f"executes line {line}, the nearest line before it in {own_line.function}"
    after = [(line, c) for c in rank for line in cases[c] & body if line > own_line.line]
    if after:
        line = min(at for at, _ in after)
        case = next(c for at, c in after if at == line)
        return case, f"executes line {line}, the nearest line after it in {own_line.function}"
    best = next((c for c in rank if count[c]), None)
    if best is not None:
        return best, (
            f"no case enters {own_line.function}; it executes the most of the PR's lines "
            f"({count[best]})"
        )
    return None, f"no case enters {own_line.function} or executes any of the PR's lines"


# --- The reach of the records' own lines, from a traced run or built here ---------------


def pytest_args(records: dict[Path, Record]) -> tuple[str, ...]:
    """What makes a ``gdn-review run`` session trace each case's lines (``reach``'s plugin); ()
    when no record states own lines."""
    targets = sorted(
        {
            record.target.file
            for record in records.values()
            if record.contract is None and record.target.own_hunks != []
        }
    )
    if not targets:
        return ()
    return ("-p", "gdn_review.mutation.reach", *(f"--gdn-reach={t}" for t in targets))


def add_to_evidence(
    evidence_path: Path,
    records: dict[Path, Record],
    say: Callable[[str], None] = print,
    trace: reach.LineTrace | None = None,
    fetch: bool = True,
) -> list[str]:
    """Judge each record's own lines against the cases its tests ran, into the evidence file's
    ``reach`` part; the lines to print.

    The traced lines come from ``trace`` (``mutate``'s in-process baseline) or from
    the part the run's plugin left in the file (``gdn-review run``). A record none of
    whose tests ran gets no part.
    """
    data = evidence_file.read(evidence_path)
    raw = data.get("reach") if isinstance(data.get("reach"), dict) else {}
    shown: list[str] = []
    for _, record in sorted(records.items(), key=lambda item: item[1].sort_key):
        key = str(record.key)
        target = record.target.file
        if trace is not None:
            cases = trace.cases_of(key, target)
            session = trace.session_lines(target)
        else:
            traced = (raw.get(key) or {}).get("traced")
            if not isinstance(traced, dict):
                continue
            cases = {label: set(lines) for label, lines in traced.items()}
            session = set(raw[key].get("session_lines") or [])
        if not cases:
            continue
        part = judge(own_lines(record, fetch=fetch, say=say), cases, session, how="pytest")
        part["record_sha256"] = (data.get("record_sha256") or {}).get(key)
        evidence_file.add_part(evidence_path, "reach", key, part)
        shown += report_lines(record.label, part)
    return shown


def validate_reach(
    records: dict[Path, Record], fetch: bool = True, say: Callable[[str], None] = print
) -> dict[str, dict]:
    """``validate --reach``: each record's named cases built once under the line trace (no pytest,
    no checks), judged; record key -> its part."""
    from gdn_review.kb import is_draft

    found = {}
    for _, record in sorted(records.items(), key=lambda item: item[1].sort_key):
        if is_draft(record):
            continue
        own = own_lines(record, fetch=fetch, say=say)
        cases = {}
        if own.state is None:
            cases = reach.trace_cases(record.case_inputs(), own.target)
        found[str(record.key)] = judge(own, cases, how="validate")
    return found


def not_tied(parts: dict[str, dict]) -> list[str]:
    """The records whose claims are not tied to the change (no case executes any own line)."""
    return [key for key, part in parts.items() if part.get("state") == "not tied"]


def report_lines(label: str, part: dict) -> list[str]:
    """What a command prints of one record's part: a summary, then a line per own line."""
    on = f"{label} on vLLM {part.get('release', '?')}"
    state = part.get("state")
    if state not in JUDGED:
        return [f"reach: {on}: {state}: {part.get('reason', '')}"]
    total = len(part["lines"])
    if state == "not tied":
        head = (
            f"reach: {on}: claims not tied to the change: no case executes any of its "
            f"{total} own line{'s' if total != 1 else ''}"
        )
    else:
        head = f"reach: {on}: {part['reason']}"
    closest = {row["line"]: row for row in part["unreached"]}
    shown = [head]
    for row in part["lines"]:
        where = f"  line {row['line']} ({row['function']}) `{row['code']}`"
        if row["cases"]:
            names = row["cases"][:SHOWN_CASES]
            more = len(row["cases"]) - len(names)
            shown.append(f"{where}: {', '.join(names)}{f' +{more} more' if more else ''}")
        elif row.get("construction"):
            shown.append(f"{where}: during construction (a builder cached by an earlier test)")
        else:
            miss = closest[row["line"]]
            near = f"closest: {miss['closest']} ({miss['why']})" if miss["closest"] else miss["why"]
            shown.append(f"{where}: no case reaches it; {near}")
    return shown
