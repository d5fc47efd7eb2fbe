"""The click command of a new release: ``release-step``.

It parses its options, calls ``gdn_review.review.release_step``, writes the step's page and
drafts (``step_report``), prints and picks the exit code.
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
    offline_option,
    path_option,
    print_written,
    records_option,
    release_option,
    say,
    timeout_option,
    work_option,
)
from gdn_review.common import fail_conditions

DEFAULT_FAIL_ON = "fails,breaks,drift,unexplained,survived,error"


@click.command(name="release-step")
@kb_option
@release_option(
    "--from",
    "old",
    help_text="The release the KB already covers.  [default: the newest release before --to "
    "with snapshots in KB/snapshots]",
)
@release_option(
    "--to",
    "new",
    help_text="The new release.  [default: the newest on the package index; with --offline the "
    "newest at hand]",
)
@records_option(
    "Only this record: a PR's number or a contract's id (repeatable).  [default: every record "
    "that is not a draft]"
)
@jobs_option("Release runs at once in the matrix.  [default: one per CPU and 2 GiB free]")
@timeout_option(300.0, "Seconds a review side (or a mutant) may run before it is killed.")
@click.option(
    "--max-mutants",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="Mutants of each changed file's new lines to run, in line order (0: none).",
)
@generated_option()
@offline_option("Fetch nothing and ask no index: both releases must be at hand.")
@path_option(
    "--out",
    "out_root",
    default="reports/release-step",
    file_okay=False,
    help_text="The step's reports go to OUT/FROM-TO/.",
)
@work_option(
    "The matrix runs' files (evidence, snapshots).  [default: .gdn-review/release-step/FROM-TO]"
)
@click.option(
    "--plan",
    "plan_only",
    is_flag=True,
    help="Run nothing: print from=, to=, covered= (the KB's newest release) and due=true|false "
    "(--to is newer than every release the KB covers), one per line, as $GITHUB_OUTPUT takes "
    "them; exit 0.",
)
@fail_on_option(fail_conditions.RELEASE_STEP, DEFAULT_FAIL_ON)
@exit_codes
@interruptible
def release_step_command(
    kb_dir,
    old,
    new,
    keys,
    jobs,
    timeout,
    max_mutants,
    generated_dir,
    offline,
    out_root,
    work_dir,
    plan_only,
    fail_on,
) -> None:
    """Check a new vLLM release against the whole KB, in one command.

    Fetches --from and --to into the release cache, runs every record on
    both (as `matrix` does) and writes the history's section of --to: each
    moved field with the change that explains it, or "unexplained". The
    step's diff of gdn_attn.py and of every file of the builder's family
    is split into hunks, each named by the kb/history/changes.yaml entries
    whose `hunks:` quote one of its lines, or listed as unexplained with a
    draft entry and what to search for (OUT/FROM-TO/changes.draft.yaml).
    Each changed file's diff is then reviewed onto --from as `review`
    reviews a PR: claims before and with it, and every mutant of its new
    lines, killed or named (the new lines no record guards).

    Writes OUT/FROM-TO/: step.md (appended to GITHUB_STEP_SUMMARY when set),
    step.json, step.diff, history.md, matrix/, review/ and the drafts.

    Exit 0 everything holds and is explained, 1 what --fail-on names (a
    claim broke or fails on --to, unexplained drift or hunk, a surviving
    mutant), 2 bad input (a release the index does not have, --from not
    before --to, a bad record), 3 the step could not run (a release's
    set-up raised, a file's diff could not be reviewed; no verdict), 130
    SIGINT, 143 SIGTERM.

    \b
    Examples:
      gdn-review release-step                              # newest on the index vs the KB's newest
      gdn-review release-step --from 0.33.0 --to 0.34.0
      gdn-review release-step --from 0.33.0 --to 0.34.0 --record 52078 --max-mutants 20
      gdn-review release-step --offline --fail-on unexplained,error
      gdn-review release-step --plan >> "$GITHUB_OUTPUT"      # due=true when the index is ahead
    """
    from gdn_review.common import interrupts
    from gdn_review.review import release_step, step_report

    options = release_step.StepOptions(
        old=old,
        new=new,
        keys=keys,
        jobs=jobs,
        max_mutants=max_mutants,
        timeout=timeout,
        generated_dir=generated_dir,
        work_dir=work_dir,
        offline=offline,
    )
    try:
        if plan_only:
            found = release_step.plan(kb_dir, options, say)
            for key in ("from", "to", "covered"):
                click.echo(f"{key}={found[key] or ''}")
            click.echo(f"due={'true' if found['due'] else 'false'}")
            return
        data = release_step.release_step(kb_dir, out_root, options, say=say)
    except release_step.StepError as error:
        raise click.UsageError(str(error)) from None
    interrupts.finishing()
    written = step_report.write(data, Path(data["out"]))
    click.echo(step_report.headline(data))
    print_written(written[:1])
    for path in written[1:]:
        click.echo(f"drafts   {path}")
    click.echo(f"history  {Path(data['out']) / 'history.md'}")
    click.echo(f"took     {data['seconds']:.0f} s")
    code = exit_for([tuple(f) for f in data["findings"]], fail_on)
    for line in release_step.not_run(data):
        click.echo(f"could not run: {line}", err=True)
    sys.exit(release_step.exit_code(data, code))
