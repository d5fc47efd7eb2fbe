"""``gdn-review bench``: A/B latency of build() between two releases, with 95% intervals.

The command parses its options, calls ``run.bench``, prints and picks the exit code;
``cli/main.py`` adds it to the group.
"""

from __future__ import annotations

import click

from gdn_review.cli.support import (
    evidence_option,
    exit_codes,
    interruptible,
    kb_option,
    records_option,
    say,
)
from gdn_review.run import evidence_file
from gdn_review.run.selection import load_records


@click.command(name="bench")
@kb_option
@records_option(
    "Only this record: a PR's number or a contract's id (repeatable).  "
    "[default: every record with a latency claim]"
)
@click.option(
    "--releases",
    "pair",
    default=None,
    metavar="BASE,HEAD",
    help="The two releases to compare.  [default: the latency check's, "
    "else the record's base and head; an open PR: its base release "
    "and BASE+diff, kb/N.diff applied]",
)
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option(
    "--case",
    "case_ids",
    multiple=True,
    metavar="ID",
    help="Only these cases (repeatable; one record).  [default: the latency check's cases]",
)
@click.option(
    "--max-seconds",
    type=click.FloatRange(min=1),
    default=120.0,
    show_default=True,
    help="Per record: stop adding rounds after this long, tight or not.",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0.0001),
    default=0.01,
    show_default=True,
    help="Stop once every case's 95%% half-interval of the ratio is this narrow.",
)
@evidence_option(
    "Where the bench evidence JSON goes (run, mutate and report merge it).",
    default=evidence_file.BENCH_PATH,
)
@exit_codes
@interruptible
def bench_command(
    kb_dir, keys, pair, device, case_ids, max_seconds, tolerance, evidence_path
) -> None:
    """A/B latency of build() between a record's base and head releases, with 95% intervals.

    Each release runs in its own process (its sources from the release cache,
    the installed release as it is); rounds interleave them (A B, B A, ...)
    after a warm-up, until every case's interval is tight or --max-seconds.
    Prints per case the medians and the head/base ratio with its bootstrap 95%
    interval, and the pooled ratio: supported (head faster, interval below 1),
    not distinguishable from noise, or contradicted; the record's latency claim
    takes that verdict in the reports. This is build()'s latency, the mechanism
    of a throughput claim; end-to-end throughput needs a serving benchmark.

    An open PR's change is in no release: its base release is timed against
    the same release with the PR's diff applied (BASE+diff), from the diff
    stored beside its record (kb/N.diff, as `gh pr diff N > kb/N.diff` writes
    it); without that file, a named record is bad input (exit 2) and a run over
    every record skips it, saying so.

    \b
    Examples:
      gdn-review bench                                          # every record with a latency claim
      gdn-review bench --record 52078 --releases 0.28.0,0.33.0 --case pure_spec_decode
      gdn-review bench --record 52078 --device cuda             # on a GPU machine
      gdn-review report --evidence .gdn-review/evidence.json --evidence .gdn-review/bench.json
    """
    from gdn_review.run import bench

    records = load_records(kb_dir, keys)
    bench.bench_records(
        records,
        bool(keys),
        pair,
        case_ids,
        evidence_path,
        bench.BenchOptions(device=device, max_seconds=max_seconds, tolerance=tolerance),
        say=say,
        show=click.echo,
    )
    say(f"evidence {evidence_path} (reports of `gdn-review run`/`mutate` include it)")
