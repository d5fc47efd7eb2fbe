"""Thin click commands over the library: parse, call one stage, print, choose the exit code.

Exit codes: 0 ok, 1 a check failed (stale modules, failing claims), 2 bad input or usage.
Each command's work lives in the module named after it (validate, suite, mutation,
bench, bundle, matrix, snapshot, export, importers); this file only wires them up.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from gdn_review import generate as generator
from gdn_review.cli import authoring as cli_authoring
from gdn_review.cli import bench_command as cli_bench
from gdn_review.cli import bundle_command as cli_bundle
from gdn_review.cli import matrix_commands as cli_matrix
from gdn_review.cli import mutate_command as cli_mutate
from gdn_review.cli import review_commands as cli_review
from gdn_review.cli.support import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    RECORD_KEY,
    exit_codes,
    exit_for,
    fail_on_option,
    kb_option,
    say,
    show_reports,
)
from gdn_review.common import fail_conditions, fast_exit
from gdn_review.kb import record_schema
from gdn_review.run import evidence_file
from gdn_review.run.selection import current_modules, load_records


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gdn-review")
def main() -> None:
    """Turn pull-request review reports into checked knowledge about vLLM's GDN builder.

    \b
    Examples:
      gdn-review validate                 # check every record in kb/
      gdn-review generate                 # kb/*.yaml -> generated_tests/test_pr_N.py
      gdn-review generate --check         # exit 1 if generated_tests/ is stale
      gdn-review run                      # generate --check, run the suite, write reports/
      gdn-review mutate                   # plant every risk's mutants; mutation-verified coverage
      gdn-review bench                    # build() latency A/B for the latency claims
      gdn-review matrix --record 52078    # before/after the PR on every release since
      gdn-review review pr.diff           # a change (gh pr diff N) against the whole KB before it merges
      gdn-review report --format json     # verdicts from the last run's evidence
      gdn-review import report.md         # a review report -> draft kb/N.yaml
      gdn-review find-release "LINE"      # which release first has a line of gdn_attn.py: base/head_release
      gdn-review snapshot --record N --fill-expects   # write the missing expect blocks, measured
    """


@main.command()
@kb_option
@exit_codes
def validate(kb_dir: Path) -> None:
    """Check every record: types, unknown keys, duplicate ids, references.

    Each mutant's find must match exactly once in the record's target file on
    every release at hand (the installed vLLM and the release cache) that its
    range covers; releases not at hand are named, not fetched.

    A draft record (from `gdn-review import`) is well-formed but incomplete:
    each open TODO is listed and the exit code is 1.

    \b
    Examples:
      gdn-review validate
      gdn-review validate --kb path/to/records
    """
    from gdn_review.kb.validate import validate_kb
    from gdn_review.mutation import check_finds

    checked = validate_kb(kb_dir, check_finds)
    for note in checked.notes:
        say(f"note: {note}")
    for path, record in checked.records.items():
        todos = checked.todos[path]
        click.echo(
            f"{'ok   ' if not todos else 'draft'}  {path}  {record.label}: "
            f"{len(record.claims)} claims, {len(record.cases)} cases, "
            f"{len(record.risks)} risks"
        )
        for todo in todos:
            say(f"  incomplete: {todo}")
    if checked.open_items:
        say(f"{checked.open_items} open TODO(s): the record(s) above are drafts, not yet checkable")
        sys.exit(EXIT_FAILED)


@main.command(name="generate")
@kb_option
@click.option(
    "--out",
    "out_dir",
    default="generated_tests",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Folder of generated modules.",
)
@click.option(
    "--templates",
    "templates",
    default=None,
    type=click.Path(path_type=Path, exists=True, file_okay=False),
    help="Template folder (default: the project's templates/).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 naming every stale, missing or orphaned module.",
)
@exit_codes
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
    result = generator.plan(kb_dir, out_dir, templates or generator.DEFAULT_TEMPLATES)
    for path in result.foreign:
        say(
            f"foreign  {path}: exists without the gdn-review banner; move it "
            "away, it will not be overwritten"
        )
    if result.foreign:
        sys.exit(EXIT_BAD_INPUT)
    for path in result.drafts:
        say(f"warning: skipped draft {path}: it has open TODOs (see `gdn-review validate`)")
    if check:
        for path in result.write:
            say(f"{'stale' if path.exists() else 'missing'}  {path}: run `gdn-review generate`")
        for path in result.remove:
            say(f"orphan  {path}: its record is gone; run `gdn-review generate` to remove it")
        if result.stale:
            sys.exit(EXIT_FAILED)
        click.echo(f"up to date: {len(result.unchanged)} module(s) in {out_dir}")
        return
    generator.apply(result)
    for path in result.write:
        click.echo(f"wrote    {path}")
    for path in result.remove:
        click.echo(f"removed  {path}")
    click.echo(
        f"{len(result.write)} written, {len(result.remove)} removed, "
        f"{len(result.unchanged)} unchanged"
    )


@main.command()
@kb_option
@click.option(
    "--record",
    "numbers",
    type=RECORD_KEY,
    multiple=True,
    help="Only this record: a PR's number or a contract's id (repeatable).",
)
@click.option(
    "--evidence",
    "evidence_paths",
    type=click.Path(path_type=Path),
    multiple=True,
    help=f"Evidence JSON (repeatable; default {evidence_file.DEFAULT_PATH}).",
)
@click.option(
    "--out",
    "out_dir",
    default="reports",
    show_default=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Where reports go.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["markdown", "json"]),
    default="markdown",
    show_default=True,
)
@fail_on_option(fail_conditions.REPORT, "fails")
@exit_codes
def report(kb_dir: Path, numbers, evidence_paths, out_dir: Path, fmt: str, fail_on: str) -> None:
    """Write a risk report per record from evidence, plus reports/index.md.

    Each report says, claim by claim, holds / fails / known deviation / not
    applicable / unverified (with the reason and measured values), and, risk
    by risk, uncovered / targeted / passing with what is missing.

    \b
    Examples:
      gdn-review report
      gdn-review report --record 52078 --evidence cpu.json --evidence gpu.json
      gdn-review report --format json --out /tmp/reports
      gdn-review report --fail-on fails,uncovered      # for CI
    """
    from gdn_review.report import report as reporting
    from gdn_review.report import verdicts

    records = load_records(kb_dir, numbers)
    paths = evidence_paths or evidence_file.with_bench(evidence_file.DEFAULT_PATH, say)
    written, reports = reporting.write_reports(
        records, evidence_file.load(list(paths)), out_dir, fmt
    )
    show_reports(reports, written, fmt)
    sys.exit(exit_for(verdicts.tripped(reports, fail_on)))


@main.command(context_settings={"ignore_unknown_options": True})
@kb_option
@click.option(
    "--record",
    "numbers",
    type=RECORD_KEY,
    multiple=True,
    help="Only this record: a PR's number or a contract's id (repeatable).",
)
@click.option(
    "--generated",
    "out_dir",
    default="generated_tests",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Folder of generated modules.",
)
@click.option("--write", is_flag=True, help="Regenerate stale modules instead of stopping at them.")
@click.option(
    "-k",
    "keyword",
    default=None,
    help="pytest -k expression: run only matching tests (others are reported 'not run').",
)
@click.option(
    "--evidence",
    "evidence_path",
    default=str(evidence_file.DEFAULT_PATH),
    show_default=True,
    type=click.Path(path_type=Path),
    help="Where the evidence JSON goes.",
)
@click.option(
    "--reports",
    "reports_dir",
    default="reports",
    show_default=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Where reports go.",
)
@click.option(
    "--no-diff",
    is_flag=True,
    help="Skip the diff side: an open PR's diff stored beside its record "
    "(kb/N.diff) is not applied.",
)
@fail_on_option(fail_conditions.REPORT, "fails")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
@exit_codes
def run(
    kb_dir,
    numbers,
    out_dir,
    write,
    keyword,
    evidence_path,
    reports_dir,
    no_diff,
    fail_on,
    pytest_args,
) -> None:
    """Check the generated tests are current, run them on the installed vLLM, write reports.

    Exit 0 when every claim that was checked holds or is a known deviation;
    1 when a claim fails (or whatever --fail-on adds); 2 on bad input.
    Arguments after `--` go to pytest.

    A record of an open PR: its improvement claims (before: fails) read
    **pending** on a release without the change (exit 0 unless --fail-on
    pending). Where the PR's diff lies beside the record (kb/N.diff, as
    `gh pr diff N` writes it), the record's tests also run with the diff
    applied to a copy of the release's files, and the report reads each
    claim against it. Mutation results and the diff side in the evidence
    file are kept when this run is on the same vLLM release.

    \b
    Examples:
      gdn-review run
      gdn-review run -k pure_spec_decode          # one case; other claims: "unverified: not run"
      gdn-review run --record 52078 --write
      gdn-review run --fail-on fails,unverified,uncovered -- -x
      gdn-review run --record 53542 --fail-on fails,pending   # an open PR: pending claims fail the run
    """
    from gdn_review.report import kb_run, verdicts
    from gdn_review.review import diff_side

    records = load_records(kb_dir, numbers)
    modules = current_modules(kb_dir, records, out_dir, write, say)
    done = kb_run.check_kb(
        kb_dir,
        records,
        modules,
        evidence_path,
        reports_dir,
        keyword,
        pytest_args,
        diff_sides=None if no_diff else diff_side,
        generated=out_dir,
        say=click.echo,
    )
    show_reports(done.reports, done.written)
    code = exit_for(verdicts.tripped(done.reports, fail_on))
    sys.exit(EXIT_FAILED if done.collected_nothing else code)


@main.command()
@exit_codes
def schema() -> None:
    """Print the JSON Schema of a record (for editors that validate YAML).

    \b
    Example:
      gdn-review schema > record.schema.json
      # then, in a record: # yaml-language-server: $schema=../record.schema.json
    """
    click.echo(json.dumps(record_schema(), indent=2, sort_keys=True))


@main.command(name="import")
@click.argument(
    "report_path", metavar="REPORT", type=click.Path(exists=True, dir_okay=False, path_type=Path)
)
@click.option(
    "--out",
    "out_path",
    default=None,
    type=click.Path(path_type=Path),
    help="Where the draft goes: a file named <number>.yaml, or a folder "
    "(made if needed).  [default: kb/<number>.yaml]",
)
@click.option("--force", is_flag=True, help="Replace the file if it exists.")
@click.option(
    "--diff",
    "diff_path",
    default=None,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="What `gh pr diff N` wrote: the target file and symbol come from "
    "its hunks (with gh's JSON only).",
)
@exit_codes
def import_command(
    report_path: Path, out_path: Path | None, force: bool, diff_path: Path | None
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

    path = write_draft(report_path, out_path, force, diff_path)
    click.echo(
        f"wrote {path} (draft: {len(open_items(load_record(path)))} open "
        "TODOs; run gdn-review validate)"
    )


@main.command(name="export")
@kb_option
@click.option(
    "--record",
    "key",
    default=None,
    type=RECORD_KEY,
    help="The record to export: a PR's number or a contract's id.",
)
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Export every complete record, one module each (contract records included).",
)
@click.option(
    "--out",
    "out_dir",
    default=".",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder the module is written to.",
)
@click.option(
    "--vllm-release",
    "release",
    default=None,
    metavar="X.Y.Z",
    help="Release whose known deviations become strict xfails.  [default: the installed vLLM]",
)
@exit_codes
def export_command(kb_dir: Path, key, every: bool, out_dir: Path, release: str | None) -> None:
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
        for path, skipped in export_all(kb_dir, out_dir, release):
            click.echo(f"wrote {path}" if skipped is None else f"skipped {path}: {skipped}")
        return
    path = export(kb_dir, key, out_dir, release)
    click.echo(f"wrote {path} (run: python -m pytest {path})")


@main.command(name="snapshot")
@kb_option
@click.option(
    "--record",
    "key",
    required=True,
    type=RECORD_KEY,
    help="The record: a PR's number or a contract's id.",
)
@click.option(
    "--release",
    "versions",
    multiple=True,
    metavar="X.Y.Z",
    help="Release to snapshot (repeatable; from the release cache unless "
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
    key: int | str,
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
      gdn-review snapshot --record 52078 --fill-expects        # every case an equivalence check names that has no expect
      gdn-review snapshot --record 52078 --fill-expects --print --release 0.29.0
    """
    from gdn_review.run import snapshot_take

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


for _command in (
    cli_mutate.mutate,
    cli_bench.bench_command,
    cli_matrix.matrix_command,
    cli_matrix.history_command,
    cli_bundle.bundle_command,
    cli_review.review_command,
    cli_review.review_merge_command,
    cli_authoring.find_release_command,
):
    main.add_command(_command)


def entry() -> None:
    """The ``gdn-review`` console script: ``main``, without the interpreter's teardown once vLLM is
    loaded."""
    fast_exit.run_click(main)


if __name__ == "__main__":
    entry()
