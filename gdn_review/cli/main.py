"""Thin click commands over the library: parse, call one stage, print, choose the exit code.

Exit codes: 0 ok, 1 a check failed (stale modules, failing claims), 2 bad input or usage.
This file holds the ``gdn-review`` group and its short commands (generate, schema)
and adds the others to the group, each from the module named after its job: run_commands
(run, report), record_commands (validate, import, export, snapshot), migrate_command,
mutate_command, bench_command, matrix_commands (matrix, history), bundle_command,
review_commands (review, review-merge), release_step_command (release-step),
authoring (find-release), releases_command (releases). Each command's work lives in the stage it
calls.
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
from gdn_review.cli import migrate_command as cli_migrate
from gdn_review.cli import mutate_command as cli_mutate
from gdn_review.cli import record_commands as cli_record
from gdn_review.cli import release_step_command as cli_release_step
from gdn_review.cli import releases_command as cli_releases
from gdn_review.cli import review_commands as cli_review
from gdn_review.cli import run_commands as cli_run
from gdn_review.cli.support import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    exit_codes,
    generated_option,
    kb_option,
    path_option,
    say,
)
from gdn_review.common import fast_exit
from gdn_review.kb import record_schema


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
      gdn-review review pr.diff           # a change (gh pr diff N) against the whole KB, pre-merge
      gdn-review release-step             # a new release: matrix, its diff reviewed, history drafts
      gdn-review report --format json     # verdicts from the last run's evidence
      gdn-review import report.md         # a review report -> draft kb/N.yaml
      gdn-review find-release "LINE"      # first release with a gdn_attn.py line: base/head_release
      gdn-review snapshot --record N --fill-expects   # write the missing expect blocks, measured
      gdn-review migrate                  # records of an older format -> the current one, measured
      gdn-review releases --check         # exit 1 when a published vLLM is newer than the KB
    """


@main.command(name="generate")
@kb_option
@generated_option("--out")
@path_option(
    "--templates",
    "templates_dir",
    exists=True,
    file_okay=False,
    help_text="Template folder (default: the project's templates/).",
)
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 naming every stale, missing or orphaned module.",
)
@exit_codes
def generate_command(
    kb_dir: Path, generated_dir: Path, templates_dir: Path | None, check: bool
) -> None:
    """Render the records into pytest modules (one per record).

    Only files that carry the generator's banner are replaced; modules of
    records that were removed are removed.

    \b
    Examples:
      gdn-review generate
      gdn-review generate --check          # in CI: fail when someone forgot to regenerate
      gdn-review generate --kb tests/golden/kb --out tests/golden/generated
    """
    result = generator.plan(kb_dir, generated_dir, templates_dir or generator.DEFAULT_TEMPLATES)
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
        click.echo(f"up to date: {len(result.unchanged)} module(s) in {generated_dir}")
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
@exit_codes
def schema() -> None:
    """Print the JSON Schema of a record (for editors that validate YAML).

    \b
    Example:
      gdn-review schema > record.schema.json
      # then, in a record: # yaml-language-server: $schema=../record.schema.json
    """
    click.echo(json.dumps(record_schema(), indent=2, sort_keys=True))


for _command in (
    cli_record.validate_command,
    cli_run.report,
    cli_run.run,
    cli_record.import_command,
    cli_record.export_command,
    cli_record.snapshot_command,
    cli_migrate.migrate_command,
    cli_mutate.mutate,
    cli_bench.bench_command,
    cli_matrix.matrix_command,
    cli_matrix.history_command,
    cli_bundle.bundle_command,
    cli_review.review_command,
    cli_review.review_merge_command,
    cli_release_step.release_step_command,
    cli_authoring.find_release_command,
    cli_releases.releases_command,
):
    main.add_command(_command)


def entry() -> None:
    """The ``gdn-review`` console script: ``main``, without the interpreter's teardown once vLLM is
    loaded."""
    fast_exit.run_click(main)


if __name__ == "__main__":
    entry()
