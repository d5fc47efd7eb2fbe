"""Is a record complete enough to generate tests from? Drafts (imported) are not.

A draft is well-formed YAML that still has open items: checks of kind TODO,
target releases not yet known. ``validate`` lists each item; ``generate``
skips drafts with a warning instead of rendering half a module.
"""

from __future__ import annotations

from pathlib import Path

from gdn_review.kb.errors import RecordError
from gdn_review.kb.models import Record
from gdn_review.kb.yaml_source import errors_in


def open_items(record: Record) -> list[tuple[tuple, str]]:
    """(field location, what is missing) for every open item of a record."""
    items: list[tuple[tuple, str]] = []
    for field in ("file", "symbol"):
        if getattr(record.target, field).strip().upper().startswith("TODO"):
            items.append((("target", field), f"TODO: target.{field} is not known yet"))
    for field in ("base_release", "head_release"):
        if record.contract is not None:
            break  # a contract holds on its release range: no PR, no base and head
        if field == "head_release" and record.is_open:
            continue  # an open (or closed, unmerged) PR is in no release
        if getattr(record.target, field) is None:
            items.append(
                (
                    ("target", field),
                    f"TODO: {field} is not set (which vLLM release "
                    f"{'lacks' if field == 'base_release' else 'first has'} the PR? "
                    '`gdn-review find-release "<a line the PR added>"` prints both)',
                )
            )
    for index, claim in enumerate(record.claims):
        if claim.check.kind == "TODO":
            hint = f" ({claim.check.hint})" if claim.check.hint else ""
            items.append(
                (("claims", index, "check"), f"TODO: claim {claim.id} has no check yet{hint}")
            )
    return items


def is_draft(record: Record) -> bool:
    return bool(open_items(record))


def incomplete(path: Path, record: Record) -> list[RecordError]:
    """Open items of a loaded record, located at file:line:col."""
    return errors_in(path, open_items(record))
