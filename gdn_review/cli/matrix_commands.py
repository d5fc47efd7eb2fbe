"""The click commands of the records across vLLM releases: ``matrix`` and ``history``.

``matrix`` runs the records' generated tests on every release; ``history`` writes the
builder's history page from the matrix runs already made. Each parses its options, calls
``gdn_review.matrix``, prints and picks the exit code; ``cli/main.py`` adds them to the group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gdn_review.cli.support import (
    exit_codes,
    exit_for,
    fail_on_option,
    generated_option,
    interruptible,
    jobs_option,
    kb_option,
    keyword_option,
    offline_option,
    path_option,
    print_written,
    records_option,
    release_option,
    reports_option,
    say,
    work_option,
    write_option,
)
from gdn_review.common import fail_conditions
from gdn_review.common.fail_conditions import ERROR
from gdn_review.kb.subjects import key_label, key_short
from gdn_review.run import evidence_file


@click.command(name="matrix")
@kb_option
@records_option()
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every record that is not a draft, in one pool of release runs; "
    "also writes the history page.",
)
@release_option(
    "--since",
    help_text="Leave out releases older than this (the history's window, e.g. 0.28.0).",
)
@release_option(
    "--vllm",
    "versions",
    multiple=True,
    help_text="A release to run (repeatable).  [default: the record's base and "
    "head release and every release after it up to the newest on the package index]",
)
@jobs_option("Releases run at once.  [default: CPUs, at most one per 2 GiB of free memory]")
@keyword_option("pytest -k expression (others are reported 'not run').")
@generated_option()
@write_option
@work_option(
    "Where evidence, snapshots and logs per release go.  [default: "
    ".gdn-review/matrix-N; with several records WORK/matrix-N]"
)
@reports_option(default="reports/matrix")
@path_option(
    "--history",
    "history_path",
    dir_okay=False,
    help_text="With --all: where the history page goes.  [default: reports/history.md]",
)
@click.option(
    "--draft-changes",
    is_flag=True,
    help="Run nothing: print the `changes:` YAML that would explain the unexplained drift of "
    "the records' last matrix run (--work).",
)
@offline_option(
    "Do not ask the package index where the default range ends: the newest release at hand "
    "(installed, release cache) ends it."
)
@fail_on_option(fail_conditions.MATRIX, "drift,error")
@exit_codes
@interruptible
def matrix_command(
    kb_dir,
    keys,
    every,
    since,
    versions,
    jobs,
    keyword,
    generated_dir,
    write,
    work_dir,
    reports_dir,
    history_path,
    draft_changes,
    offline,
    fail_on,
) -> None:
    """Run records' generated tests on the release without the PR, the release with it, and every
    later one.

    By default the range ends at the newest release the package index serves
    (`pip index versions vllm`), not at the installed one; a release that is
    not installed runs from the release cache.

    Each release runs in its own subprocess with that release's Python sources
    (from the release cache, fetched once) first on PYTHONPATH over the
    installed torch; releases run in parallel. On the base release every claim
    runs whatever its range, so the report says per claim whether the check
    discriminates (fails before the PR, holds after it) or, for a claim of no
    change, is preserved. Every case's full metadata is compared between
    consecutive releases; each difference is attributed to a PR
    (target.changes, related[].changes), to an entry of kb/history/changes.yaml
    or a contract's `moved`, or shown as unexplained drift.

    With --all, every record runs and reports/history.md says, release by
    release, which PRs changed the builder, what moved and each claim's
    verdict since (`gdn-review history` renders it again without running).

    Each release is probed once before its tests (one builder made): a release
    whose set-up raises (its platform, VllmConfig) reads "could not run" in one
    line and one column, with vLLM's message and where it came from; none of
    its tests run and no drift is read from it.

    Exit 0 ok, 1 what --fail-on names (a claim broke, unexplained drift), 2 bad
    input (unknown record or release), 3 only releases or checks that could not
    run or raised an error in the check (--fail-on error).

    \b
    Examples:
      gdn-review matrix --record 52078
      gdn-review matrix --record 56531 --vllm 0.31.0 --vllm 0.32.0
      gdn-review matrix --record 52078 --jobs 1 --fail-on drift,fails
      # the whole KB, 0.28.0 to the newest published release; writes reports/history.md
      gdn-review matrix --all --since 0.28.0
      gdn-review matrix --record 52078 --draft-changes   # prints YAML, runs nothing
    """
    from gdn_review.matrix import drift, matrix_command, matrix_report
    from gdn_review.review import diff_side

    if bool(keys) == every:
        raise click.UsageError("give --record N (repeatable) or --all")
    if draft_changes:
        click.echo("\n".join(drift.drafts(kb_dir, list(keys), work_dir)))
        return
    if history_path is not None and not every:
        raise click.UsageError("--history goes with --all (the page needs every record's matrix)")
    # The stages in data-flow order: the runs, each open PR's diff side on its base release's
    # evidence (the review stage), then the reports and the history page.
    options = matrix_command.MatrixOptions(
        keys, since, versions, jobs, keyword, generated_dir, write, work_dir, offline
    )
    runs = matrix_command.run_records(kb_dir, options, say=click.echo)
    for side in matrix_command.open_pr_bases(runs):
        diff_side.add_to_evidence(*side, kb_dir, generated_dir, say=say)
    history_path = (history_path or Path("reports/history.md")) if every else None
    try:
        reports, written, history_data = matrix_command.write_reports(
            runs, reports_dir, history_path
        )
    except matrix_report.NothingRan as error:  # no verdict anywhere: exit 3, not bad input
        sys.exit(exit_for([(ERROR, str(error))], fail_on))
    indent = "  " if len(reports) > 1 else ""
    for report_data in reports:
        if indent:
            click.echo(f"{key_label(report_data['key'])}:")
        click.echo("\n".join(indent + line for line in matrix_report.summary_lines(report_data)))
    if history_data is not None:
        _show_history(history_data, "history: ")
    print_written(written)
    sys.exit(exit_for(matrix_report.findings(reports, history_data), fail_on))


def _show_history(data: dict, prefix: str = "") -> None:
    """The records the history page leaves out (stderr, after ``prefix``), then its summary."""
    for key, why in data["missing"].items():
        say(f"{prefix}left out {key_short(key)}: {why}")
    if data.get("newest_not_run"):
        say(
            f"{prefix}vLLM {data['newest_not_run']} is the newest published release and no matrix "
            "run has it: run gdn-review matrix --all"
        )
    releases = data["releases"]
    prs = sum(len(r["prs"]) for r in data["per_release"])
    click.echo(
        f"history: {len(releases)} releases ({releases[0]} .. "
        f"{releases[-1]}), {prs} PRs, {len(data['unexplained'])} "
        "unexplained change(s)"
    )


@click.command(name="history")
@kb_option
@release_option(
    "--since",
    help_text="Leave out releases older than this.  [default: every release the matrix runs have]",
)
@work_option("Where the matrix runs are (WORK/matrix-N).", default=".gdn-review")
@path_option(
    "--bench",
    "bench_path",
    default=str(evidence_file.BENCH_PATH),
    dir_okay=False,
    help_text="`gdn-review bench`'s results (latency per record), if any.",
)
@path_option(
    "--out",
    "history_path",
    default="reports/history.md",
    dir_okay=False,
    help_text="Where the page goes.",
)
@path_option(
    "--matrix-reports",
    "matrix_reports_dir",
    default="reports/matrix",
    file_okay=False,
    help_text="The records' matrix reports, which the page links.",
)
@offline_option(
    "Do not ask the package index where the window ends: the newest release at hand ends it."
)
@fail_on_option(fail_conditions.HISTORY, "drift,error")
@exit_codes
def history_command(
    kb_dir, since, work_dir, bench_path, history_path, matrix_reports_dir, offline, fail_on
) -> None:
    """Write the builder's history from the matrix runs already made (runs nothing).

    Per release: the PRs that first shipped in it (records by their head
    release, related PRs by from_release, each relation checked against the
    matrix: the cases it says it changed moved, or none moved), what moved in
    every record's cases and which PR explains it, metadata fields that came
    or went, op counts and build() latency; then every claim's verdict on
    every release. The window ends at the newest release the package index
    serves; where the matrix runs stop short of it, the page says so.

    Exit 0 ok, 1 an unexplained change (--fail-on drift), 2 no matrix run to
    read or an unreadable bench file, 3 only a release that could not run or a
    check that raised an error in the check (--fail-on error).

    \b
    Examples:
      gdn-review matrix --all --since 0.28.0       # runs the matrices, then writes the page
      gdn-review history --since 0.28.0            # the page again from .gdn-review/matrix-N
      gdn-review history --work /tmp/runs --out /tmp/history.md --fail-on none
    """
    from gdn_review.matrix import history, matrix_command, matrix_report

    newest = matrix_command.default_end(offline, say, "the history's window")
    data, path = history.write_page(
        kb_dir, work_dir, bench_path, history_path, since, matrix_reports_dir, newest
    )
    _show_history(data)
    click.echo(f"wrote {path}")
    sys.exit(exit_for(matrix_report.findings(history=data), fail_on))
