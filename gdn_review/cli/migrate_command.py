"""``gdn-review migrate``: bring records to the current record format, measured.

The command parses its options, calls ``run.migrate``, prints and picks the exit code;
``cli/main.py`` adds it to the group.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from gdn_review.cli.support import (
    EXIT_FAILED,
    exit_codes,
    kb_option,
    records_option,
    release_option,
    say,
)


@click.command(name="migrate")
@kb_option
@records_option()
@release_option(
    "--release",
    "version",
    help_text="Release to measure the dtypes on (from the release cache unless installed).  "
    "[default: the installed vLLM]",
)
@click.option(
    "--check",
    is_flag=True,
    help="Measure and write nothing; exit 1 naming each record of an older format (for CI).",
)
@click.option(
    "--print", "print_only", is_flag=True, help="Measure and print the diff; write nothing."
)
@exit_codes
def migrate_command(kb_dir: Path, keys, version: str | None, check: bool, print_only: bool) -> None:
    """Bring records of an older format (schema_version) to the current one.

    Each record is read with the meaning of the format it names; migrating states what
    the current format adds, measured on a release, never guessed: format 2 states each
    expected tensor's dtype (and a shape its values do not imply). Every case is built
    once on the release, and each tensor an expect (or a known deviation's pinned
    expect) writes as its values gets the measured dtype; the values stay the record's.
    Comments, layout and key order stay; the diff is printed.

    Each claim is compared, case by case, in the old format and the new: a claim whose
    verdict would change is printed and the exit code is 1. A tensor that could not be
    measured on the release (its case does not apply there) is named.

    \b
    Examples:
      gdn-review migrate --check          # exit 1 if a record is behind (CI)
      gdn-review migrate                  # every record behind, measured on the installed vLLM
      gdn-review migrate --record 52078 --print
    """
    from gdn_review.common import record_format
    from gdn_review.run import migrate

    if check:
        if print_only or version:
            raise click.UsageError("--check takes no --print or --release: it measures nothing")
        late = migrate.behind(kb_dir, keys)
        for path, record in late.items():
            click.echo(
                f"behind  {path}: format {record.schema_version}, current "
                f"{record_format.CURRENT}: run `gdn-review migrate`"
            )
        if late:
            sys.exit(EXIT_FAILED)
        click.echo(f"every record is in the current format ({record_format.CURRENT})")
        return
    done = migrate.migrate(kb_dir, keys, version, write=not print_only, say=say)
    for migration in done:
        for line in migrate.migration_lines(migration, written=not print_only):
            click.echo(line)
    if not done:
        click.echo(f"every record is in the current format ({record_format.CURRENT})")
    if any(migration.changed_verdicts for migration in done):
        say("a claim's verdict would change: read the lines above (verdict changes)")
        sys.exit(EXIT_FAILED)
