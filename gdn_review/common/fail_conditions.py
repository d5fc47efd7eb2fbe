"""``--fail-on``: the one vocabulary of what makes a command exit 1, and the one ``tripped``.

Each stage lists what its result holds as plain ``(condition, what)`` pairs
(``report.verdicts.findings``, ``matrix.matrix_report.findings``, ``review.render.findings``);
``tripped`` keeps those the chosen conditions name. A word means the same in every command that
accepts it, as ``CONDITIONS`` says (``--help`` shows it).
"""

from __future__ import annotations

from gdn_review.common.vocabulary import ERROR, MutantStatus, Verdict

FAILS, UNVERIFIED, PENDING = Verdict.FAILS, Verdict.UNVERIFIED, Verdict.PENDING
SURVIVED = MutantStatus.SURVIVED
CONDITIONS = {
    FAILS: "a claim fails; matrix: on the newest release",
    UNVERIFIED: "a claim that could not be checked, or one not tied to the change: it holds, "
    "but no case executes the PR's own lines",
    "uncovered": "a risk no claim and case address",
    SURVIVED: "a mutant no test kills: it survived, or it was not reached, as no test "
    "executes its lines",
    PENDING: "an open PR's claim that waits for its change",
    "drift": "a case's field that moved between releases or with the change, or a metadata "
    "field that came or went, with no recorded change behind it",
    "breaks": "a claim that held and no longer does with the change, or the PR's own claim "
    "that fails with its diff",
    "unexplained": "a hunk of a release step's diff of the builder's files that no "
    "kb/history/changes.yaml entry names (hunks:)",
    ERROR: "a check that could not run (set-up raised before the builder under test was "
    "entered: platform, VllmConfig, imports) or raised an error in gdn-review's own code; "
    "exit code 3, not 1",
}
NONE = "none"  # the option's value for "nothing fails the run"
# ``survived`` names the survivors (vocabulary.SURVIVORS); ``error`` (ERROR), what measured
# nothing: its findings are no verdict (exit code 3: ``exit_code``).

# What each command's result can trip, in the order --help lists them.
REPORT = (FAILS, UNVERIFIED, "uncovered", SURVIVED, PENDING, ERROR)  # run, report, mutate
MATRIX = (FAILS, UNVERIFIED, "uncovered", "drift", ERROR)  # matrix, its history page
HISTORY = ("drift", ERROR)  # the history page alone
REVIEW = ("breaks", "drift", SURVIVED, ERROR)  # review, review-merge
RELEASE_STEP = (FAILS, "breaks", "drift", "unexplained", SURVIVED, ERROR)  # release-step


def tripped(findings: list[tuple[str, str]], chosen: set[str]) -> list[str]:
    """The findings (a stage's ``(condition, what)`` pairs) that the chosen conditions name, a
    line each: ``condition: what``."""
    unknown = {condition for condition, _ in findings} - CONDITIONS.keys()
    if unknown:
        raise ValueError(f"internal error: finding of no --fail-on condition: {sorted(unknown)}")
    return [f"{condition}: {what}" for condition, what in findings if condition in chosen]


def exit_code(tripped_lines: list[str]) -> int:
    """0 where nothing tripped; 1 where a claim broke (or anything but ``error``); 3 where only
    checks that could not run or raised in our own code tripped: no verdict, fix the set-up or
    gdn-review, not vLLM."""
    if not tripped_lines:
        return 0
    if all(line.startswith(f"{ERROR}: ") for line in tripped_lines):
        return 3
    return 1


def parse(value: str, allowed: tuple[str, ...]) -> set[str]:
    """The conditions a comma list names ("" or "none": none); ValueError names any not in
    ``allowed``."""
    chosen = {item.strip() for item in value.split(",") if item.strip()} - {NONE}
    unknown = chosen - set(allowed)
    if unknown:
        raise ValueError(
            f"unknown {', '.join(sorted(unknown))}; choose from {', '.join(allowed)} (or {NONE})"
        )
    return chosen


def help_text(allowed: tuple[str, ...]) -> str:
    """The option's help: every condition a command accepts, with what it means."""
    words = "; ".join(f"{name} ({CONDITIONS[name]})" for name in allowed)
    return f"Comma list of what makes the exit code 1: {words}; or {NONE}."
