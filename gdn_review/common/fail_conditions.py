"""``--fail-on``: one vocabulary of what makes a command exit 1, and reading the option against it.

Each stage says which of these conditions its result can trip (its ``FAIL_ON``) and computes in one
function what in its result trips the chosen ones (``report.verdicts.tripped``,
``matrix.matrix_report.tripped``, ``review.render.tripped``): a line per finding. The command line
only reads the option against the stage's list, prints the lines and picks the exit code.
"""

from __future__ import annotations

CONDITIONS = {
    "fails": "a claim fails",
    "unverified": "a claim that could not be checked",
    "uncovered": "a risk no test addresses",
    "survived": "a mutant that survived the tests",
    "pending": "an open PR's claim that waits for its change",
    "drift": "a metadata field that moved with no recorded change behind it",
    "breaks": "a claim that held and no longer does with the change",
}
NONE = "none"  # the option's value for "nothing fails the run"

# What each stage's result can trip (its FAIL_ON), in the order --help lists them.
REPORT = ("fails", "unverified", "uncovered", "survived", "pending")  # run, report, mutate
MATRIX = (
    "fails",
    "unverified",
    "uncovered",
    "drift",
)  # matrix (drift of records and of the history page)
HISTORY = ("drift",)  # the history page alone
REVIEW = ("breaks", "drift", "survived")  # review, review-merge


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
    """The option's help: every condition a stage can trip, in words."""
    words = "; ".join(f"{name} ({CONDITIONS[name]})" for name in allowed)
    return f"Comma list of what makes the exit code 1: {words}; or {NONE}."
