"""``--fail-on``: the one vocabulary of what makes a command exit 1, and the one ``tripped``.

Each stage lists what its result holds as plain ``(condition, what)`` pairs
(``report.verdicts.findings``, ``matrix.matrix_report.findings``, ``review.render.findings``);
``tripped`` keeps those the chosen conditions name. A word means the same in every command that
accepts it, as ``CONDITIONS`` says (``--help`` shows it).
"""

from __future__ import annotations

CONDITIONS = {
    "fails": "a claim fails; matrix: on the newest release",
    "unverified": "a claim that could not be checked, or one not tied to the change: it holds, "
    "but no case executes the PR's own lines",
    "uncovered": "a risk no claim and case address",
    "survived": "a mutant no test kills: it survived, or it was not reached, as no test "
    "executes its lines",
    "pending": "an open PR's claim that waits for its change",
    "drift": "a case's field that moved between releases or with the change, or a metadata "
    "field that came or went, with no recorded change behind it",
    "breaks": "a claim that held and no longer does with the change, or the PR's own claim "
    "that fails with its diff",
}
NONE = "none"  # the option's value for "nothing fails the run"
SURVIVED = frozenset({"survived", "not reached"})  # the mutant statuses "survived" names

# What each command's result can trip, in the order --help lists them.
REPORT = ("fails", "unverified", "uncovered", "survived", "pending")  # run, report, mutate
MATRIX = ("fails", "unverified", "uncovered", "drift")  # matrix (records and the history page)
HISTORY = ("drift",)  # the history page alone
REVIEW = ("breaks", "drift", "survived")  # review, review-merge


def tripped(findings: list[tuple[str, str]], chosen: set[str]) -> list[str]:
    """The findings (a stage's ``(condition, what)`` pairs) that the chosen conditions name, a
    line each: ``condition: what``."""
    unknown = {condition for condition, _ in findings} - CONDITIONS.keys()
    if unknown:
        raise ValueError(f"internal error: finding of no --fail-on condition: {sorted(unknown)}")
    return [f"{condition}: {what}" for condition, what in findings if condition in chosen]


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
