"""The generated suite under pytest with the evidence plugin: the one place its arguments are made
and it is started, in a fresh process (``gdn-review run``, ``matrix``) or in this one (``mutate``'s
baseline, a mutant's child, a review's side); ``run_suite`` is ``gdn-review run``'s first stage."""

from __future__ import annotations

import functools
import importlib.metadata
import sys
from pathlib import Path

from gdn_review.common import fast_exit, interrupts
from gdn_review.run import evidence_file

# pytest's exit codes that still mean "tests ran and the evidence is worth reporting".
RAN_EXIT_CODES = {0, 1}
NO_TESTS = 5
# Plugins every run goes without: pytest's cache (nothing is written into the tree) and
# pytest-randomly (the records fix the tests' order and seeds: every run is the same run), and
# pytest's log capture: pytest 9 walks every logger at each test phase, and with vLLM's and
# transformers' thousands of loggers that was a fifth of the generated suite's time (no check
# reads captured logs; vLLM's own handler still prints into the captured output).
PLUGINS_OFF = ("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:logging")
# A mutant's child runs a few tests under a pytest of its own, hundreds of times a score: it
# takes the installed plugins from ``installed_plugins`` (found once, in the parent) rather than
# scanning every installed package twice per start (an eighth of a mutant's time, py-spy), and
# reports only each failure's message line (the tracebacks' source and arguments were another
# eighth; a kill reads the message alone, the same in every style).
# It also goes without the built-in plugins that no generated test uses and that cannot change a
# test's outcome (doctests, unittest classes, subtests, tmpdir, pdb, faulthandler, setup plans,
# stepwise, pastebin), and without the unraisable- and thread-exception hooks, whose
# ``gc.collect`` at each session's end took a tenth of a child's time (cProfile, 513 children): an
# exception no test sees can only leave a mutant alive, never kill one. pytest parses every
# registered plugin for fixtures at each start, so each one left out is time saved per child.
MUTANT_PLUGINS_OFF = tuple(
    option
    for name in (
        "doctest",
        "unittest",
        "subtests",
        "legacypath",
        "debugging",
        "faulthandler",
        "setuponly",
        "setupplan",
        "stepwise",
        "pastebin",
        "unraisableexception",
        "threadexception",
    )
    for option in ("-p", f"no:{name}")
)
MUTANT_OPTIONS = ("--disable-plugin-autoload", "--tb=line", *MUTANT_PLUGINS_OFF)
# Installed plugins a mutant's child goes without: they act only under options it never gives
# (xdist's -n) or on tests it never runs (anyio's async tests).
MUTANT_PLUGIN_ENTRIES_OFF = {"xdist", "xdist.looponfail", "anyio"}


@functools.cache
def installed_plugins() -> tuple:
    """The pytest plugins installed packages declare (``pytest11``) that a mutant's child needs:
    those a run loads by itself, less those every run goes without (``PLUGINS_OFF``) and
    ``MUTANT_PLUGIN_ENTRIES_OFF``; for ``MUTANT_OPTIONS``' runs."""
    off = {arg.removeprefix("no:") for arg in PLUGINS_OFF if arg.startswith("no:")}
    off |= MUTANT_PLUGIN_ENTRIES_OFF
    found = {}
    for entry in importlib.metadata.entry_points(group="pytest11"):
        if entry.name not in off and entry.name not in found:
            found[entry.name] = entry.load()
    return tuple(found.values())


def test_args(tests: list, keyword: str | None = None) -> list[str]:
    """The tests a run selects: paths or node ids, narrowed by pytest's ``-k keyword``."""
    return [*map(str, tests), *(["-k", keyword] if keyword else [])]


def pytest_args(
    selected: list[str], evidence: Path | None, extra: tuple = (), quiet: bool = True
) -> list[str]:
    """pytest's arguments for the generated suite: ``selected`` (``test_args``, and options that
    narrow it: ``-x``, ``--deselect``), the evidence plugin's file (None: the plugin writes none),
    then ``extra`` (more options and ``-p`` plugins)."""
    return [
        *map(str, selected),
        *(["-q"] if quiet else []),
        *PLUGINS_OFF,
        *(["--gdn-evidence", str(evidence)] if evidence else ["--gdn-no-evidence"]),
        *extra,
    ]


def run_pytest(
    args: list[str], here: bool = False, plugins: tuple = (), hold: str | None = None, **child
) -> int:
    """pytest over ``args``; its exit code. By default in a fresh process that ends with
    ``fast_exit`` (``child``: ``interrupts.run_child``'s options, e.g. ``env``, ``stdout``; its
    output streams to this terminal unless they redirect it); ``here``: in this process, with
    ``plugins`` (pytest plugin objects).

    ``hold``: the interrupt tests' hold point the process stops at before pytest starts (checked
    before gdn_review is imported: imported first, pytest could not rewrite its plugin's asserts).
    """
    if here:
        import pytest

        return int(pytest.main(list(args), plugins=list(plugins)))
    held = (
        f"import os\nif os.environ.get({interrupts.HOLD!r}) == {hold!r}:\n"
        f"    from gdn_review.common.interrupts import hold; hold({hold!r})\n"
        if hold
        else ""
    )
    command = [sys.executable, "-c", held + fast_exit.PYTEST, *args]
    return interrupts.run_child(command, **child).returncode


class SuiteError(Exception):
    """pytest could not run the suite, or wrote no evidence (bad input or usage: exit 2)."""


def run_suite(
    modules: list[Path], evidence_path: Path, keyword: str | None, extra: tuple[str, ...], say=print
) -> int:
    """``gdn-review run``'s first stage: the generated modules under pytest; pytest's exit code (0,
    1 or 5)."""
    # Evidence left by an earlier run must never be reported as this run's; the
    # parts other commands added (mutants, the diff side) are carried over per release.
    kept = evidence_file.take_parts(Path(evidence_path))
    args = pytest_args(test_args(modules, keyword), evidence_path, extra, quiet=False)
    say(
        f"[1/2] running {len(modules)} generated module(s) on the "
        f"installed vLLM: pytest {' '.join(args)}"
    )
    code = run_pytest(args)
    if code == NO_TESTS:
        say("pytest collected no test (exit 5): nothing was checked")
    elif code not in RAN_EXIT_CODES:
        raise SuiteError(
            f"pytest stopped with exit code {code} (usage or internal error); see its output above"
        )
    if not Path(evidence_path).exists():
        raise SuiteError(f"pytest wrote no evidence at {evidence_path}")
    for line in evidence_file.carry_over(Path(evidence_path), kept):
        say(line)
    return code
