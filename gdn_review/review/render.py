"""A review's data as markdown for a PR comment, what --fail-on can name in it, and merging
shards.

The markdown holds only what the change did (no timings, no shard numbers),
so shards merged give the same text as one run. It is posted as a PR comment:
every string in it that a diff, a PR or a record carries goes through
``gdn_review.report.markdown`` (file names and symbols as code, titles as text, diffs
in fences nothing can close).
"""

from __future__ import annotations

from gdn_review.common.fail_conditions import ERROR
from gdn_review.common.vocabulary import (
    HOLDING,
    KILLS,
    NOT_MEASURED,
    SURVIVORS,
    MutantStatus,
    Verdict,
)
from gdn_review.kb.subjects import is_record_key, key_label, key_order
from gdn_review.report import failing_batch
from gdn_review.report.markdown import cell, code, fence, text
from gdn_review.review import compare

SHOWN_CHANGES = 6  # before → after values per moved case in the markdown; the JSON has all
RAN = SURVIVORS | KILLS  # mutants whose tests ran to an end


def _name(key) -> str:
    """A record's key as shown: ``#52078``, or a contract's id (checked: it came through a worker's
    JSON)."""
    if not is_record_key(key):
        raise ValueError(f"not a record key: {key!r}")
    return f"#{key}" if isinstance(key, int) else key_label(key)


def _key(entry: dict):
    """An entry's record key: ``key``, or ``number`` as older reviews' shards and the matrix's
    drift rows (``explained_by``) name it."""
    return entry["key"] if "key" in entry else entry["number"]


def _explainer(entry: dict) -> str:
    """Who explains a moved case: a record's key, or a kb/history/changes.yaml entry's id (a
    record's ``target.moved``/``contract.moved``)."""
    if entry.get("relation") == "changes.yaml":
        return code(_key(entry))
    return _name(_key(entry))


def unmeasured_verdict(claim: dict) -> str | None:
    """``could not run`` or ``error in the check`` where a claim measured nothing on a side (the
    error first, after before before), else None."""
    verdicts = (claim["after"], claim["before"])
    for outcome in (Verdict.CHECK_ERROR, Verdict.COULD_NOT_RUN):
        if outcome in verdicts:
            return outcome
    return None


def findings(data: dict) -> list[tuple[str, str]]:
    """What the review found that --fail-on can name, a ``(condition, what)`` pair each: a claim
    that could not run or whose check raised, a case that could not be built, a mutant our own
    code raised on, are ``error`` (exit 3 where nothing else tripped), never a break or drift."""
    found = []
    for record in data["records"]:
        who = _name(_key(record))
        for claim in record["claims"]:
            unmeasured = unmeasured_verdict(claim)
            if unmeasured:
                side = "with the change" if claim["after"] == unmeasured else "before the change"
                reason = claim["reason_after"] if claim["after"] == unmeasured else ""
                reason = reason or claim["reason_before"]
                found.append((ERROR, f"{who} {claim['id']} {unmeasured} {side}: {reason}"))
            elif claim["broke"]:
                found.append(
                    ("breaks", f"{who} {claim['id']}: {claim['before']} → {claim['after']}")
                )
        not_built = record.get("not_built") or {}
        if not_built:
            case, why = next(iter(sorted(not_built.items())))
            found.append(
                (
                    ERROR,
                    f"{who}: {len(not_built)} case(s) not built, no drift read from them; "
                    f"first: {case}: {why}",
                )
            )
        for row in record["unexplained"]:
            found.append(("drift", f"{who} {row['case']}: {', '.join(row['fields'])}"))
    for mutant in data["mutants"]:
        if mutant["status"] in SURVIVORS:
            how = "" if mutant["status"] == MutantStatus.SURVIVED else f" ({mutant['status']})"
            found.append((MutantStatus.SURVIVED, f"mutant {mutant['id']}{how}"))
        elif mutant["status"] == MutantStatus.ERROR:
            found.append((ERROR, f"mutant {mutant['id']} {mutant_error_words(mutant)}"))
    return found


def mutant_error_words(mutant: dict) -> str:
    """A mutant our own code raised on, worded as such (neither killed nor survived)."""
    reason = mutant.get("reason") or "no reason given"
    return f"{Verdict.CHECK_ERROR} (gdn-review's fault, neither killed nor survived): {reason}"


def headline(data: dict) -> str:
    if not data["records"] and not data["impact"]:
        return "No recorded claim affected: the change touches no file a record targets."
    found = [condition for condition, _ in findings(data)]
    breaks, drift = found.count("breaks"), found.count("drift")
    parts = [f"**{breaks} claim(s) break**" if breaks else "no recorded claim breaks"]
    claims = [c for r in data["records"] for c in r["claims"]]
    for outcome in NOT_MEASURED:
        count = sum(unmeasured_verdict(c) == outcome for c in claims)
        if count:
            words = outcome if outcome == Verdict.COULD_NOT_RUN else f"had an {outcome}"
            parts.append(f"**{count} claim(s) {words}** (no verdict)")
    not_built = sum(len(r.get("not_built") or {}) for r in data["records"])
    if not_built:
        parts.append(f"**{not_built} case(s) could not be built**: no drift read from them")
    moved = sum(len(r["moved"]) for r in data["records"])
    if drift:
        parts.append(f"**{drift} case(s) move that no record explains**")
    elif moved:
        parts.append(f"{moved} case(s) move, each explained by a record")
    else:
        parts.append("no field of any recorded case moves")
    if not data.get("carried"):
        parts.append("**no recorded PR explains the change**")
    ran = [m for m in data["mutants"] if m["status"] in RAN]
    if data["mutants"]:
        killed = sum(m["status"] in KILLS for m in ran)
        parts.append(f"{killed} of {len(ran)} mutants of the new lines killed")
    return "; ".join(parts) + "."


def own_claims(data: dict) -> dict | None:
    """The reviewed PR's own claims with its diff: how many hold, are pending and fail (None: no
    record of the PR ran)."""
    record = next((r for r in data["records"] if r.get("own")), None)
    if record is None:
        return None
    counts = {v: [] for v in (Verdict.HOLDS, Verdict.PENDING, Verdict.FAILS, *NOT_MEASURED)}
    for claim in record["claims"]:
        after = claim["after"]
        key = after if after in NOT_MEASURED or after == Verdict.FAILS else Verdict.PENDING
        counts[Verdict.HOLDS if after in HOLDING else key].append(claim["id"])
    return {"key": _key(record), **counts}


def own_claims_line(data: dict) -> str | None:
    """``The PR's own claims (#N, with its diff): k hold, m pending, n fail.``"""
    own = own_claims(data)
    if own is None:
        return None
    shown = (Verdict.HOLDS, Verdict.PENDING, Verdict.FAILS)
    counted = ", ".join(f"{len(own[verdict])} {verdict.counted}" for verdict in shown)
    line = (
        f"**The PR's own claims** ({_name(own['key'])}, "
        f"with its diff onto {text(data['onto'])}): {counted}"
    )
    if own[Verdict.FAILS]:
        line += f" ({', '.join(text(c) for c in own[Verdict.FAILS])})"
    for outcome in NOT_MEASURED:
        if own[outcome]:
            line += f", {len(own[outcome])} {outcome} ({', '.join(text(c) for c in own[outcome])})"
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
            f"**Record {_name(_key(item))}** ({code(item['record'])}, "
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
    if data["impact"] and data.get("carried"):
        prs = ", ".join(
            f"{_name(_key(c))} {text(c['title'])} "
            f"({text(c['release'])}{', record' if c['record'] else ', named by a record'})"
            for c in data["carried"]
        )
        lines += ["", f"Recorded PRs that first shipped {_window(data)}: {prs}.", ""]
    elif data["impact"]:
        lines += [
            "",
            f"**Unexplained change**: no recorded PR first shipped {_window(data)}; "
            "no record says what this change is for.",
            "",
        ]
    for record in data["records"]:
        lines += _record_section(record, data)
    if data["mutants"] or data["mutants_left_out"]:
        lines += _mutant_section(data)
    return "\n".join(lines).rstrip("\n") + "\n"


def _record_section(record: dict, data: dict) -> list[str]:
    lines = [f"### {_name(_key(record))} {text(record['title'])}", ""]
    lines += [
        f"- **{text(side)} side did not finish**: {text(why)}"
        for side, why in record["sides"].items()
        if why != "ran"
    ]
    if record["carries_pr"]:
        lines.append(
            f"- This change carries the record's own PR: {_name(_key(record))} first shipped "
            f"{_window(data)}; its claims below are read against the record's `before`."
        )
    if record.get("own"):
        lines.append(
            "- This diff is the record's own PR: its stated changes (`target.changes`, its cases' "
            "`expect`) explain what moves, and its claims are read with the change in (pending "
            "on the release as it is)."
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
                f"| {text(claim['id'])} | {cell(claim['expected'] or claim['check'])} | "
                f"{text(claim['before'])} | {after} | {cell(claim['measured_before'] or '—')} | "
                f"{cell(claim['measured_after'] or '—')} |"
            )
        lines.append("")
    for claim in record["claims"]:
        lines += _failing_lines(claim)
    if any(c.get("failing_after") for c in record["claims"]):
        lines.append("")
    for claim in record["claims"]:
        lines += _unmeasured_lines(claim)
    unchanged = len(record["claims"]) - len(changed)
    detail = " (verdict and measurement)" if unchanged else ""
    lines.append(f"- {unchanged} claim(s) unchanged{detail}.")
    return lines + _moved_lines(record) + [""]


def _failing_lines(claim: dict) -> list[str]:
    """The cases a claim fails on with the change, and the batches they failed on."""
    failing = claim.get("failing_after") or []
    if not failing:
        return []
    shown = [
        f"{code(f['case'])} ({text(f['device'])}): {cell(f['reason'][:200])}"
        for f in failing[:SHOWN_CHANGES]
    ]
    lines = [
        f"- {text(claim['id'])} fails with the change on: {'; '.join(shown + _more(failing))}."
    ]
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
    return lines


def _unmeasured_lines(claim: dict) -> list[str]:
    """A claim that could not run, or whose check raised, on a side: what to fix instead of vLLM
    (the set-up or the release's platform; gdn-review, a bug to report), each message once with
    the cases it stopped."""
    outcome = unmeasured_verdict(claim)
    if outcome is None:
        return []
    after = claim["after"] == outcome
    where = "with the change" if after else "before the change"
    by_reason: dict[str, list[str]] = {}
    for test in (claim.get("unmeasured_after") or []) if after else []:
        by_reason.setdefault(test["reason"], []).append(f"{test['case']} ({test['device']})")
    shown = [
        f"{cell(reason[:300])} (on {', '.join(code(c) for c in cases[:SHOWN_CHANGES])}"
        f"{''.join(' ' + more for more in _more(cases))})"
        for reason, cases in by_reason.items()
    ]
    message = "; ".join(shown) or cell(
        (claim["reason_after"] if after else "") or claim["reason_before"]
    )
    fix = (
        "the set-up or the release's platform raised before the builder under test was "
        "entered: no verdict; fix the environment, not vLLM's code"
        if outcome == Verdict.COULD_NOT_RUN
        else "gdn-review's own code raised while checking: no verdict; a gdn-review bug to "
        "report with this message"
    )
    return [f"- {text(claim['id'])} **{outcome}** {where} ({fix}): {message}."]


def _moved_lines(record: dict) -> list[str]:
    """The cases whose fields moved and who explains them, fields added or removed, cases that
    became applicable or not, known deviations that appeared or vanished."""
    if record["moved"]:
        lines = ["", "| case | fields | before → after | explained by |", "|---|---|---|---|"]
        for row in record["moved"]:
            explained = (
                ", ".join(f"{_explainer(e)} ({text(e['relation'])})" for e in row["explained_by"])
                or "**unexplained**"
            )
            shown = [cell(c) for c in row["changes"][:SHOWN_CHANGES]] + _more(row["changes"])
            lines.append(
                f"| {text(row['case'])} | "
                f"{', '.join(text(f) for f in row['fields'])} | "
                f"{'<br>'.join(shown)} | {explained} |"
            )
        lines.append("")
    else:
        lines = ["- No field of any case moved."]
    not_built = record.get("not_built") or {}
    by_reason: dict[str, list[str]] = {}
    for case, why in sorted(not_built.items()):
        by_reason.setdefault(why, []).append(case)
    for why, cases in by_reason.items():
        shown = [text(c) for c in cases[:SHOWN_CHANGES]] + _more(cases)
        lines.append(
            f"- {len(cases)} case(s) not built (no field value, no drift read from them): "
            f"{cell(why[:400])} (cases: {', '.join(shown)})."
        )
    for schema in record["fields_added_or_removed"]:
        lines.append(
            "- Fields added: "
            f"{', '.join(text(f) for f in schema['added']) or 'none'}; "
            "removed: "
            f"{', '.join(text(f) for f in schema['removed']) or 'none'}."
        )
    for row in record.get("applicability", []):
        lines.append(f"- Case {text(row['case'])} became {row['became']} ({text(row['reason'])}).")
    for kind in ("appeared", "vanished"):
        found = record[f"deviations_{kind}"]
        if found:
            lines.append(f"- Known deviations that {kind}: {', '.join(code(n) for n in found)}.")
    return lines


def _window(data: dict) -> str:
    """``after 0.29.0, by 0.30.0``: the releases between which a PR the change carries shipped."""
    return f"after {text(data['onto'])}, by {text(data['lands_in'])}"


def _more(items: list) -> list[str]:
    """How many of ``items`` the markdown leaves out (past ``SHOWN_CHANGES``), if any."""
    left_out = len(items) - SHOWN_CHANGES
    return [f"… {left_out} more (in the JSON)"] if left_out > 0 else []


def _mutant_section(data: dict) -> list[str]:
    ran = [m for m in data["mutants"] if m["status"] in RAN]
    killed = [m for m in ran if m["status"] in KILLS]
    lines = [
        "### The change's own lines",
        "",
        f"{len(killed)} of {len(ran)} mutants of the new lines killed by the KB's tests.",
    ]
    other = [m for m in data["mutants"] if m not in ran]
    for mutant in other:
        if mutant["status"] == MutantStatus.ERROR:
            lines.append(f"- {code(mutant['id'])}: {cell(mutant_error_words(mutant))}")
            continue
        lines.append(
            f"- {code(mutant['id'])}: {text(mutant['status'])}"
            + (f" ({cell(mutant['reason'])})" if mutant.get("reason") else "")
        )
    if data["mutants_left_out"]:
        lines.append(f"- {data['mutants_left_out']} more mutant(s) not run (over --max-mutants).")
    survivors = [m for m in ran if m["status"] in SURVIVORS]
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
        (r for s in shards for r in s["records"]), key=lambda r: key_order(_key(r))
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
