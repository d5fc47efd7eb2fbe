"""Thin click commands over the library: parse, call, print, choose the exit code.

Exit codes: 0 ok, 1 a check failed (stale modules, failing claims), 2 bad input or usage.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from gdn_review import generate as generator
from gdn_review.kb import RecordErrors, incomplete, load_kb, record_schema

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


def _print_record_errors(failure: RecordErrors) -> None:
    for error in failure.errors:
        click.echo(str(error), err=True)
    files = len({e.file for e in failure.errors})
    click.echo(f"{len(failure.errors)} error(s) in {files} file(s)", err=True)


kb_option = click.option(
    "--kb", "kb_dir", default="kb", show_default=True, type=click.Path(path_type=Path), help="Folder of YAML records."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gdn-review")
def main() -> None:
    """Turn pull-request review reports into checked knowledge about vLLM's GDN builder.

    \b
    Examples:
      gdn-review validate                 # check every record in kb/
      gdn-review generate                 # kb/*.yaml -> generated_tests/test_pr_N.py
      gdn-review generate --check         # exit 1 if generated_tests/ is stale
      gdn-review schema > record.schema.json
    """


@main.command()
@kb_option
def validate(kb_dir: Path) -> None:
    """Check every record: types, unknown keys, duplicate ids, references.

    A draft record (from `gdn-review import`) is well-formed but incomplete:
    each open TODO is listed and the exit code is 1.

    \b
    Examples:
      gdn-review validate
      gdn-review validate --kb path/to/records
    """
    try:
        records = load_kb(kb_dir)
    except RecordErrors as failure:
        _print_record_errors(failure)
        sys.exit(EXIT_BAD_INPUT)
    if not records:
        raise BadInput(f"no records (*.yaml) in {kb_dir}")
    open_items = 0
    for path, record in records.items():
        todos = incomplete(path, record)
        open_items += len(todos)
        state = "ok   " if not todos else "draft"
        click.echo(f"{state}  {path}  PR #{record.pr.number}: {len(record.claims)} claims, {len(record.cases)} cases, {len(record.risks)} risks")
        for todo in todos:
            click.echo(f"  incomplete: {todo}", err=True)
    if open_items:
        click.echo(f"{open_items} open TODO(s): the record(s) above are drafts, not yet checkable", err=True)
        sys.exit(EXIT_FAILED)


@main.command(name="generate")
@kb_option
@click.option("--out", "out_dir", default="generated_tests", show_default=True, type=click.Path(path_type=Path), help="Folder of generated modules.")
@click.option("--templates", "templates", default=None, type=click.Path(path_type=Path, exists=True, file_okay=False), help="Template folder (default: the project's templates/).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 naming every stale, missing or orphaned module.")
def generate_command(kb_dir: Path, out_dir: Path, templates: Path | None, check: bool) -> None:
    """Render the records into pytest modules (one per record).

    Only files that carry the generator's banner are replaced; modules of
    records that were removed are removed.

    \b
    Examples:
      gdn-review generate
      gdn-review generate --check          # in CI: fail when someone forgot to regenerate
      gdn-review generate --kb tests/golden/kb --out tests/golden/generated
    """
    try:
        result = generator.plan(kb_dir, out_dir, templates or generator.DEFAULT_TEMPLATES)
    except RecordErrors as failure:
        _print_record_errors(failure)
        sys.exit(EXIT_BAD_INPUT)
    except generator.GenerateError as error:
        raise BadInput(str(error)) from None
    if result.foreign:
        for path in result.foreign:
            click.echo(f"foreign  {path}: exists without the gdn-review banner; move it away, it will not be overwritten", err=True)
        sys.exit(EXIT_BAD_INPUT)
    for path in result.drafts:
        click.echo(f"warning: skipped draft {path}: it has open TODOs (see `gdn-review validate`)", err=True)
    if check:
        for path in result.write:
            state = "stale" if path.exists() else "missing"
            click.echo(f"{state}  {path}: run `gdn-review generate`", err=True)
        for path in result.remove:
            click.echo(f"orphan  {path}: its record is gone; run `gdn-review generate` to remove it", err=True)
        if result.stale:
            sys.exit(EXIT_FAILED)
        click.echo(f"up to date: {len(result.unchanged)} module(s) in {out_dir}")
        return
    generator.apply(result)
    for path in result.write:
        click.echo(f"wrote    {path}")
    for path in result.remove:
        click.echo(f"removed  {path}")
    click.echo(f"{len(result.write)} written, {len(result.remove)} removed, {len(result.unchanged)} unchanged")


@main.command()
def schema() -> None:
    """Print the JSON Schema of a record (for editors that validate YAML).

    \b
    Example:
      gdn-review schema > record.schema.json
      # then, in a record: # yaml-language-server: $schema=../record.schema.json
    """
    click.echo(json.dumps(record_schema(), indent=2, sort_keys=True))


@main.command(name="import")
@click.argument("report_path", metavar="REPORT", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_path", default=None, type=click.Path(path_type=Path), help="Where the draft goes: a file named <number>.yaml or a folder.  [default: kb/<number>.yaml]")
@click.option("--force", is_flag=True, help="Replace the file if it exists.")
def import_command(report_path: Path, out_path: Path | None, force: bool) -> None:
    """Turn a review report (markdown) into a draft record.

    Reads the PR's metadata, summary, motivation, implementation, key files,
    code snippets, discussion, risks and related PRs. Each sentence that
    states a checkable effect becomes a claim with a TODO check; the target
    releases are left open. Complete the draft by hand, then validate it.

    \b
    Examples:
      gdn-review import report.md                     # -> kb/<number>.yaml
      gdn-review import report.md --out /tmp/drafts   # -> /tmp/drafts/<number>.yaml
      gdn-review import report.md --force             # replace an existing record
      gdn-review validate                             # lists the draft's open TODOs
    """
    from gdn_review.importers.review_report import ReportImportError, write_draft
    from gdn_review.kb import load_record, open_items

    try:
        path = write_draft(report_path, out_path, force)
    except ReportImportError as error:
        raise BadInput(str(error)) from None
    todos = len(open_items(load_record(path)))
    click.echo(f"wrote {path} (draft: {todos} open TODOs; run gdn-review validate)")


if __name__ == "__main__":
    main()
