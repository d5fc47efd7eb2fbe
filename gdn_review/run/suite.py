"""The generated suite under pytest (a fresh process), so the plugin writes evidence: `gdn-review
run`."""

from __future__ import annotations

import sys
from pathlib import Path

from gdn_review.common import fast_exit, interrupts
from gdn_review.run import evidence_file

# pytest's exit codes that still mean "tests ran and the evidence is worth reporting".
RAN_EXIT_CODES = {0, 1}
NO_TESTS = 5


def pytest_argv(
    modules: list[Path], evidence: Path, keyword: str | None, extra: tuple[str, ...]
) -> list[str]:
    command = [
        sys.executable,
        "-c",
        fast_exit.PYTEST,
        *map(str, modules),
        "--gdn-evidence",
        str(evidence),
        "-p",
        "no:cacheprovider",
    ]
    if keyword:
        command += ["-k", keyword]
    return command + list(extra)


def run_pytest(command: list[str]) -> int:
    """Run pytest with its output streaming to this terminal (that is the progress)."""
    return interrupts.run_child(command).returncode


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
    command = pytest_argv(modules, evidence_path, keyword, extra)
    say(
        f"[1/2] running {len(modules)} generated module(s) on the "
        f"installed vLLM: pytest {' '.join(command[3:])}"
    )
    code = run_pytest(command)
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
