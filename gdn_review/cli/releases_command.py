"""``gdn-review releases``: the releases the KB covers against those the package index serves.

Parses its options, asks ``common.published`` for the index's releases (offline: those at
hand), calls ``kb.coverage`` for the rows, prints them and picks the exit code: 0 ok, 1 with
``--check`` a published release newer than the KB is not covered, 2 bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from gdn_review.cli.support import (
    EXIT_FAILED,
    BadInput,
    exit_codes,
    kb_option,
    offline_option,
    release_option,
)

DEFAULT_SINCE = "0.28.0"


@click.command(name="releases")
@kb_option
@release_option(
    "--since", help_text=f"Leave out releases older than this.  [default: {DEFAULT_SINCE}]"
)
@click.option(
    "--check",
    is_flag=True,
    help="Exit 1 when a published release newer than the KB's newest covered one is not covered.",
)
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["md", "json"]),
    default="md",
    show_default=True,
    help="A markdown table, or JSON.",
)
@offline_option(
    "Do not ask the package index: the releases at hand (installed, release cache) stand in."
)
@exit_codes
def releases_command(
    kb_dir: Path, since: str | None, check: bool, output_format: str, offline: bool
) -> None:
    """List the releases the KB covers against those the package index serves.

    A release is covered when every record that applies to it (a PR's record
    from its base release on, a contract within its releases range; drafts
    never) has its stored snapshot, kb/snapshots/<record>/<release>.json
    (`gdn-review snapshot`). Where the newest published release is newer
    than the newest covered one, it says so and names the command that brings
    the KB there (`gdn-review release-step --to X.Y.Z`).

    Exit 0 ok, 1 with --check a published release newer than the KB is not
    covered, 2 bad input (the package index cannot be read: try --offline).

    \b
    Examples:
      gdn-review releases
      gdn-review releases --check               # in CI: fail once a new vLLM is out
      gdn-review releases --since 0.33.0 --format json
      gdn-review releases --offline             # no index: the releases at hand
    """
    from gdn_review.common import published
    from gdn_review.common.release import Release, ReleaseError
    from gdn_review.kb import coverage

    if since is not None:
        try:
            since = Release(since)
        except ReleaseError as error:
            raise BadInput(f"--since: {error}") from None
    if offline:
        releases, source = published.local_releases(), "at hand"
    else:
        try:
            releases, source = published.published_releases(), "package index"
        except ReleaseError as error:
            raise BadInput(f"{error}; --offline compares with the releases at hand") from None
    data = coverage.releases_data(kb_dir, releases, since or DEFAULT_SINCE, source)
    if output_format == "json":
        click.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        click.echo("\n".join(coverage.releases_lines(data)))
    if check and data["uncovered_newer"]:
        sys.exit(EXIT_FAILED)
