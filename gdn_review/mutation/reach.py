"""Which lines of the target file the unmutated suite executes, and which mutants edit none of them.

A survivor whose edited lines no test ever executes is not a weak test but a
missing one: ``gdn-review mutate`` names it **not reached**, with the line and
the function, instead of ``survived``.

Why the baseline, traced once (and not each forked child): the tests are
deterministic (fixed cases; Hypothesis is seeded per claim, ``@seed``), and a
mutant's run is the baseline's run up to the first time it executes an edited
statement. So a statement the unmutated suite never executes is never executed
under a mutant whose edits all lie there: the mutant cannot be told apart by
any test, whatever the test checks. Tracing the baseline costs one traced run;
tracing every child would cost it once per mutant. The trace is
``sys.settrace`` (Python 3.11 has no ``sys.monitoring``): a global function
that returns a line tracer only for frames of the target file. While any trace
function is set, 3.11 runs every Python instruction on its slow tracing path
(about 4x slower), so the trace is on only while a test runs (its setup, call
and teardown), never while pytest collects or reports, and the caller imports
vLLM and warms it before (``harness.warm_up``): traced everywhere, the
baseline of #52078 took 32 s instead of 21 s. Collecting a generated module
runs no builder code (cases are data; builders are made by the tests), and a
mutant that breaks the import is killed, never a survivor. Lines are kept per
test module but judged over all of them (see ``LineTrace.reached``).

Only edits inside function bodies are judged: a module- or class-level line (a
default, a constant, a decorator) runs at import, before the trace starts, so
it is never called not reached. An edit that only inserts lines is not judged
either (no original statement to look up). Only a survivor is renamed: a
mutant that killed a test was reached, whatever the trace says.

The same trace keeps lines per case (``per_case``: the test's ``case`` mark or
``case_id`` parameter; an invariant's ``claim property``) for the reach report
of a record's own lines (``own_reach``): ``gdn-review run`` loads this module
as a pytest plugin (``-p gdn_review.mutation.reach --gdn-reach TARGET``), which
adds each record's traced lines to the evidence file; ``mutate`` reads its
in-process baseline's; ``validate --reach`` builds each named case once under
it, without pytest (``trace_cases``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import os
import sys
import threading
from pathlib import Path

import pytest

_UNSEEN = object()


@dataclasses.dataclass(frozen=True)
class Site:
    """One edited statement of the original file: the lines whose execution means it ran."""

    line: int  # the first edited line (1-based, original file)
    function: str  # qualified name of the innermost function holding it
    lines: tuple[int, ...]  # the statement's own lines (a compound statement: its header)


class LineTrace:
    """pytest plugin of the baseline: lines of the target files executed, per test module.

    ``targets``: the target files as relative paths (``vllm/v1/.../gdn_attn.py``);
    a frame belongs to one when its code's file name ends with it (the loaded
    release's copy, installed or unpacked on PYTHONPATH; never a mutant's
    in-memory source, whose name says so).
    """

    def __init__(self, targets: set[str], per_test: bool = False, per_case: bool = False):
        self.targets = {t.replace(os.sep, "/") for t in targets}
        self.by_module: dict[str, dict[str, set[int]]] = {}
        # per_test (the whole-file score): lines per test id too, to run a mutant
        # only under the tests that execute its edit
        self.by_test: dict[str, dict[str, set[int]]] | None = {} if per_test else None
        # per_case (the reach report): (record, case label) -> target -> lines
        self.by_case: dict[tuple[str, str], dict[str, set[int]]] | None = {} if per_case else None
        # False when another tracer (coverage, a debugger) was there: nothing judged
        self.active = False
        self._files: dict[str, str | None] = {}
        self._current: dict[str, set[int]] = {}

    def _target_of(self, filename: str) -> str | None:
        path = os.path.realpath(filename).replace(os.sep, "/")
        return next((t for t in self.targets if path.endswith("/" + t)), None)

    def _trace(self, frame, event, arg):
        filename = frame.f_code.co_filename
        target = self._files.get(filename, _UNSEEN)
        if target is _UNSEEN:
            target = self._files[filename] = self._target_of(filename)
        if target is None:
            return None
        add = self._current.setdefault(target, set()).add

        def lines(frame, event, arg):
            if event == "line":
                add(frame.f_lineno)
            return lines

        return lines

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session):
        self.active = sys.gettrace() is None

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        if not self.active:
            yield
            return
        self.start()
        try:
            yield
        finally:
            current = self.stop()
            module = self.by_module.setdefault(module_key(item.path), {})
            for target, lines in current.items():
                module.setdefault(target, set()).update(lines)
            if self.by_test is not None:
                self.by_test[item.nodeid] = current
            if self.by_case is not None:
                record = _mark_arg(item, "record")
                if record is not None:
                    self.add_case(str(record), case_label(item), current)

    def start(self) -> None:
        """Trace from now on (this thread and threads started from now), into a fresh set."""
        self._current = {}
        sys.settrace(self._trace)
        threading.settrace(self._trace)  # a thread a test starts runs the builder too

    def stop(self) -> dict[str, set[int]]:
        """Stop tracing; the lines of each target executed since ``start``."""
        sys.settrace(None)
        threading.settrace(None)
        return self._current

    def add_case(self, record: str, label: str, lines: dict[str, set[int]]) -> None:
        slot = self.by_case.setdefault((record, label), {})
        for target, seen in lines.items():
            slot.setdefault(target, set()).update(seen)

    def cases_of(self, record: str, target: str) -> dict[str, set[int]]:
        """Case label -> lines of ``target`` its tests executed, for one record (per_case)."""
        key = target.replace(os.sep, "/")
        return {
            label: set(lines.get(key, ()))
            for (number, label), lines in (self.by_case or {}).items()
            if number == str(record)
        }

    def session_lines(self, target: str) -> set[int]:
        """Lines of ``target`` executed under any test of the session."""
        key = target.replace(os.sep, "/")
        return set().union(*(lines.get(key, set()) for lines in self.by_module.values()))

    def reached(self, module: Path, target: str) -> set[int] | None:
        """Lines of ``target`` executed while any module's tests ran (None: not traced).

        The union over modules, not ``module``'s own lines: builders are made once
        per process and shared by the modules that need the same settings, so the
        builder's construction runs under the first such module only, while a forked
        mutant child (which drops the cached builders) constructs again under its
        record's module. Crediting each module with its own lines alone would call a
        mutant of construction code not reached when it ran; the union can only err
        the safe way (survived instead of not reached).
        """
        return self.session_lines(target) if self.active else None


def module_key(path) -> str:
    return str(Path(path).resolve())


def _mark_arg(item, name):
    marker = item.get_closest_marker(name)
    return marker.args[0] if marker and marker.args else None


def case_label(item) -> str:
    """The case a test ran: its ``case`` mark or ``case_id`` parameter, an invariant's boundary
    batch (``boundary: <name>``); an invariant's examples go by ``<claim> <property>``; any other
    test by its name."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    case = _mark_arg(item, "case") or params.get("case_id")
    if case:
        return str(case)
    if params.get("boundary"):  # an invariant's boundary batch, by its name
        return f"boundary: {params['boundary']}"
    claim, prop = _mark_arg(item, "claim"), params.get("prop")
    if prop:
        return f"{claim} {prop}" if claim else str(prop)
    return item.name


# --- As a pytest plugin of `gdn-review run` (``-p gdn_review.mutation.reach --gdn-reach F``) ---


def pytest_addoption(parser):
    parser.getgroup("gdn-review").addoption(
        "--gdn-reach",
        action="append",
        default=[],
        metavar="TARGET",
        help="trace which lines of TARGET (vllm/.../gdn_attn.py) each case executes and add them "
        "to the evidence file (the reach report of a record's own lines)",
    )


def pytest_configure(config):
    targets = config.getoption("gdn_reach")
    if targets and not hasattr(config, "workerinput"):
        config.pluginmanager.register(CaseTrace(config, set(targets)), "gdn-review-reach")


class CaseTrace(LineTrace):
    """The line trace per case of a ``gdn-review run`` session; its lines go into the evidence."""

    def __init__(self, config, targets: set[str]):
        super().__init__(targets, per_case=True)
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session):
        super().pytest_sessionstart(session)
        if self.active:  # vLLM imported before the trace starts: a traced import is slow
            from gdn_review import harness
            from gdn_review.harness.origin import CouldNotRun

            # A set-up that raises (a platform that refuses) raises again in each test, which
            # then reads "could not run" with vLLM's message: not the session's internal error.
            with contextlib.suppress(CouldNotRun):
                harness.warm_up()

    @pytest.hookimpl(trylast=True)  # after the evidence plugin wrote the file
    def pytest_sessionfinish(self, session, exitstatus):
        from gdn_review.run import evidence_file

        if not self.active or self.config.getoption("gdn_no_evidence", False):
            return
        path = Path(
            self.config.getoption("gdn_evidence", None)
            or self.config.rootpath / evidence_file.DEFAULT_PATH
        )
        if evidence_file.read_if_any(path) is None:
            return
        records = sorted({record for record, _ in self.by_case})
        for target in sorted(self.targets):
            session_lines = sorted(self.session_lines(target))
            for record in records:
                traced = {
                    label: sorted(lines)
                    for label, lines in sorted(self.cases_of(record, target).items())
                }
                part = {"target": target, "traced": traced, "session_lines": session_lines}
                evidence_file.add_part(path, "reach", record, part)


def trace_cases(cases: dict[str, dict], target: str, device: str = "cpu") -> dict[str, set[int]]:
    """Case id -> lines of ``target`` that building it once executes (no pytest; imports vLLM
    through the harness).

    Each case gets builders of its own (the cache is cleared before it), so the
    construction lines it runs are its own; a case whose release range leaves out
    the loaded release is left out; one that raises or skips keeps the lines it ran.
    """
    from gdn_review import harness

    harness.warm_up()
    trace = LineTrace({target})
    if sys.gettrace() is not None:  # a debugger or coverage is tracing: nothing can be judged
        return {}
    found: dict[str, set[int]] = {}
    for case_id, case in sorted(cases.items()):
        if not harness.release_in_range(case.get("releases")):
            continue
        harness.make_builder.cache_clear()
        harness.engine_config.cache_clear()
        trace.start()
        try:
            harness.snapshot_case(device, case)
        except BaseException as error:  # noqa: BLE001  (a skip: pytest's outcome is a BaseException)
            if isinstance(error, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            lines = trace.stop()
        found[case_id] = set(lines.get(target.replace(os.sep, "/"), set()))
    harness.make_builder.cache_clear()
    harness.engine_config.cache_clear()
    return found


def edit_sites(original: str, mutated: str) -> list[Site] | None:
    """The statements of ``original`` that the mutant edits; None when it cannot be judged.

    None: the edit inserts lines only, or touches a line outside every
    function body (it runs at import), or the original does not parse.
    """
    try:
        tree = ast.parse(original)
    except SyntaxError:
        return None
    statements = function_statements(tree)
    matcher = difflib.SequenceMatcher(
        a=original.splitlines(), b=mutated.splitlines(), autojunk=False
    )
    sites: list[Site] = []
    for tag, i1, i2, _, _ in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "insert":
            return None
        for line in range(i1 + 1, i2 + 1):
            holding = [s for s in statements if s[0] <= line <= s[1]]
            if not holding:
                return None
            start, end, header_end, function = min(holding, key=lambda s: s[1] - s[0])
            span = tuple(range(start, (header_end if line <= header_end else end) + 1))
            site = Site(line, function, span)
            if not any(s.lines == site.lines for s in sites):
                sites.append(site)
    return sites or None


def function_statements(tree: ast.Module) -> list[tuple[int, int, int, str]]:
    """(first line, last line, last header line, function) of every statement inside a function
    body."""
    found: list[tuple[int, int, int, str]] = []

    def visit(node, scope: list[str], function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                if function is not None:
                    start = min(
                        [child.lineno] + [d.lineno for d in getattr(child, "decorator_list", [])]
                    )
                    body = getattr(child, "body", None)
                    header_end = (
                        body[0].lineno - 1 if isinstance(body, list) and body else child.end_lineno
                    )
                    found.append((start, child.end_lineno, max(start, header_end), function))
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    # Its decorators and defaults are expressions of the enclosing scope: no
                    # statements.
                    visit(child, [*scope, child.name], ".".join([*scope, child.name]))
                elif isinstance(child, ast.ClassDef):
                    # a class body runs where the class statement does
                    visit(child, [*scope, child.name], function)
                else:
                    visit(child, scope, function)
            elif isinstance(child, (ast.ExceptHandler, ast.match_case)):
                visit(child, scope, function)

    visit(tree, [], None)
    return found


def unreached(sites: list[Site] | None, reached: set[int] | None) -> str | None:
    """The hint for a mutant none of whose edited statements ran, or None (it ran, or cannot be
    judged)."""
    if not sites or reached is None:
        return None
    if any(line in reached for site in sites for line in site.lines):
        return None
    first = sites[0]
    return f"no test executes line {first.line} of {first.function}: add a case that reaches it"
