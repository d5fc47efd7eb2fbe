"""The batch an invariant failed on, as a person needs it: rows, configuration, a case to paste.

An invariant's test records each batch it draws (``record_property("batch",
batch)``, before building it); the plugin keeps the last one of a failed test as
``failing_batch`` in the evidence: Hypothesis replays its shrunk example last,
and a named case or a boundary batch is its test's only batch. Every place that
shows a failure (``gdn-review run``'s lines, the report, ``review``'s markdown
and JSON, the matrix) describes it through ``describe`` here, so the rows and the
YAML case read the same everywhere.

The YAML case is a list item for a record's ``cases:``: the batch's keys that
the record schema has (``kb.cases.Case``), ``after`` as the ids it names, a
boundary batch's name as the case's text. It is checked against the schema
here; a batch the schema cannot hold (a batch of padding only) says why.
"""

from __future__ import annotations

import json
import re

import yaml

from gdn_review.common.vocabulary import Outcome
from gdn_review.report.markdown import cell, code, fence, text

ROW_KEYS = ("seq_len", "query_len", "drafted", "accepted", "prefilling", "host_seq_len")
# What the generated modules' CASES add for the harness (kb.models.Record.case_inputs): not
# record fields.
HARNESS_FLAGS = ("layout", "builder_fields", "server_fields", "raises")
# Shown first, in this order, in a case and in the configuration.
LEADING = ("id", "text", "speculative_tokens", "drafts", "rows", "padded_rows", "max_num_seqs")


def _case_fields() -> set[str]:
    from gdn_review.kb.cases import Case

    return {field.alias or name for name, field in Case.model_fields.items()}


def source_of(batch: dict) -> str:
    """Where the batch came from, in words."""
    if isinstance(batch.get("boundary"), str):
        return f"the boundary batch '{batch['boundary']}'"
    if isinstance(batch.get("id"), str):
        return f"the named case {batch['id']}"
    return "the smallest random example Hypothesis found"


def _slug(value: str, limit: int = 80) -> str:
    """An id (``kb.types.Id``: at most 80 characters) from words, cut at a word's end."""
    slug = re.sub(r"[^A-Za-z0-9]+", "_", value).strip("_")
    if len(slug) > limit:
        slug = slug[: limit + 1].rsplit("_", 1)[0] if "_" in slug[:limit] else slug[:limit]
    return slug or "batch"


def _row(row: dict) -> dict:
    """A row's stated fields in the schema's order (a null is the default: left out)."""
    ordered = {key: row[key] for key in ROW_KEYS if row.get(key) is not None}
    ordered.update({k: v for k, v in row.items() if k not in ordered and v is not None})
    return ordered


def _ids(batches) -> list | None:
    """``after``'s batches (the harness takes them whole) as the case ids a record names."""
    if not isinstance(batches, list):
        return None
    ids = [b.get("id") if isinstance(b, dict) else b for b in batches]
    return ids if all(isinstance(i, str) for i in ids) else None


def as_case(batch: dict, claim: str | None = None, prop: str | None = None) -> tuple[dict, list]:
    """(the batch as a record's case, the batch's keys a case cannot hold)."""
    fields = _case_fields()
    case, left_out = {}, []
    for key, value in batch.items():
        if key in HARNESS_FLAGS or key == "boundary" or value is None:
            continue
        if key not in fields:
            left_out.append(key)
            continue
        if key == "rows" and isinstance(value, list):
            value = [_row(row) if isinstance(row, dict) else row for row in value]
        elif key == "after":
            value = _ids(value)
        elif key == "second_builder" and isinstance(value, dict):
            value = {**value, "after": _ids(value.get("after"))} if "after" in value else value
        if value is not None:
            case[key] = value
    if not isinstance(case.get("id"), str):
        name = batch.get("boundary") if isinstance(batch.get("boundary"), str) else prop
        case["id"] = _slug("_".join(part for part in ("failing", claim, name) if part))
    where = f"{claim} ({prop})" if claim and prop else claim or prop or "an invariant"
    case["text"] = f"The batch {where} failed on: {source_of(batch)}."
    ordered = {key: case[key] for key in LEADING if key in case}
    ordered.update({key: case[key] for key in sorted(case) if key not in ordered})
    return ordered, sorted(left_out)


def _problem(case: dict) -> str | None:
    """Why ``case`` is not a record's case (the schema's first complaint), or None."""
    from pydantic import ValidationError

    from gdn_review.kb.cases import Case

    try:
        Case.model_validate(case)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        return f"{where}: {first.get('msg')}" if where else str(first.get("msg"))
    return None


def _flow(value) -> str:
    """``value`` as one line of YAML (flow style; a scalar without the document end marker)."""
    dumped = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**6)
    dumped = dumped.removesuffix("\n").removesuffix("\n...").strip()
    # One line whatever the value holds (JSON is YAML too): a pasted case gains no other key.
    return dumped if "\n" not in dumped else json.dumps(value, default=str)


def case_yaml(case: dict, left_out: list[str] = (), problem: str | None = None) -> str:
    """``case`` as a list item to paste under a record's ``cases:`` (two-space indent)."""
    lines = []
    for index, (key, value) in enumerate(case.items()):
        lead = "  - " if index == 0 else "    "
        if key == "rows" and isinstance(value, list) and value:
            lines.append(f"{lead}rows:")
            lines += [f"      - {_flow(row)}" for row in value]
        else:
            lines.append(f"{lead}{key}: {_flow(value)}")
    if left_out:
        named = [key for key in left_out if re.fullmatch(r"[A-Za-z0-9_]{1,60}", key)]
        others = len(left_out) - len(named)
        shown = ", ".join(named + ([f"{others} other key(s)"] if others else []))
        lines.append(f"    # left out (not a case field): {shown}")
    if problem:
        lines.append(f"    # not a valid case as it is: {json.dumps(problem)[1:-1][:300]}")
    return "\n".join(lines)


def _row_cells(row: dict) -> dict:
    shown = {}
    for key in ROW_KEYS:
        value = row.get(key)
        if key == "accepted" and value is None:
            value = 1
        shown[key] = "—" if value is None else json.dumps(value)
    return shown


def configuration(batch: dict, case: dict, left_out: list[str]) -> dict:
    """The batch's settings beyond its rows: k (null: no speculative config), drafts,
    max_num_seqs, then its scenario keys as the case states them and those it cannot hold."""
    found = {"speculative_tokens": None}
    found.update(
        {
            k: v
            for k, v in case.items()
            if k not in ("id", "text", "rows", "padded_rows", "padded_tokens")
        }
    )
    found.update({key: batch[key] for key in left_out})
    ordered = {key: found.pop(key) for key in LEADING if key in found}
    return {**ordered, **dict(sorted(found.items()))}


def describe(
    batch, claim: str | None = None, prop: str | None = None, device: str | None = None
) -> dict | None:
    """Rows, padding, configuration and the YAML case of a failing batch (None: not a batch).

    The batch itself is kept (``batch``): every renderer describes it again from there.
    """
    if not isinstance(batch, dict) or not isinstance(batch.get("rows", []), list):
        return None
    claim, prop, device = (None if part is None else str(part) for part in (claim, prop, device))
    rows = [row for row in batch.get("rows", []) if isinstance(row, dict)]
    case, left_out = as_case(batch, claim, prop)
    problem = _problem(case)
    return {
        "claim": claim,
        "property": prop,
        "device": device,
        "source": source_of(batch),
        "rows": [_row_cells(row) for row in rows],
        "padded_rows": batch.get("padded_rows") or 0,
        "padded_tokens": batch.get("padded_tokens"),
        "configuration": configuration(batch, case, left_out),
        "case": case,
        "valid": problem is None,
        "problem": problem,
        "yaml": case_yaml(case, left_out, problem),
        "batch": batch,
    }


def of_test(test: dict) -> dict | None:
    """A failed test's failing batch, described (None: the test kept none)."""
    return describe(
        test.get("failing_batch"), test.get("claim"), test.get("property"), test.get("device")
    )


def of_tests(tests: list[dict]) -> list[dict]:
    """The failing batches of the tests that failed (and kept one), in the tests' order: a test
    that could not run, or whose check raised, measured no batch."""
    found = [of_test(test) for test in tests if test.get("outcome") == Outcome.FAILED]
    return [described for described in found if described]


def _configuration_words(described: dict, shown=str) -> str:
    """The configuration as ``key value, ...``; ``shown``: how each key and value is written."""
    configuration = described["configuration"].items()
    return ", ".join(f"{shown(key)} {shown(_flow(value))}" for key, value in configuration)


def _padding_words(described: dict) -> str:
    words = f"{described['padded_rows']} zero-length padded row(s)"
    if described.get("padded_tokens"):
        words += f", {described['padded_tokens']} padded token(s)"
    return words


def compact(described: dict) -> str:
    """One line for a table cell: the rows as (seq_len, query_len, drafted, accepted), padding,
    k."""
    rows = ", ".join(
        "(" + ", ".join(row[key] for key in ROW_KEYS[:4]) + ")" for row in described["rows"]
    )
    k = described["configuration"].get("speculative_tokens")
    line = f"batch (seq_len, query_len, drafted, accepted) [{rows}]"
    if described["padded_rows"]:
        line += f" + {described['padded_rows']} padded"
    return line + (f", k={_flow(k)}" if k is not None else ", no speculation")


def markdown(described: dict | None) -> list[str]:
    """A described failing batch as markdown lines: its rows as a table, padding, configuration,
    the YAML case.

    Described again from its ``batch``, and everything escaped (a cell each, the YAML in a
    fence nothing inside closes): the evidence of a shard or a PR run is data, not trusted.
    """
    if not isinstance(described, dict):
        return []
    described = describe(
        described.get("batch"),
        described.get("claim"),
        described.get("property"),
        described.get("device"),
    )
    if described is None:
        return []
    claim, prop, device = described["claim"], described["property"], described["device"]
    where = " ".join(code(part) for part in (claim, prop) if part) or "the invariant"
    lines = [
        f"Failing batch of {where}"
        + (f" ({text(device)})" if device else "")
        + f", {text(described['source'])}:",
        "",
        "| row | " + " | ".join(ROW_KEYS) + " |",
        "|---|" + "---|" * len(ROW_KEYS),
    ]
    for index, row in enumerate(described["rows"]):
        lines.append(f"| {index} | " + " | ".join(cell(row[key]) for key in ROW_KEYS) + " |")
    lines += [
        "",
        f"Padding: {text(_padding_words(described))}. "
        f"Configuration: {_configuration_words(described, code) or 'the default'}.",
        "",
        "As a case (paste under the record's `cases:`):",
        "",
        *fence(described["yaml"], "yaml"),
    ]
    return lines


def terminal(described: dict | None, indent: str = "  ") -> list[str]:
    """A described failing batch as plain terminal lines (``gdn-review run``)."""
    if not isinstance(described, dict):
        return []
    claim, prop, device = described["claim"], described["property"], described["device"]
    label = " ".join(part for part in (claim, prop) if part) or "an invariant"
    lines = [
        f"{indent}{label}"
        + (f" ({device})" if device else "")
        + f" failed on {described['source']}:"
    ]
    for index, row in enumerate(described["rows"]):
        shown = ", ".join(f"{key} {row[key]}" for key in ROW_KEYS if row[key] != "—")
        lines.append(f"{indent}  row {index}: {shown}")
    lines.append(f"{indent}  padding: {_padding_words(described)}")
    lines.append(f"{indent}  configuration: {_configuration_words(described) or 'the default'}")
    lines.append(f"{indent}  as a case (paste under cases:):")
    lines += [f"{indent}  {line}" for line in described["yaml"].splitlines()]
    return lines


SHOWN = 3  # failing batches shown per claim (and per matrix cell); the evidence and JSON have all


def markdown_section(found: list | None) -> list[str]:
    """Up to ``SHOWN`` described failing batches as markdown, then how many more there are."""
    found = [d for d in found or [] if isinstance(d, dict)]
    lines = []
    for described in found[:SHOWN]:
        shown = markdown(described)
        if shown:
            lines += ([""] if lines else []) + shown
    if len(found) > SHOWN:
        lines += ["", f"… {len(found) - SHOWN} more failing batch(es) (in the JSON and evidence)."]
    return lines


def markdown_text(found: list | None) -> str:
    """``markdown_section`` as one block of text (the report template's filter)."""
    return "\n".join(markdown_section(found))


def terminal_section(found: list | None, indent: str = "  ") -> list[str]:
    """Up to ``SHOWN`` described failing batches as terminal lines, then how many more."""
    found = [d for d in found or [] if isinstance(d, dict)]
    lines = [line for described in found[:SHOWN] for line in terminal(described, indent)]
    if len(found) > SHOWN:
        lines.append(f"{indent}… {len(found) - SHOWN} more failing batch(es) in the evidence")
    return lines
