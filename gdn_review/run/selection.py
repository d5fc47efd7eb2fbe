"""Which records and generated modules a command works on.

Commands that run the generated suite (run, mutate, matrix) first load the
records they were asked for, then make sure each record's generated module is
current (or regenerate it with --write). Both steps live here so every command
selects the same way and says the same thing when something is missing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from gdn_review import generate
from gdn_review.kb import Record, load_kb
from gdn_review.kb.errors import SelectionError
from gdn_review.kb.subjects import key_label, key_order


class StaleModules(Exception):
    """Generated modules disagree with their records (a check failed: exit 1)."""

    def __init__(self, paths: list[Path]):
        super().__init__(
            "generated tests are out of date: run `gdn-review generate` (or add --write)"
        )
        self.paths = paths


def load_records(kb_dir: Path, numbers: tuple[int, ...] = ()) -> dict[Path, Record]:
    """The records of ``kb_dir`` (only PRs ``numbers`` when given); RecordErrors when one is bad."""
    return pick(load_kb(kb_dir), kb_dir, numbers)


def pick(records: dict[Path, Record], kb_dir: Path, numbers: tuple[int, ...]) -> dict[Path, Record]:
    """Only PRs ``numbers`` of ``records`` (all when none is given); SelectionError names a
    number ``kb_dir`` has no record of."""
    if numbers:
        missing = set(numbers) - {r.key for r in records.values()}
        if missing:
            raise SelectionError(
                "no record for "
                f"{', '.join(map(key_label, sorted(missing, key=key_order)))} in "
                f"{kb_dir}"
            )
        records = {p: r for p, r in records.items() if r.key in numbers}
    if not records:
        raise SelectionError(f"no records (*.yaml) in {kb_dir}")
    return records


def current_modules(
    kb_dir: Path,
    records: dict[Path, Record],
    out_dir: Path,
    write: bool,
    say: Callable[[str], None],
    every: dict[Path, Record] | None = None,
) -> dict[int, Path]:
    """The generated module of each complete record, after checking (or regenerating) them.
    ``every``: all records of ``kb_dir``, where the caller loaded them (none: loaded here)."""
    plan = generate.plan(kb_dir, out_dir, generate.DEFAULT_TEMPLATES, every)
    if plan.foreign:
        raise SelectionError(
            f"files without the gdn-review banner in the way: {', '.join(map(str, plan.foreign))}"
        )
    if plan.stale and not write:
        raise StaleModules(plan.stale)
    if plan.stale:
        generate.apply(plan)
        say(f"regenerated {len(plan.write)} module(s), removed {len(plan.remove)}")
    for path in plan.drafts:
        if path in records:
            say(f"warning: skipped draft {path}: it has open TODOs (see `gdn-review validate`)")
    modules = {
        r.key: out_dir / generate.module_name(r) for p, r in records.items() if p not in plan.drafts
    }
    if not modules:
        raise SelectionError("no complete record to run (only drafts)")
    return modules
