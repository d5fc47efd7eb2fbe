"""The click commands that check the KB on the installed vLLM: ``run`` and ``report``.

``run`` runs the generated suite and writes the reports; ``report`` writes them again from
evidence already measured. Each parses its options, calls the stages in data-flow order (``run``:
the suite, the own lines' reach, each open PR's diff side, the reports), prints and picks the
exit code; ``cli/main.py`` adds them to the group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gdn_review.cli.support import (
    EXIT_FAILED,
    evidence_option,
    exit_codes,
    fail_on_option,
    generated_option,
    kb_option,
    keyword_option,
    records_option,
    reports_option,
    say,
    write_option,
    write_reports,
)
from gdn_review.common import fail_conditions
from gdn_review.run import evidence_file
from gdn_review.run.selection import current_modules, load_records, pick


@click.command()
@kb_option
@records_option()
@click.option(
    "--evidence",
    "evidence_paths",
    type=click.Path(path_type=Path),
    multiple=True,
    help=f"Evidence JSON (repeatable; default {evidence_file.DEFAULT_PATH}).",
)
@reports_option("--out")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["markdown", "json"]),
    default="markdown",
    show_default=True,
)
@fail_on_option(fail_conditions.REPORT, "fails,error")
@exit_codes
def report(
    kb_dir: Path, keys, evidence_paths, reports_dir: Path, fmt: str, fail_on: set[str]
) -> None:
    """Write a risk report per record from evidence, plus reports/index.md.

    Each report says, claim by claim, holds / fails / pending / known
    deviation / not applicable / unverified (with the reason and measured
    values), or that its check could not run (set-up raised: the platform,
    VllmConfig, an import) or raised an error in the check (gdn-review's own
    fault), with the message and where it came from: those two are no
    verdict. Risk by risk: uncovered / targeted / passing with what is missing.

    Exit 0 when nothing --fail-on names is found; 1 when a claim fails (or
    whatever else --fail-on adds); 3 when the only findings are checks that
    could not run or raised an error in the check (--fail-on error); 2 on
    bad input.

    \b
    Examples:
      gdn-review report
      gdn-review report --record 52078 --evidence cpu.json --evidence gpu.json
      gdn-review report --format json --out /tmp/reports
      gdn-review report --fail-on fails,uncovered      # for CI
    """
    records = load_records(kb_dir, keys)
    paths = evidence_paths or evidence_file.with_bench(evidence_file.DEFAULT_PATH, say)
    sys.exit(write_reports(records, paths, reports_dir, fail_on, fmt))


@click.command(context_settings={"ignore_unknown_options": True})
@kb_option
@records_option()
@generated_option()
@write_option
@keyword_option("pytest -k expression: run only matching tests (others are reported 'not run').")
@evidence_option("Where the evidence JSON goes.")
@reports_option()
@click.option(
    "--no-diff",
    is_flag=True,
    help="Skip the diff side: an open PR's diff stored beside its record "
    "(kb/N.diff) is not applied.",
)
@fail_on_option(fail_conditions.REPORT, "fails,error")
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
@exit_codes
def run(
    kb_dir,
    keys,
    generated_dir,
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
    1 when a claim fails (or whatever --fail-on adds); 3 when the only
    findings are claims whose checks could not run (set-up raised: the
    platform, VllmConfig, an import) or raised an error in the check
    (gdn-review's own fault): no verdict, fix the set-up or report the
    error (--fail-on error); 2 on bad input. Arguments after `--` go to pytest.

    A record of an open PR: its improvement claims (before: fails) read
    **pending** on a release without the change (exit 0 unless --fail-on
    pending). Where the PR's diff lies beside the record (kb/N.diff, as
    `gh pr diff N` writes it), the record's tests also run with the diff
    applied to a copy of the release's files, and the report reads each
    claim against it. Mutation results and the diff side in the evidence
    file are kept when this run is on the same vLLM release.

    The session traces which lines of the target file each case executes:
    for every line the record's PR added or changed (its own hunks, mapped
    onto the installed release) the run names the cases that execute it, and
    each line no case reaches with the case that came closest; a record whose
    own lines no case reaches reads "not tied to the change" instead of
    holds (--fail-on unverified fails on it).

    \b
    Examples:
      gdn-review run
      gdn-review run -k pure_spec_decode          # one case; other claims: "unverified: not run"
      gdn-review run --record 52078 --write
      gdn-review run --fail-on fails,unverified,uncovered -- -x
      # an open PR: its pending claims fail the run
      gdn-review run --record 53542 --fail-on fails,pending
    """
    from gdn_review.mutation import own_reach
    from gdn_review.review import diff_side
    from gdn_review.run import suite

    # The stages in data-flow order; the evidence file carries what each adds to the next.
    every = load_records(kb_dir)
    records = pick(every, kb_dir, keys)
    modules = current_modules(kb_dir, records, generated_dir, write, say, every)
    diffs = {} if no_diff or keyword else diff_side.wanted(records)  # PatchError: nothing ran
    traced = (*own_reach.pytest_args(records), *pytest_args)  # each case's lines traced
    ran = suite.run_suite(list(modules.values()), evidence_path, keyword, traced, say=click.echo)
    if ran != suite.NO_TESTS:
        for line in own_reach.add_to_evidence(evidence_path, records, click.echo):
            click.echo(line)
        for path in diffs:  # each open PR's diff side, on the release the tests ran on
            release = evidence_file.tests_release(evidence_path)
            diff_side.add_to_evidence(
                path, records[path], release, evidence_path, kb_dir, generated_dir, say=click.echo
            )
    click.echo("[2/2] writing risk reports")
    paths = evidence_file.with_bench(evidence_path, click.echo)
    code = write_reports(records, paths, reports_dir, fail_on)
    sys.exit(EXIT_FAILED if ran == suite.NO_TESTS else code)
