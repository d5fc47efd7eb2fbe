"""A review's data as markdown for a PR comment, the verdict that picks the exit code, and merging
shards.

The markdown holds only what the change did (no timings, no shard numbers),
so shards merged give the same text as one run. It is posted as a PR comment:
every string in it that a diff, a PR or a record carries goes through
``gdn_review.report.markdown`` (file names and symbols as code, titles as text, diffs
in fences nothing can close).
"""

from __future__ import annotations

from gdn_review.common import fail_conditions
from gdn_review.kb.subjects import is_record_key, key_label, key_order
from gdn_review.report import failing_batch
from gdn_review.report.markdown import cell, code, fence, text
from gdn_review.review import compare

FAIL_ON = fail_conditions.REVIEW  # what a review can trip
SHOWN_CHANGES = 6  # before → after values per moved case in the markdown; the JSON has all


def _name(key) -> str:
    """A record's key as shown: ``#52078``, or a contract's id (checked: it came through a worker's
    JSON)."""
    if not is_record_key(key):
        raise ValueError(f"not a record key: {key!r}")
    return f"#{key}" if isinstance(key, int) else key_label(key)


def findings(data: dict) -> dict[str, list[str]]:
    """What the review found, by the --fail-on name that makes it an exit 1."""
    found: dict[str, list[str]] = {"breaks": [], "drift": [], "survived": []}
    for record in data["records"]:
        for claim in record["claims"]:
            if claim["broke"]:
                found["breaks"].append(
                    f"{_name(record['number'])} {claim['id']}: {claim['before']} → {claim['after']}"
                )
        for row in record["unexplained"]:
            found["drift"].append(
                f"{_name(record['number'])} {row['case']}: {', '.join(row['fields'])}"
            )
    found["survived"] = [m["id"] for m in data["mutants"] if m["status"] == "survived"]
    return found


def tripped(data: dict, chosen: set[str]) -> list[str]:
    """What the review found that trips the chosen --fail-on conditions, a line each (``kind:
    finding``)."""
    found = findings(data)
    return [f"{kind}: {item}" for kind in sorted(chosen) for item in found.get(kind, [])]


def headline(data: dict) -> str:
    if not data["records"] and not data["impact"]:
        return "No recorded claim affected: the change touches no file a record targets."
    found = findings(data)
    parts = []
    parts.append(
        f"**{len(found['breaks'])} claim(s) break**"
        if found["breaks"]
        else "no recorded claim breaks"
    )
    moved = sum(len(r["moved"]) for r in data["records"])
    if found["drift"]:
        parts.append(f"**{len(found['drift'])} case(s) move that no record explains**")
    elif moved:
        parts.append(f"{moved} case(s) move, each explained by a record")
    else:
        parts.append("no field of any recorded case moves")
    if not data.get("carried"):
        parts.append("**no recorded PR explains the change**")
    ran = [m for m in data["mutants"] if m["status"] in ("killed", "survived", "timeout")]
    if data["mutants"]:
        killed = sum(m["status"] in ("killed", "timeout") for m in ran)
        parts.append(f"{killed} of {len(ran)} mutants of the new lines killed")
    return "; ".join(parts) + "."


def own_claims(data: dict) -> dict | None:
    """The reviewed PR's own claims with its diff: how many hold, are pending and fail (None: no
    record of the PR ran)."""
    record = next((r for r in data["records"] if r.get("own")), None)
    if record is None:
        return None
    counts = {"hold": [], "pending": [], "fail": []}
    for claim in record["claims"]:
        after = claim["after"]
        key = "hold" if after in compare.HOLDING else "fail" if after == "fails" else "pending"
        counts[key].append(claim["id"])
    return {"number": record["number"], **counts}


def own_claims_line(data: dict) -> str | None:
    """``The PR's own claims (#N, with its diff): k hold, m pending, n fail.``"""
    own = own_claims(data)
    if own is None:
        return None
    line = (
        f"**The PR's own claims** ({_name(own['number'])}, "
        f"with its diff onto {text(data['onto'])}): "
        f"{len(own['hold'])} hold, {len(own['pending'])} pending, {len(own['fail'])} fail"
    )
    if own["fail"]:
        line += f" ({', '.join(text(c) for c in own['fail'])})"
    return line + "."


def markdown(data: dict) -> str:
    lines = [f"## gdn-review: {code(data['name'])} onto {text(data['source'])}", ""]
    own = own_claims_line(data)
    if own:
        lines += [own, ""]
    lines += [headline(data), ""]
    lines += (
        ["| file | |", "|---|---|"]
        + [f"| {code(f['path'])} | {text(f['status'])} |" for f in data["files"]]
        + [""]
    )
    for item in data["impact"]:
        lines.append(
            f"**Record {_name(item['number'])}** ({code(item['record'])}, "
            f"{code(item['target'])}): the hunks change "
            f"{', '.join(code(s) for s in item['symbols']) or 'nothing'}"
            + (
                f"; the target reaches {', '.join(code(s) for s in item['reaches_target'])}"
                if item["reaches_target"]
                else "; the target reaches none of them"
            )
            + (
                f"; they land on the mutant sites of {', '.join(text(r) for r in item['risks'])}"
                if item["risks"]
                else ""
            )
            + "."
        )
    if data["impact"]:
        carried = data.get("carried", [])
        if carried:
            lines.append("")
            lines.append(
                f"Recorded PRs that first shipped after {text(data['onto'])}, by "
                f"{text(data['lands_in'])}: "
                + ", ".join(
                    f"{_name(c['number'])} {text(c['title'])} "
                    f"({text(c['release'])}{', record' if c['record'] else ', named by a record'})"
                    for c in carried
                )
                + "."
            )
        else:
            lines.append("")
            lines.append(
                f"**Unexplained change**: no recorded PR first shipped after "
                f"{text(data['onto'])}, by {text(data['lands_in'])}; "
                "no record says what this change is for."
            )
        lines.append("")
    for record in data["records"]:
        lines += _record_section(record, data)
    if data["mutants"] or data["mutants_left_out"]:
        lines += _mutant_section(data)
    return "\n".join(lines).rstrip("\n") + "\n"


def _record_section(record: dict, data: dict) -> list[str]:
    lines = [f"### {_name(record['number'])} {text(record['title'])}", ""]
    failed = {k: v for k, v in record["sides"].items() if v != "ran"}
    for side, why in failed.items():
        lines.append(f"- **{text(side)} side did not finish**: {text(why)}")
    if record["carries_pr"]:
        lines.append(
            f"- This change carries the record's own PR: {_name(record['number'])} "
            f"first shipped after {text(data['onto'])}, "
            f"by {text(data['lands_in'])}; its claims below are read against the record's `before`."
        )
    if record.get("own"):
        lines.append(
            "- This diff is the record's own PR: its stated changes "
            "(`target.changes`, its cases' `expect`) explain what moves, "
            "and its claims are read with the change in (pending on the release as it is)."
        )
    changed = [c for c in record["claims"] if c["changed"]]
    if changed:
        lines += [
            "",
            "| claim | expected | before | after | measured before | measured after |",
            "|---|---|---|---|---|---|",
        ]
        for claim in changed:
            after = f"**{text(claim['after'])}**" if claim["broke"] else text(claim["after"])
            lines.append(
                f"| {text(claim['id'])} | "
                f"{cell(claim['expected'] or claim['check'])} | "
                f"{text(claim['before'])} | {after} | "
                f"{cell(claim['measured_before'] or '—')} | "
                f"{cell(claim['measured_after'] or '—')} |"
            )
        lines.append("")
    for claim in record["claims"]:
        failing = claim.get("failing_after") or []
        if not failing:
            continue
        lines.append(
            f"- {text(claim['id'])} fails with the change on: "
            + "; ".join(
                f"{code(f['case'])} ({text(f['device'])}): {cell(f['reason'][:200])}"
                for f in failing[:SHOWN_CHANGES]
            )
            + (
                f"; … {len(failing) - SHOWN_CHANGES} more (in the JSON)"
                if len(failing) > SHOWN_CHANGES
                else ""
            )
            + "."
        )
        batches = failing_batch.markdown_section([f.get("failing_batch") for f in failing])
        if batches:
            lines += ["", *batches, ""]
        for f in failing:
            if f.get("smallest") and not f.get("failing_batch"):
                lines += [
                    "",
                    f"Smallest failing batch Hypothesis found for {code(f['case'])} "
                    "(copy it into a case):",
                    "",
                ]
                lines += fence(f["smallest"], "python") + [""]
    if any(c.get("failing_after") for c in record["claims"]):
        lines.append("")
    unchanged = len(record["claims"]) - len(changed)
    lines.append(
        f"- {unchanged} claim(s) unchanged"
        + (" (verdict and measurement)" if unchanged else "")
        + "."
    )
    if record["moved"]:
        lines += ["", "| case | fields | before → after | explained by |", "|---|---|---|---|"]
        for row in record["moved"]:
            explained = (
                ", ".join(
                    f"{_name(e['number'])} ({text(e['relation'])})" for e in row["explained_by"]
                )
                or "**unexplained**"
            )
            shown = [cell(c) for c in row["changes"][:SHOWN_CHANGES]] + (
                [f"… {len(row['changes']) - SHOWN_CHANGES} more (in the JSON)"]
                if len(row["changes"]) > SHOWN_CHANGES
                else []
            )
            lines.append(
                f"| {text(row['case'])} | "
                f"{', '.join(text(f) for f in row['fields'])} | "
                f"{'<br>'.join(shown)} | {explained} |"
            )
        lines.append("")
    else:
        lines.append("- No field of any case moved.")
    for schema in record["fields_added_or_removed"]:
        lines.append(
            "- Fields added: "
            f"{', '.join(text(f) for f in schema['added']) or 'none'}; "
            "removed: "
            f"{', '.join(text(f) for f in schema['removed']) or 'none'}."
        )
    for kind in ("appeared", "vanished"):
        found = record[f"deviations_{kind}"]
        if found:
            lines.append(f"- Known deviations that {kind}: {', '.join(code(n) for n in found)}.")
    return lines + [""]


def _mutant_section(data: dict) -> list[str]:
    ran = [m for m in data["mutants"] if m["status"] in ("killed", "survived", "timeout")]
    killed = [m for m in ran if m["status"] in ("killed", "timeout")]
    lines = [
        "### The change's own lines",
        "",
        f"{len(killed)} of {len(ran)} mutants of the new lines killed by the KB's tests.",
    ]
    other = [m for m in data["mutants"] if m not in ran]
    for mutant in other:
        lines.append(
            f"- {code(mutant['id'])}: {text(mutant['status'])}"
            + (f" ({cell(mutant['reason'])})" if mutant.get("reason") else "")
        )
    if data["mutants_left_out"]:
        lines.append(f"- {data['mutants_left_out']} more mutant(s) not run (over --max-mutants).")
    survivors = [m for m in ran if m["status"] == "survived"]
    if survivors:
        lines += ["", "Lines no recorded claim protects (each survivor's edit):", ""]
        for mutant in survivors:
            lines += (
                [f"{code(mutant['id'])} (line {int(mutant['line'])}):", ""]
                + fence(mutant["diff"], "diff")
                + [""]
            )
    return lines + [""]


def merge(shards: list[dict]) -> dict:
    """One review from its shards: the records of all of them; a mutant killed if any shard's tests
    killed it."""
    if not shards:
        raise ValueError("no shard to merge")
    first = shards[0]
    for other in shards[1:]:
        for key in ("diff_sha256", "onto", "lands_in"):
            if other[key] != first[key]:
                raise ValueError(
                    f"the shards do not review the same change: {key} {first[key]!r} "
                    f"and {other[key]!r}"
                )
    merged = {**first, "shard": None, "run": {"merged_shards": len(shards)}}
    merged["records"] = sorted(
        (r for s in shards for r in s["records"]), key=lambda r: key_order(r["number"])
    )
    mutants: dict[str, dict] = {}
    for shard in shards:
        for mutant in shard["mutants"]:
            seen = mutants.setdefault(mutant["id"], dict(mutant))
            seen["status"] = compare.merged_status([seen["status"], mutant["status"]])
            seen["killed_by"] = {**mutant.get("killed_by", {}), **seen.get("killed_by", {})}
    order = {m["id"]: i for s in shards for i, m in enumerate(s["mutants"])}
    merged["mutants"] = sorted(mutants.values(), key=lambda m: order[m["id"]])
    return merged
