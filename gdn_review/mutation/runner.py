"""Run mutants against the generated tests: vLLM imported once, one forked child per mutant.

The parent imports vLLM, runs the unmutated suite once (the baseline, which
must pass and which warms every import and builder), then forks a child per
mutant. The child loads the mutated source in memory in place of vLLM's
module (``harness.mutation``), rebuilds the builders and runs the same tests
under pytest; the parent is never mutated, and a child that crashes or hangs
is the child's problem alone: past the per-mutant timeout it is killed and
the next child starts from the same clean parent. Nothing is written to
vLLM's files at any point.

CUDA must not be initialised before a fork, so mutants run on CPU only
(``prepare_cpu`` is called before vLLM is imported).
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import pytest

from gdn_review.common import forked, interrupts
from gdn_review.common.vocabulary import FAILING, MutantStatus, Outcome
from gdn_review.run import suite


def prepare_cpu() -> None:
    """Keep CUDA out of this process: forking after CUDA is initialised is unsafe."""
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ["VLLM_TARGET_DEVICE"] = "cpu"


def baseline(tests: list[str], evidence: Path, plugins: tuple = ()) -> tuple[int, float]:
    """The unmutated suite, in this process, with the evidence plugin: (pytest exit code, seconds).

    ``tests``: ``suite.test_args``; ``plugins``: more pytest plugins for this run
    (``reach.LineTrace``: the lines it executes). vLLM is imported and warm first, so the
    seconds are the tests' and a traced run does not trace the imports.
    """
    from gdn_review import harness

    # Where the set-up raises (the platform, VllmConfig), each test says so itself: could not run.
    with contextlib.suppress(Exception):
        harness.warm_up()
    started = time.monotonic()
    code = suite.run_pytest(suite.pytest_args(tests, evidence), here=True, plugins=plugins)
    # The baseline's builders are never used again here, and each child drops them first
    # (``load_mutated``): dropped once, here, rather than freed page by page in every child.
    harness.make_builder.cache_clear()
    # Everything made so far is shared with every child: keep the collector off it
    # (a full collection over vLLM's and torch's objects costs a child ~1.5 s).
    gc.collect()
    gc.freeze()
    interrupts.check()  # pytest ends an interrupted session with exit code 2: the run stops here
    return code, time.monotonic() - started


def baseline_failed(code: int, evidence: Path | None = None) -> tuple[str, bool]:
    """Why no mutant runs when the baseline failed, from its evidence where it has some; and
    whether it measured no failure (its tests could not run, or raised an error in the check:
    no verdict, exit 3 rather than 1).

    A test that could not run (set-up raised before the builder under test was entered) says
    so with vLLM's message; one whose check raised is gdn-review's fault; neither is a test
    that fails."""
    from gdn_review.report.verdicts import outcome_words
    from gdn_review.run import evidence_file

    tests = []
    if evidence is not None and evidence.exists():
        with contextlib.suppress(evidence_file.EvidenceError):
            tests = evidence_file.read(evidence)["tests"]
    said = []
    for outcome, fix in (
        (Outcome.COULD_NOT_RUN, "fix the set-up or the release's platform, not vLLM's code"),
        (Outcome.CHECK_ERROR, "gdn-review's own code raised: a bug to report"),
    ):
        these = [t for t in tests if t.get("outcome") == outcome]
        if these:
            reason = (these[0].get("reason") or outcome).removeprefix(f"{outcome}: ")
            said.append(
                f"{len(these)} test(s) {outcome_words(outcome)} ({fix}); "
                f"first: {these[0]['nodeid']}: {reason}"
            )
    failing = [t for t in tests if t.get("outcome") in FAILING]
    if said and not failing:
        return (
            "the generated suite measured nothing without mutants: "
            + "; ".join(said)
            + ". No mutant runs: a kill would mean nothing",
            True,
        )
    first = f"; first: {failing[0]['nodeid']}: {failing[0].get('reason')}" if failing else ""
    also = f" ({'; '.join(said)})" if said else ""
    return (
        f"the generated suite does not pass without mutants (pytest exit {code}"
        f"{f', {len(failing)} test(s) fail' if failing else ''}{first}){also}: "
        "a kill would mean nothing; "
        "fix the suite or the record first (gdn-review run shows the failures)",
        False,
    )


class KillCollector:
    """pytest plugin of a mutant's run: which tests fail, per claim; stops a claim at its first
    kill.

    Hypothesis tests run last (they are the slowest), so a cheap test kills first.
    """

    def __init__(self, tests: list[str] | None = None):
        # The test functions a round names by node id: only they are made into items (None:
        # a whole file is asked for). pytest would make every function's parametrized items
        # of each module and then drop those not named (a seventh of a child's time, py-spy).
        named = [arg for arg in tests or [] if "::" in arg]
        whole = any(arg.endswith(".py") for arg in tests or [])
        self.functions = (
            None if whole or not named else {n.rpartition("::")[2].split("[")[0] for n in named}
        )
        self.killed_by: dict[str, list[str]] = {}
        self.messages: dict[str, str] = {}
        self.passed: set[str] = set()
        self.claims: dict[str, str] = {}  # nodeid -> claim
        self.tests_run = 0

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        for item in items:
            marker = item.get_closest_marker("claim")
            # Tests of no claim (the full-metadata snapshot) are a column of their own.
            name = getattr(item, "originalname", item.name).removeprefix("test_")
            self.claims[item.nodeid] = str(marker.args[0]) if marker and marker.args else name
        items.sort(
            key=lambda item: bool(getattr(getattr(item, "obj", None), "is_hypothesis_test", False))
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_pycollect_makeitem(self, collector, name, obj):
        if self.functions is not None and callable(obj) and name not in self.functions:
            if collector.funcnamefilter(name):
                return []  # a test function the round does not name: no items
        return None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item):
        if self.claims.get(item.nodeid) in self.killed_by:
            pytest.skip("its claim is already killed by another test")

    def pytest_runtest_logreport(self, report):
        claim = self.claims.get(report.nodeid, "(no claim)")
        if report.when == "call" or (report.when == "setup" and report.failed):
            self.tests_run += 1
        if report.failed:
            self.killed_by.setdefault(claim, []).append(report.nodeid)
            crash = getattr(report.longrepr, "reprcrash", None)
            message = crash.message if crash is not None else str(report.longrepr)
            self.messages[report.nodeid] = (message.strip().splitlines() or ["failed"])[0][:300]
        elif report.when == "call" and (report.passed or hasattr(report, "wasxfail")):
            self.passed.add(claim)

    def result(self, exit_code: int) -> dict:
        if exit_code not in (0, 1):
            return {
                "status": MutantStatus.ERROR,
                "reason": f"pytest exit code {exit_code} under the mutant",
                "tests_run": self.tests_run,
            }
        return {
            "status": MutantStatus.KILLED if self.killed_by else MutantStatus.SURVIVED,
            "killed_by": {claim: sorted(ids) for claim, ids in sorted(self.killed_by.items())},
            "messages": self.messages,
            "claims_passed": sorted(self.passed - set(self.killed_by)),
            "tests_run": self.tests_run,
        }


def run_in_this_process(relative_path: str, code, *rounds: list[str]) -> dict:
    """Load the mutant here and run the tests (only ever in a throwaway process): each round (a
    selection of tests) in turn until one kills it. A round of a few likely killers before the
    whole selection saves collecting the whole selection when one of them kills."""
    from gdn_review.harness import mutation

    mutation.single_threaded()
    try:
        mutation.load_mutated(relative_path, code)
    except Exception as error:  # the mutated module does not even load
        why = f"{type(error).__name__}: {error}"[:300]
        if not mutation.loads_unmutated(relative_path):
            # Not the mutant's doing: the file cannot be swapped in memory at all.
            return {
                "status": MutantStatus.ERROR,
                "reason": f"{relative_path} does not load in place unmutated either ({why})",
                "tests_run": 0,
            }
        return _killed("(import)", "(module import)", why)
    tests_run = 0
    for tests in rounds:
        collector = KillCollector(tests)
        exit_code = suite.run_pytest(
            suite.pytest_args(tests, None, extra=suite.MUTANT_OPTIONS),
            here=True,
            plugins=(collector, *suite.installed_plugins()),
        )
        result = collector.result(exit_code)
        tests_run = result["tests_run"] = tests_run + result["tests_run"]
        if result["status"] != MutantStatus.SURVIVED:
            break
    return result


def _killed(claim: str, test: str, message: str | None = None) -> dict:
    """A kill that no test reported: the mutated module did not import, or the child crashed."""
    return {
        "status": MutantStatus.KILLED,
        "killed_by": {claim: [test]},
        "messages": {test: message} if message else {},
        "claims_passed": [],
        "tests_run": 0,
    }


class Progress:
    """How a run of mutants is shown (``cli.progress.MutationProgress``): ``start`` with how many
    will run, ``advance`` with each one's entry as it ends. This one shows it nowhere."""

    def start(self, total: int) -> None: ...

    def advance(self, entry: dict) -> None: ...


Tests = list[str] | Callable[[object], list[list[str]]]


def run_mutants(
    mutants: list,
    relative_path: str,
    tests: Tests,
    jobs: int,
    timeout: float,
    on_result: Callable[[object, dict | None], None],
) -> None:
    """Each mutant's outcome, to ``on_result(mutant, result)`` as it comes: the one flow of
    ``mutate``, ``mutate --whole-file`` and ``review``.

    ``result`` is None for a mutant decided before anything runs (its ``status`` set:
    equivalent, not applicable, unreachable here, not reached); an ``error`` for one that does
    not compile; else how its forked child ended (``run_forked``: killed, survived, timeout).
    ``outcome`` reads a status and a reason from either.
    """
    from gdn_review.harness import mutation as loader

    ready = []
    for mutant in mutants:
        if getattr(mutant, "status", None) is not None:
            on_result(mutant, None)
            continue
        try:
            mutant.code = loader.compile_source(relative_path, mutant.source)
        except SyntaxError as error:
            reason = f"does not compile: line {error.lineno}: {error.msg}"
            on_result(mutant, {"status": MutantStatus.ERROR, "reason": reason})
            continue
        ready.append(mutant)
    run_forked(ready, relative_path, tests, jobs, timeout, on_result)


def outcome(mutant, result: dict | None) -> tuple[str, str]:
    """(status, reason) of a mutant: decided before it ran, or how it ran; a kill's reason is its
    first failing test with that test's message."""
    result = result or {}
    status = mutant.status or result.get("status", MutantStatus.ERROR)
    reason = mutant.reason or result.get("reason") or ""
    killed_by = result.get("killed_by", {})
    if status == MutantStatus.KILLED and not reason:
        first = next(iter(killed_by.values()))[0]
        reason = f"{first}: {result.get('messages', {}).get(first, 'failed')}"
    return status, reason


def run_forked(
    mutants: list,
    relative_path: str,
    tests: Tests,
    jobs: int,
    timeout: float,
    on_result: Callable[[object, dict], None],
) -> None:
    """Run each mutant (with a compiled ``code``) in its own forked child (``common.forked``),
    ``jobs`` at a time.

    ``tests``: ``suite.test_args`` (and options that narrow them), or a function of the mutant
    giving its rounds (``run_in_this_process``: the whole-file score runs each mutant under its
    own selection of tests, the latest killers alone first). A child
    that dies without a result (the interpreter crashed under the mutant) killed it: the crash
    is a detected failure.
    """

    def body(mutant) -> Callable[[], dict]:
        def run_mutant() -> dict:
            interrupts.hold("mutant")  # the test hook: a mutant's child is running
            rounds = tests(mutant) if callable(tests) else [tests]
            return run_in_this_process(relative_path, mutant.code, *rounds)

        return run_mutant

    def finished(mutant, result: dict) -> None:
        if result["status"] == forked.CRASHED:
            result = {
                **_killed("(crash)", f"({result['reason']})"),
                "duration_s": result["duration_s"],
            }
        on_result(mutant, result)

    from gdn_review.harness import mutation as loader

    suite.installed_plugins()  # found here, once: every child inherits them
    loader.registries()  # and the loaded modules' op registries
    forked.run([(mutant, body(mutant)) for mutant in mutants], jobs, timeout, finished)


FRESH = """
import json, sys
from gdn_review.mutation import runner
runner.prepare_cpu()
path, source_file, out = sys.argv[1], sys.argv[2], sys.argv[3]
tests = json.loads(sys.argv[4])
from gdn_review.harness import mutation
source = open(source_file, encoding="utf-8").read()
result = runner.run_in_this_process(path, mutation.compile_source(path, source), tests)
with open(out, "w", encoding="utf-8") as handle:
    handle.write(json.dumps(result))
from gdn_review.common.fast_exit import exit_now
exit_now(0)
"""


def run_fresh_process(
    relative_path: str, source: str, tests: list[str], cwd: Path, timeout: float = 600
) -> dict:
    """The same mutant in a fresh interpreter (imports vLLM anew): for parity checks and
    benchmarks."""
    with tempfile.TemporaryDirectory(prefix="gdn-review-mutant-") as scratch:
        source_file, out = Path(scratch) / "mutated.py.txt", Path(scratch) / "result.json"
        source_file.write_text(source, encoding="utf-8")
        started = time.monotonic()
        done = interrupts.run_child(
            [
                sys.executable,
                "-c",
                FRESH,
                relative_path,
                str(source_file),
                str(out),
                json.dumps(tests),
            ],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        seconds = round(time.monotonic() - started, 2)
        if not out.exists():
            return {
                "status": MutantStatus.ERROR,
                "reason": f"fresh process exit {done.returncode}: {done.stderr[-500:]}",
                "duration_s": seconds,
            }
        return {**json.loads(out.read_text(encoding="utf-8")), "duration_s": seconds}
