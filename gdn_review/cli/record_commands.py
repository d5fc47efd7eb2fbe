"""The click commands of one record: ``validate``, ``import``, ``export`` and ``snapshot``.

``validate`` checks every record (and, with ``--reach``, which cases execute the PR's own
lines); ``import`` drafts a record from a review report or gh's JSON of a PR, ``export`` writes a
record's checks as a standalone module for vLLM's tests, ``snapshot`` stores the metadata
build() returns for a record's cases (and fills its missing ``expect`` blocks). Each parses
its options, calls its stage, prints and picks the exit code; ``cli/main.py`` adds them to
the group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gdn_review.cli.support import (
    EXIT_FAILED,
    exit_codes,
    kb_option,
    offline_option,
    path_option,
    records_option,
    release_option,
    say,
    single_record_option,
)


@click.command(name="validate")
@kb_option
@records_option("With --reach: only this record (repeatable); every record is validated.")
@click.option(
    "--reach",
    is_flag=True,
    help="Also build each record's named cases once on the installed vLLM under a line trace "
    "(no tests run) and say which cases execute each line the PR added or changed.",
)
@offline_option(
    "With --reach: use only releases already in the cache (the PR's diff needs its base "
    "and head releases)."
)
@exit_codes
def validate_command(kb_dir: Path, keys, reach: bool, offline: bool) -> None:
    """Check every record: types, unknown keys, duplicate ids, references.

    Each mutant's find must match exactly once in the record's target file on
    every release at hand (the installed vLLM and the release cache) that its
    range covers; releases not at hand are named, not fetched.

    A draft record (from `gdn-review import`) is well-formed but incomplete:
    each open TODO is listed and the exit code is 1.

    --reach builds each named case of the record once, without pytest, and
    names for every line of the PR's own hunks (target.own_hunks, else the diff
    between base_release and head_release, mapped onto the installed release)
    the cases that execute it, and for each line no case reaches the case that
    came closest (the one that executes the nearest line before it in the same
    function). Exit 1 when a record's cases reach none of its own lines: its
    claims are not tied to the change. Invariants' generated batches are not
    built here; `gdn-review run` traces them too.

    \b
    Examples:
      gdn-review validate
      gdn-review validate --kb path/to/records
      gdn-review validate --reach --record 52078
    """
    from gdn_review.kb import RecordErrors
    from gdn_review.kb.validate import format_note, validate_kb
    from gdn_review.mutation import check_finds

    checked = validate_kb(kb_dir)
    find_problems, find_notes = check_finds(checked.records)
    if find_problems or checked.problems:
        raise RecordErrors(find_problems + checked.problems)
    for note in find_notes + checked.notes:
        say(f"note: {note}")
    for path, record in checked.records.items():
        todos = checked.todos[path]
        click.echo(
            f"{'ok   ' if not todos else 'draft'}  {path}  {record.label}: "
            f"{len(record.claims)} claims, {len(record.cases)} cases, "
            f"{len(record.risks)} risks; {format_note(record)}"
        )
        for todo in todos:
            say(f"  incomplete: {todo}")
    untied = _show_reach(kb_dir, keys, offline) if reach else []
    if checked.open_items:
        say(f"{checked.open_items} open TODO(s): the record(s) above are drafts, not yet checkable")
    if untied:
        say(
            f"claims not tied to the change: no case executes the own lines of "
            f"{', '.join(untied)}; add a case that reaches them"
        )
    if checked.open_items or untied:
        sys.exit(EXIT_FAILED)


def _show_reach(kb_dir: Path, keys, offline: bool) -> list[str]:
    """Print each record's reach (``validate --reach``); the records whose claims are not tied."""
    from gdn_review.mutation import own_reach
    from gdn_review.run.selection import load_records

    records = load_records(kb_dir, keys)
    parts = own_reach.validate_reach(records, fetch=not offline, say=say)
    labels = {str(record.key): record.label for record in records.values()}
    for key, part in parts.items():
        for line in own_reach.report_lines(labels[key], part):
            click.echo(line)
    return [labels[key] for key in own_reach.not_tied(parts)]


@click.command(name="import")
@click.argument(
    "report_path", metavar="REPORT", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@path_option(
    "--out",
    "draft_path",
    help_text="Where the draft goes: a file named <number>.yaml, or a folder "
    "(made if needed).  [default: kb/<number>.yaml]",
)
@click.option("--force", is_flag=True, help="Replace the file if it exists.")
@path_option(
    "--diff",
    "diff_path",
    exists=True,
    dir_okay=False,
    help_text="What `gh pr diff N` wrote: the target file and symbol come from "
    "its hunks (with gh's JSON only).",
)
@exit_codes
def import_command(
    report_path: Path, draft_path: Path | None, force: bool, diff_path: Path | None
) -> None:
    """Turn a review report (markdown) or gh's JSON of a PR into a draft record.

    From a report: the PR's metadata, summary, motivation, implementation, key
    files, code snippets, discussion, risks and related PRs. From gh's JSON (a
    .json file, or one starting with '{'): the PR's metadata, claims from its
    title and body, risks from reviews and comments that raise a concern,
    #NNNNN references as related PRs; --diff gives the target file and
    symbol. Each sentence that states a checkable effect becomes a claim with
    a TODO check; the target releases are left open. Complete the draft by
    hand, then validate it.

    \b
    Examples:
      gdn-review import report.md                     # -> kb/<number>.yaml
      gdn-review import report.md --out /tmp/drafts   # -> /tmp/drafts/<number>.yaml
      gdn-review import report.md --force             # replace an existing record
      gh pr view 55404 --json number,title,body,mergedAt,url,files,reviews,comments > pr.json
      gh pr diff 55404 > pr.diff
      gdn-review import pr.json --diff pr.diff        # gh's JSON and diff -> kb/55404.yaml
      gdn-review validate                             # lists the draft's open TODOs
    """
    from gdn_review.importers import write_draft
    from gdn_review.kb import load_record, open_items

    path = write_draft(report_path, draft_path, force, diff_path)
    click.echo(
        f"wrote {path} (draft: {len(open_items(load_record(path)))} open "
        "TODOs; run gdn-review validate)"
    )


@click.command(name="export")
@kb_option
@single_record_option("The record to export: a PR's number or a contract's id.")
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Export every complete record, one module each (contract records included).",
)
@path_option(
    "--out",
    "export_dir",
    default=".",
    file_okay=False,
    help_text="Folder the module is written to.",
)
@release_option(
    "--vllm-release",
    "release",
    help_text="Release whose known deviations become strict xfails.  [default: the installed vLLM]",
)
@exit_codes
def export_command(kb_dir: Path, key, every: bool, export_dir: Path, release: str | None) -> None:
    """Export a record's checks as one standalone test module for vLLM's tests/.

    The module (test_gdn_pr_N.py, test_gdn_contract_<id>.py) imports only the
    standard library, pytest, torch and vLLM, so it runs in vLLM's own CI
    without gdn-review and without network. Claims and cases outside the target
    release are left out; known deviations of that release are strict xfails.

    \b
    Examples:
      gdn-review export --record 52078 --out /tmp/x
      cd /tmp/x && python -m pytest -q test_gdn_pr_52078.py
      gdn-review export --all --out ~/vllm/tests/v1/attention --vllm-release 0.33.0
    """
    from gdn_review.export.export import export, export_all

    if (key is None) == (not every):
        raise click.UsageError("give --record N (one record) or --all (every complete record)")
    if every:
        for path, skipped in export_all(kb_dir, export_dir, release):
            click.echo(f"wrote {path}" if skipped is None else f"skipped {path}: {skipped}")
        return
    path = export(kb_dir, key, export_dir, release)
    click.echo(f"wrote {path} (run: python -m pytest {path})")


@click.command(name="snapshot")
@kb_option
@single_record_option("The record: a PR's number or a contract's id (required unless --stored).")
@click.option(
    "--stored",
    is_flag=True,
    help="Take again every stored snapshot (every record's, each on its own release), "
    "e.g. after the snapshots' format changed.",
)
@release_option(
    "--release",
    "versions",
    multiple=True,
    help_text="Release to snapshot (repeatable; from the release cache unless "
    "installed).  [default: the installed vLLM]",
)
@click.option(
    "--case",
    "case_id",
    default=None,
    metavar="ID",
    help="With --as-expect: the case to print; with --fill-expects: fill only this case.",
)
@click.option(
    "--as-expect",
    is_flag=True,
    help="Print the case's `expect` block (YAML) instead of storing the snapshot.",
)
@click.option(
    "--fill-expects",
    is_flag=True,
    help="Measure every case once and write each missing `expect` block "
    "into the record (comments kept).",
)
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="With --fill-expects: print all the blocks instead of writing them.",
)
@exit_codes
def snapshot_command(
    kb_dir: Path,
    key: int | str | None,
    stored: bool,
    versions,
    case_id: str | None,
    as_expect: bool,
    fill_expects: bool,
    print_only: bool,
) -> None:
    """Store the full metadata build() returns for every case of a record, per release.

    The snapshot of release V goes to kb/snapshots/N/V.json (the release, the
    device and this command are named in it). Generated tests compare the
    loaded release's build() with it field by field; a release without a stored
    snapshot is skipped with this command as the hint. Each release is taken in
    its own interpreter (its sources first on PYTHONPATH).

    --fill-expects measures every case once and writes an `expect` block (the
    fields --as-expect prints) into the record for each case that an
    equivalence check names and that states none, after the case's last line,
    comments kept; the record is validated again before it is replaced. It
    measures on the release the claims speak of: the base release for a claim
    of no change (before: holds), the head release for a fix (before: fails);
    --release chooses another.

    \b
    Examples:
      gdn-review snapshot --record 52078                       # the installed release
      gdn-review snapshot --record 52078 --release 0.31.0 --release 0.32.0
      gdn-review snapshot --record 56531 --case all_zero_drafts --release 0.32.0 --as-expect
      # every case an equivalence check names that has no expect
      gdn-review snapshot --record 52078 --fill-expects
      gdn-review snapshot --record 52078 --fill-expects --print --release 0.29.0
      gdn-review snapshot --stored          # retake every kb/snapshots/*/*.json
    """
    from gdn_review.run import snapshot_take

    if stored:
        if key is not None or versions or case_id or as_expect or fill_expects or print_only:
            raise click.UsageError("--stored takes no other option but --kb")
        for line in snapshot_take.retake_stored(kb_dir, say=say):
            click.echo(line)
        return
    if key is None:
        raise click.UsageError("Missing option '--record' (or give --stored).")

    if fill_expects or print_only:
        if not fill_expects or as_expect or len(versions) > 1:
            raise click.UsageError(
                "--fill-expects takes at most one --release and --case ID, and "
                "--print; not --as-expect"
            )
        from gdn_review.run import fill_expects as filling

        filled = filling.fill_expects(
            kb_dir,
            key,
            versions[0] if versions else None,
            [case_id] if case_id else None,
            not print_only,
            say,
        )
        for line in filling.filled_lines(filled, written=not print_only):
            click.echo(line)
        if (
            filled.left and not filled.expects
        ):  # every case asked for gave no metadata on that release
            sys.exit(EXIT_FAILED)
        return

    if as_expect and (not case_id or len(versions) > 1):
        raise click.UsageError("--as-expect needs --case ID and at most one --release")
    for line in snapshot_take.take_snapshots(
        kb_dir, key, list(versions), case_id, as_expect, say=say
    ):
        click.echo(line)
