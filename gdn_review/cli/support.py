"""What every command shares: exit codes, turning a stage's errors into them, stopping a long run
on SIGINT or SIGTERM, --fail-on, printing reports, the options several commands declare."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import click

from gdn_review import generate as generator
from gdn_review.common import fail_conditions
from gdn_review.kb import RecordErrors
from gdn_review.kb.subjects import is_record_key
from gdn_review.report import report as reporting
from gdn_review.run import evidence_file
from gdn_review.run.selection import StaleModules

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


def _input_errors() -> tuple[type[Exception], ...]:
    """Every stage's "bad input" error (exit 2); imported late so --help stays fast."""
    from gdn_review import mutation
    from gdn_review.common import release_cache
    from gdn_review.common.unified_diff import PatchError
    from gdn_review.export import bundle_wheels
    from gdn_review.export.export import ExportError
    from gdn_review.importers.review_report import ReportImportError
    from gdn_review.matrix import matrix_files
    from gdn_review.mutation import guard
    from gdn_review.review.review_files import ReviewError
    from gdn_review.run import bench, selection, snapshot_take, suite

    return (
        selection.SelectionError,
        generator.GenerateError,
        evidence_file.EvidenceError,
        suite.SuiteError,
        mutation.MutationError,
        guard.GuardError,
        release_cache.ReleaseError,
        bench.BenchError,
        bundle_wheels.BundleError,
        matrix_files.MatrixError,
        snapshot_take.SnapshotError,
        ExportError,
        ReportImportError,
        PatchError,
        ReviewError,
    )


def exit_codes(command):
    """Record errors are listed (all of them), stale modules named, other bad input said; exit 2 or
    1."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except RecordErrors as failure:
            for error in failure.errors:
                click.echo(str(error), err=True)
            click.echo(
                f"{len(failure.errors)} error(s) in "
                f"{len({e.file for e in failure.errors})} file(s)",
                err=True,
            )
            sys.exit(EXIT_BAD_INPUT)
        except StaleModules as stale:
            for path in stale.paths:
                click.echo(f"stale  {path}", err=True)
            click.echo(str(stale), err=True)
            sys.exit(EXIT_FAILED)
        except Exception as error:
            if isinstance(error, _input_errors()):
                raise BadInput(str(error)) from None
            raise

    return wrapper


def interruptible(command):
    """SIGINT or SIGTERM stops the run (``common.interrupts``): its processes stopped, one line
    said, exit 130 or 143."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from gdn_review.common import interrupts

        try:
            with interrupts.handled():
                return command(*args, **kwargs)
        except interrupts.Interrupted as stop:
            say(f"interrupted by {stop.name}: its processes are stopped; nothing was written")
            sys.exit(stop.exit_code)

    return wrapper


class RecordKey(click.ParamType):
    """``--record``: a PR's number (52078) or a contract record's id (update_block_table)."""

    name = "NUMBER|CONTRACT"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        text = str(value).strip().lstrip("#")
        if text.isdigit():
            return int(text)
        if is_record_key(text):
            return text
        self.fail(
            f"{value!r} is neither a PR number nor a contract id (lower case, digits and _)",
            param,
            ctx,
        )


RECORD_KEY = RecordKey()


def say(line: str) -> None:
    """Progress and notes: to stderr, so that stdout holds the results."""
    click.echo(line, err=True)


def exit_for(findings: list[tuple[str, str]], chosen: set[str]) -> int:
    """Say which of a stage's findings the chosen --fail-on conditions name (stderr); exit 1 if
    any names a measured one, 3 if all are checks that could not run or raised in our own code
    (``error``), else 0."""
    tripped = fail_conditions.tripped(findings, chosen)
    for line in tripped:
        click.echo(f"fail-on: {line}", err=True)
    return fail_conditions.exit_code(tripped)


def write_reports(
    records, evidence_paths, reports_dir: Path, fail_on: set[str], fmt: str = "markdown"
) -> int:
    """Write a report per record from the evidence files and show them (a line per record,
    ``report.summary_lines``, then the files written); the exit code the --fail-on conditions
    pick."""
    from gdn_review.report import verdicts

    evidence = evidence_file.load(list(evidence_paths))
    written, reports = reporting.write_reports(records, evidence, reports_dir, fmt)
    for line in reporting.summary_lines(reports):
        click.echo(line)
    print_written(written, fmt)
    return exit_for(verdicts.findings(reports), fail_on)


def print_written(written: list[Path], fmt: str = "markdown") -> None:
    for path in written:
        click.echo(f"report   {path}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and fmt == "markdown" and written:
        with open(summary, "a", encoding="utf-8") as stream:
            for path in written:
                stream.write(path.read_text(encoding="utf-8") + "\n")
        click.echo(f"appended to GITHUB_STEP_SUMMARY ({summary})")


# The options more than one command declares: each keeps its name, parameter, default, type and
# metavar wherever it is declared; ``help_text`` says what it means to that command.


def path_option(*decls: str, help_text: str, default: str | None = None, **checks):
    """An option naming a file or folder (``checks``: click.Path's, e.g. ``file_okay=False``); a
    default is shown in --help."""
    return click.option(
        *decls,
        default=default,
        show_default=default is not None,
        type=click.Path(path_type=Path, **checks),
        help=help_text,
    )


kb_option = path_option("--kb", "kb_dir", default="kb", help_text="Folder of YAML records.")
write_option = click.option(
    "--write", is_flag=True, help="Regenerate stale modules instead of stopping at them."
)


def fail_on_option(allowed: tuple[str, ...], default: str):
    """``--fail-on`` for a command whose stage can trip ``allowed`` (common.fail_conditions): the
    command gets the chosen set."""

    def chosen(ctx, param, value: str) -> set[str]:
        try:
            return fail_conditions.parse(value, allowed)
        except ValueError as error:
            raise click.BadParameter(str(error), ctx=ctx, param=param) from None

    return click.option(
        "--fail-on",
        "fail_on",
        default=default,
        show_default=True,
        callback=chosen,
        help=fail_conditions.help_text(allowed),
    )


def records_option(
    help_text: str = "Only this record: a PR's number or a contract's id (repeatable).",
):
    """``--record`` (repeatable): the records a command works on."""
    return click.option("--record", "keys", type=RECORD_KEY, multiple=True, help=help_text)


def generated_option(flag: str = "--generated"):
    """``--generated`` (``generate``'s --out): the folder of the generated modules."""
    return path_option(
        flag, "generated_dir", default="generated_tests", help_text="Folder of generated modules."
    )


def single_record_option(help_text: str):
    """``--record`` once: the one record a command works on."""
    return click.option("--record", "key", default=None, type=RECORD_KEY, help=help_text)


def release_option(*decls: str, help_text: str, multiple: bool = False):
    """An option naming a vLLM release, X.Y.Z (``multiple``: repeatable)."""
    return click.option(*decls, default=None, multiple=multiple, metavar="X.Y.Z", help=help_text)


def evidence_option(help_text: str, default: Path = evidence_file.DEFAULT_PATH):
    """``--evidence``: the evidence JSON a command writes."""
    return path_option("--evidence", "evidence_path", default=str(default), help_text=help_text)


def reports_option(flag: str = "--reports", default: str = "reports"):
    """``--reports`` (``report``'s --out): the folder the reports go to."""
    return path_option(
        flag, "reports_dir", default=default, file_okay=False, help_text="Where reports go."
    )


def work_option(help_text: str, default: str | None = None):
    """``--work``: the folder of a run's own files (evidence, logs, environments)."""
    return path_option("--work", "work_dir", default=default, file_okay=False, help_text=help_text)


def keyword_option(help_text: str):
    """``-k``: a pytest -k expression over the generated tests."""
    return click.option("-k", "keyword", default=None, help=help_text)


def jobs_option(help_text: str, default: int | None = None):
    """``--jobs``: how many run at once (mutants, releases)."""
    return click.option(
        "--jobs",
        type=click.IntRange(min=1),
        default=default,
        show_default=default is not None,
        help=help_text,
    )


def timeout_option(default: float, help_text: str):
    """``--timeout``: the seconds one process may run before it is killed."""
    return click.option(
        "--timeout",
        type=click.FloatRange(min=1),
        default=default,
        show_default=True,
        help=help_text,
    )


def offline_option(help_text: str):
    """``--offline``: only the releases at hand (installed, release cache); none fetched."""
    return click.option("--offline", is_flag=True, help=help_text)
