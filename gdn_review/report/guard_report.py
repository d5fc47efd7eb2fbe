"""``reports/guard.md``: the whole-file score, drawn from the guard JSON
(``mutation.guard.score_whole_file``)."""

from __future__ import annotations

import collections

from gdn_review.report.markdown import code, fence, text

ORDER = ("survived", "not reached", "unreachable here", "timeout", "error", "equivalent", "killed")


def markdown(data: dict) -> str:
    score = data["score"]
    counts = score["counts"]
    lines = [
        f"# What the KB guards in {code(data['target'])} on vLLM {text(data['release'])}",
        "",
        "Every broad automatic mutant of the file's builder methods and module-level functions "
        "(`gdn-review mutate --whole-file`), run against the generated suite of "
        f"{len(data['records'])} "
        f"record(s): {', '.join(text(r) for r in data['records'])}.",
        "",
    ]
    percent = "n/a" if score["percent"] is None else f"{score['percent']}%"
    lines += [
        f"**Score: {percent}** ({score['detected']} of {score['scored']} non-equivalent "
        "mutants that CPU can reach "
        "were detected: killed, or timed out).",
        "",
        "| status | mutants |",
        "|---|---|",
        *(f"| {status} | {counts[status]} |" for status in ORDER if counts.get(status)),
        "",
        f"Measured {text(data['finished_at'])} in {data['duration_s']} s "
        f"({data['settings']['jobs']} jobs, baseline {data['settings']['baseline_s']} s).",
        "",
    ]
    for note in data.get("notes", []):
        lines.append(f"- note: {text(note)}")
    if data.get("notes"):
        lines.append("")
    by_status = collections.defaultdict(list)
    for entry in data["mutants"]:
        by_status[entry["status"]].append(entry)
    lines += _section(
        "Survivors",
        "Its edit ran and no test failed: a missing check.",
        by_status["survived"] + by_status["error"],
        diffs=True,
    )
    lines += _section(
        "Not reached",
        "No test executes the edited line, though CPU can: a missing case.",
        by_status["not reached"],
    )
    lines += _section(
        "Unreachable here",
        "Only CUDA or another backend runs these lines; not covered, "
        "only out of this machine's reach.",
        by_status["unreachable here"],
    )
    lines += _section(
        "Equivalent",
        "Cannot change behaviour (kb/guard/notes.yaml says why).",
        by_status["equivalent"],
    )
    lines += [
        "## Line map",
        "",
        "Which records' tests execute each line of the scope (construction lines are credited to "
        "the first record that built that builder in the run), and under which configurations "
        "of the builder: "
        "CPU default (as this machine resolves it), or configured as a GPU server configures it "
        "(the prefill "
        "backend vLLM resolves there, align prefix caching, the V2 runner's aligned indices, "
        "a FULL graph mode, "
        "a host function called on its own); no kernel runs under any of them.",
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
            f"{code(row['code']) if row['code'] else ''} | {reached} | "
            f"{under} |"
        )
    return "\n".join(lines) + "\n"


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
