"""The click commands that help write a record: ``find-release`` (which release first has a line).

Each command parses, calls one function (``release_finder``), prints and chooses
the exit code: 0 found, 1 not found, 2 bad input.
"""

from __future__ import annotations

import sys

import click

from gdn_review.cli.support import (
    EXIT_FAILED,
    BadInput,
    exit_codes,
    offline_option,
    release_option,
    say,
)
from gdn_review.matrix.release_finder import (
    DEFAULT_FILE,  # imports no vLLM: --help stays fast
)


@click.command(name="find-release")
@click.argument("wanted", metavar="LINE")
@click.option(
    "--file", "file", default=DEFAULT_FILE, show_default=True, help="The file in vLLM to look in."
)
@release_option("--from", "start", help_text="The oldest release to check.  [default: 0.28.0]")
@release_option(
    "--to",
    "end",
    help_text="The newest release to check.  [default: the newest on the package index; "
    "--offline: the newest at hand]",
)
@click.option(
    "--fixed-string",
    is_flag=True,
    help="Find LINE as a string anywhere in the file (as given, not "
    "stripped) instead of as a whole line.",
)
@offline_option(
    "Only the installed vLLM and the release cache; releases not there are named, not fetched."
)
@exit_codes
def find_release_command(
    wanted: str, file: str, start: str | None, end: str | None, fixed_string: bool, offline: bool
) -> None:
    """Say which releases contain LINE of a vLLM file: the first, the last, the target lines to
    paste.

    Checks every X.Y.0 release from --from to --to (by default the newest
    release the package index serves), and every release of the release
    cache in that range; a release missing from the cache is fetched into it
    (about 0.5 GB, once) unless --offline. A line matches with its
    surrounding whitespace stripped; several lines (LINE with newlines, or -
    to read it from stdin) match consecutive non-blank lines of the file.
    The release checked before the first one that has it is the record's
    base_release, the first one its head_release.

    Exit 0 found, 1 found in no release checked, 2 bad input.

    \b
    Examples:
      gdn-review find-release "non_spec_sequence_masks_cpu = ~spec_sequence_masks_cpu"
      gdn-review find-release "if num_spec_decodes == 0:" --from 0.28.0 --to 0.33.0 --offline
      gdn-review find-release "_stage_spec_decode(" --fixed-string
      # two lines, LINE from stdin: first in 0.32.0 (#56531)
      printf 'if num_spec_decodes == 0:\\n    num_spec_decodes = 0\\n' | gdn-review find-release -
    """
    from gdn_review.matrix import release_finder

    if wanted == "-":
        wanted = sys.stdin.read()
    try:
        finding = release_finder.find_release(
            wanted, file, start, end, fixed_string, offline, say=say
        )
    except release_finder.FinderError as error:
        raise BadInput(str(error)) from None
    for line in release_finder.finding_lines(finding):
        click.echo(line)
    if finding.first is None:
        sys.exit(EXIT_FAILED)
