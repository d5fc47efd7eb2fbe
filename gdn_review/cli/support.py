"""What every command shares: exit codes, turning a stage's errors into them, printing reports."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import click

from gdn_review import generate as generator
from gdn_review.kb import RecordErrors
from gdn_review.kb.subjects import is_record_key, key_label
from gdn_review.report import report as reporting
from gdn_review.report import verdicts
from gdn_review.run import evidence_file
from gdn_review.run.selection import StaleModules

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


def _input_errors() -> tuple[type[Exception], ...]:
    """Every stage's "bad input" error (exit 2); imported late so --help stays fast."""
    from gdn_review import mutation
    from gdn_review.common import release_cache
    from gdn_review.export import bundle
    from gdn_review.export.export import ExportError
    from gdn_review.importers.review_report import ReportImportError
    from gdn_review.matrix import matrix
    from gdn_review.mutation import guard
    from gdn_review.review.orchestrate import ReviewError
    from gdn_review.review.patch import PatchError
    from gdn_review.run import bench, selection, snapshot, suite

    return (selection.SelectionError, generator.GenerateError, verdicts.ReportError, evidence_file.EvidenceError, suite.SuiteError,
            mutation.MutationError, guard.GuardError, release_cache.ReleaseError, bench.BenchError, bundle.BundleError,
            matrix.MatrixError, snapshot.SnapshotError, ExportError, ReportImportError, PatchError, ReviewError)


def _exit_codes(command):
    """Record errors are listed (all of them), stale modules named, other bad input said; exit 2 or 1."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except RecordErrors as failure:
            for error in failure.errors:
                click.echo(str(error), err=True)
            click.echo(f"{len(failure.errors)} error(s) in {len({e.file for e in failure.errors})} file(s)", err=True)
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
        self.fail(f"{value!r} is neither a PR number nor a contract id (lower case, digits and _)", param, ctx)


RECORD_KEY = RecordKey()


def _say(line: str) -> None:
    click.echo(line, err=True)


kb_option = click.option(
    "--kb", "kb_dir", default="kb", show_default=True, type=click.Path(path_type=Path), help="Folder of YAML records."
)
FAIL_ON_CHOICES = ("uncovered", "fails", "unverified", "survived", "pending")


def _fail_on(value: str, choices=FAIL_ON_CHOICES) -> set[str]:
    chosen = {item.strip() for item in value.split(",") if item.strip()}
    unknown = chosen - set(choices)
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(sorted(unknown))}; choose from {', '.join(choices)}", param_hint="--fail-on")
    return chosen


fail_on_option = click.option(
    "--fail-on",
    default="fails",
    show_default=True,
    help="Comma list of what makes the exit code 1: fails, unverified, uncovered, survived, pending "
    "(an open PR's claims that wait for its change).",
)


def _write_reports(records, evidence_paths, out_dir: Path, fmt: str, fail_on: set[str]) -> int:
    """Reports from evidence; prints a line per record and what --fail-on tripped; the exit code."""
    written, reports = reporting.write_reports(records, evidence_file.load(list(evidence_paths)), out_dir, fmt)
    for data in reports:
        claims = ", ".join(f"{n} {v}" for v, n in data["verdict_counts"].items() if n)
        coverage = ", ".join(f"{n} {c}" for c, n in data["coverage_counts"].items() if n) or "no risks"
        click.echo(f"{key_label(data['number'])}: claims {claims}; risks {coverage}")
        for line in data.get("stale", []):  # a part measured on an earlier version of the record
            click.echo(f"  {line}")
    _print_written(written, fmt)
    tripped = verdicts.failures(reports, fail_on)
    for line in tripped:
        click.echo(f"fail-on: {line}", err=True)
    return EXIT_FAILED if tripped else EXIT_OK


def _print_written(written: list[Path], fmt: str = "markdown") -> None:
    for path in written:
        click.echo(f"report   {path}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and fmt == "markdown" and written:
        with open(summary, "a", encoding="utf-8") as stream:
            for path in written:
                stream.write(path.read_text(encoding="utf-8") + "\n")
        click.echo(f"appended to GITHUB_STEP_SUMMARY ({summary})")


def _report_evidence(evidence_path: Path) -> tuple[Path, ...]:
    """This run's evidence, plus the last `gdn-review bench` results when there are some."""
    if evidence_file.BENCH_PATH.exists() and Path(evidence_path) != evidence_file.BENCH_PATH:
        click.echo(f"with latency evidence from {evidence_file.BENCH_PATH} (gdn-review bench)", err=True)
        return (Path(evidence_path), evidence_file.BENCH_PATH)
    return (Path(evidence_path),)
