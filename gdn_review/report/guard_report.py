"""``reports/guard.md``: the whole-file score, drawn from the guard JSON
(``mutation.guard.score_whole_file``)."""

from __future__ import annotations

import collections

from gdn_review.common.vocabulary import MutantStatus as M
from gdn_review.common.vocabulary import Outcome
from gdn_review.report.markdown import code, fence, text

ORDER = (M.SURVIVED, M.NOT_REACHED, M.UNREACHABLE, M.TIMEOUT, M.ERROR, M.EQUIVALENT, M.KILLED)
# How the count table names a status where its key says less (MutantStatus.ERROR: ours).
STATUS_WORDS = {M.ERROR: Outcome.CHECK_ERROR}
# The report's sections of mutants: title -> what a mutant in it means, then the statuses it lists
# (Survivors show each mutant's diff).
SECTIONS = {
    "Survivors": ("Its edit ran and no test failed: a missing check.", M.SURVIVED),
    "Errors in the check": (
        "gdn-review's own code raised while running it (it did not compile, or pytest ended "
        "abnormally under it): neither killed nor survived, not scored; a gdn-review bug to "
        "report with its reason.",
        M.ERROR,
    ),
    "Not reached": (
        "No test executes the edited line, though CPU can: a missing case.",
        M.NOT_REACHED,
    ),
    "Unreachable here": (
        "Only CUDA or another backend runs these lines; not covered, only out of this machine's "
        "reach.",
        M.UNREACHABLE,
    ),
    "Equivalent": ("Cannot change behaviour (kb/guard/notes.yaml says why).", M.EQUIVALENT),
}


def markdown(data: dict) -> str:
    lines = _summary(data)
    by_status = collections.defaultdict(list)
    for entry in data["mutants"]:
        by_status[entry["status"]].append(entry)
    for title, (meaning, *statuses) in SECTIONS.items():
        found = [entry for status in statuses for entry in by_status[status]]
        lines += _section(title, meaning, found, diffs=title == "Survivors")
    lines += [
        "## Line map",
        "",
        "Which records' tests execute each line of the scope (construction lines are credited to "
        "the first record that built that builder in the run), and under which configurations "
        "of the builder: CPU default (as this machine resolves it), or configured as a GPU server "
        "configures it (the prefill backend vLLM resolves there, align prefix caching, the V2 "
        "runner's aligned indices, a FULL graph mode, a host function called on its own); no "
        "kernel runs under any of them.",
        "",
        "| line | function | code | reached by | configurations |",
        "|---|---|---|---|---|",
    ]
    for row in data["lines"]:
        reached = ", ".join(text(r) for r in row["records"]) or (
            "unreachable here: " + text(row["unreachable"])
            if row["unreachable"]
            else "**not reached**"
        )
        under = ", ".join(text(c) for c in row.get("configurations", [])) if row["records"] else ""
        lines.append(
            f"| {row['line']} | {code(row['function'])} | "
            f"{code(row['code']) if row['code'] else ''} | {reached} | {under} |"
        )
    return "\n".join(lines) + "\n"


def _summary(data: dict) -> list[str]:
    """The title, the score and the count per status, when and how it was measured, the notes."""
    score, counts = data["score"], data["score"]["counts"]
    percent = "n/a" if score["percent"] is None else f"{score['percent']}%"
    notes = [f"- note: {text(note)}" for note in data.get("notes", [])]
    return [
        f"# What the KB guards in {code(data['target'])} on vLLM {text(data['release'])}",
        "",
        "Every broad automatic mutant of the file's builder methods and module-level functions "
        "(`gdn-review mutate --whole-file`), run against the generated suite of "
        f"{len(data['records'])} record(s): {', '.join(text(r) for r in data['records'])}.",
        "",
        f"**Score: {percent}** ({score['detected']} of {score['scored']} non-equivalent "
        "mutants that CPU can reach were detected: killed, or timed out).",
        "",
        "| status | mutants |",
        "|---|---|",
        *(
            f"| {STATUS_WORDS.get(status, status)} | {counts[status]} |"
            for status in ORDER
            if counts.get(status)
        ),
        "",
        f"Measured {text(data['finished_at'])} in {data['duration_s']} s "
        f"({data['settings']['jobs']} jobs, baseline {data['settings']['baseline_s']} s).",
        "",
        *notes,
        *([""] if notes else []),
    ]


def _section(title: str, meaning: str, entries: list[dict], diffs: bool = False) -> list[str]:
    lines = [f"## {title} ({len(entries)})", "", meaning, ""]
    if not entries:
        return lines + ["None.", ""]
    for entry in entries:
        lines.append(
            f"- line {entry['line']}, {code(entry['function'])}: "
            f"{code(entry['id'])}: {text(entry['reason'])}"
        )
        if diffs:
            lines += ["", *fence(entry["diff"], "diff"), ""]
    return lines + [""]
