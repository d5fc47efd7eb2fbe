"""The click commands of a review before merge: ``review`` and ``review-merge``.

Each parses its options, calls ``gdn_review.review``, prints and picks the exit code.
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
    path_option,
    print_written,
    records_option,
    release_option,
    say,
    timeout_option,
    work_option,
)
from gdn_review.common import fail_conditions

# The release could not run here: no verdict (common.fail_conditions.exit_code's 3).
EXIT_NO_VERDICT = 3


def _shard(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise click.BadParameter(
            f"{value!r}: expected I/N, e.g. 2/3", param_hint="--shard"
        ) from None
    if not 1 <= index <= count:
        raise click.BadParameter(f"{value!r}: I must be between 1 and N", param_hint="--shard")
    return index, count


# review's and review-merge's --out: the folder of the report
_out_option = path_option(
    "--out",
    "review_dir",
    file_okay=False,
    help_text="Where NAME.md and NAME.json go.  [default: reports/review]",
)


def _finish(data: dict, review_dir: Path, fail_on: set[str]) -> None:
    from gdn_review.review import render, review_files

    written = review_files.write(data, review_dir, render.markdown(data))
    click.echo(render.headline(data))
    print_written(written[:1])
    click.echo(f"json     {written[1]}")
    sys.exit(exit_for(render.findings(data), fail_on))


@click.command(name="review")
@kb_option
@click.argument("diff", type=click.Path(path_type=Path, dir_okay=False))
@release_option(
    "--onto",
    help_text="Release the diff is applied to (its Python files from the "
    "release cache).  [default: the installed one; with the PR's own "
    "record (--pr), its base release]",
)
@path_option(
    "--vllm-src",
    "vllm_src_dir",
    file_okay=False,
    help_text="A vLLM source folder (holding vllm/) to apply the diff to instead of a release.",
)
@records_option(
    "Only this record: a PR's number or a contract's id (repeatable).  "
    "[default: every record whose target file the diff changes]"
)
@release_option(
    "--lands-in",
    help_text="The release the change would first ship in: PRs recorded as "
    "first shipping after --onto and up to it explain moved fields.  "
    "[default: the next minor release]",
)
@keyword_option("pytest -k expression: only these generated tests (snapshots are taken whole).")
@timeout_option(300.0, "Seconds a side (or a mutant) may run before it is killed.")
@click.option(
    "--max-mutants",
    type=click.IntRange(min=0),
    default=30,
    show_default=True,
    help="Mutants of the added lines to run, in line order (0: none).",
)
@jobs_option("Mutants run at once.", default=2)
@click.option(
    "--shard",
    default=None,
    metavar="I/N",
    help="Only every N-th affected record from the I-th (merge the "
    "shards' JSON with review-merge).",
)
@generated_option()
@_out_option
@click.option(
    "--name", default=None, help="Report name.  [default: the diff's file name without extension]"
)
@work_option(
    "Keep the run's files in this new or empty folder: each side's "
    "evidence and snapshots, the mutants' sources.  [default: a temp "
    "folder, removed]"
)
@click.option(
    "--draft",
    "draft_number",
    type=click.IntRange(min=1),
    default=None,
    metavar="PR",
    help="Also write a draft record of the change as OUT/PR.yaml: target "
    "from the hunks, the moved cases with expect blocks measured "
    "with the change (target.changes), surviving mutants as risk "
    "candidates.",
)
@click.option(
    "--pr",
    "own",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="The diff is PR N's own (its record explains what it states it "
    "changes; its claims are read with the change in).  [default: N "
    "from a file named N.diff or pr-N.diff, where the KB holds an "
    "open record of PR N]",
)
@fail_on_option(fail_conditions.REVIEW, "breaks,drift,error")
@exit_codes
@interruptible
def review_command(
    kb_dir,
    diff,
    onto,
    vllm_src_dir,
    keys,
    lands_in,
    keyword,
    timeout,
    max_mutants,
    jobs,
    shard,
    generated_dir,
    review_dir,
    name,
    work_dir,
    draft_number,
    own,
    fail_on,
) -> None:
    """Check a change to vLLM against the whole KB before it merges.

    DIFF is a unified diff as `git diff` or `gh pr diff` writes it. It is
    applied to a copy of release --onto's Python files (never to the installed
    vLLM); a diff that does not apply exits 2 naming the hunk, and nothing
    runs. What the hunks touch (records, symbols, cases, claims, mutant sites)
    is printed first. Then every affected record's generated tests and
    snapshots run on the release as it is and with the change, and the
    automatic mutants of the lines the diff adds run against those tests.
    The report (markdown for a PR comment, and JSON) says which claims'
    verdicts changed (for the PR's own record first: "the PR's own claims:
    k hold, m pending, n fail", and the cases that fail), every field that
    moved with the PR that explains it, and the survivors among the
    mutants; it is appended to GITHUB_STEP_SUMMARY when that is set.

    A claim whose set-up raised before the builder under test was entered
    (platform, VllmConfig, imports) reads "could not run", one whose check
    raised in gdn-review's own code "error in the check": neither is a break,
    and a case that could not be built gives no drift.

    Exit 0 ok, 1 what --fail-on names (a claim broke, a field moved, a
    mutant survived), 2 bad input (a diff that does not apply, a change whose
    module no longer imports on that release), 3 only checks that could not
    run or raised an error in the check (--fail-on error), 130 SIGINT, 143
    SIGTERM (its processes stopped, nothing written).

    \b
    Examples:
      gh pr diff 52297 > pr-52297.diff
      gdn-review review pr-52297.diff                       # onto the installed release
      gdn-review review pr-52297.diff --onto 0.32.0 --record 56531
      gdn-review review pr-52297.diff --max-mutants 0 -k C1  # claims C1 only, no mutants
      gdn-review review pr.diff --shard 1/3 --out shards/1   # one shard of 3; with all 3 done:
      gdn-review review-merge shards/*/pr.json
      gdn-review review pr-55404.diff --draft 55404         # and a draft: reports/review/55404.yaml
      # an open PR's diff with its own record: "the PR's own claims: ..."
      gdn-review review kb/53542.diff --pr 53542
    """
    from gdn_review.common import interrupts
    from gdn_review.review import orchestrate, review_files

    if not diff.is_file():
        raise click.BadParameter(f"{diff}: no such file", param_hint="DIFF")
    options = orchestrate.ReviewOptions(
        keys=keys,
        onto=onto,
        vllm_src_dir=vllm_src_dir,
        lands_in=lands_in,
        generated_dir=generated_dir,
        keyword=keyword,
        timeout=timeout,
        max_mutants=max_mutants,
        jobs=jobs,
        shard=_shard(shard),
        work_dir=work_dir,
        own=own,
    )
    try:
        data = orchestrate.review(diff, kb_dir, options, say=say)
    except review_files.ReviewCouldNotRun as error:  # no verdict: the release does not load
        click.echo(str(error), err=True)
        sys.exit(EXIT_NO_VERDICT)
    interrupts.finishing()  # the review ran: its report is written whatever comes now
    if name:
        data["name"] = name
    review_dir = review_dir or Path("reports") / "review"
    if draft_number:
        click.echo(
            "draft    "
            f"{review_files.write_draft(data, kb_dir, draft_number, review_dir)} "
            "(fill its TODOs, then move it into kb/)"
        )
    _finish(data, review_dir, fail_on)


@click.command(name="review-merge")
@click.argument("shards", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@_out_option
@click.option("--name", default=None, help="Report name.  [default: the first shard's]")
@fail_on_option(fail_conditions.REVIEW, "breaks,drift,error")
@exit_codes
def review_merge_command(shards, review_dir, name, fail_on) -> None:
    """Merge the JSON of review shards (--shard I/N, or a CI job matrix) into one report.

    \b
    Examples:
      gdn-review review-merge shards/*/pr-52297.json
      gdn-review review-merge pr-1-shard1.json pr-1-shard2.json --name pr-1 --out reports/review
    """
    from gdn_review.review import render, review_files

    try:
        data = render.merge([review_files.load(path) for path in shards])
    except ValueError as error:
        raise review_files.ReviewError(str(error)) from None
    if name:
        data["name"] = name
    _finish(data, review_dir or Path("reports") / "review", fail_on)
