"""The click commands of the long runs: mutate, bench, matrix, bundle.

Each parses its options, calls its stage (mutation, bench, matrix, bundle),
prints and picks the exit code; ``gdn_review.cli`` adds them to the group.
``interruptible`` (also on ``review``) turns SIGINT/SIGTERM into exit 130/143.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

import click

from gdn_review.cli.support import (
    EXIT_FAILED,
    EXIT_OK,
    RECORD_KEY,
    exit_codes,
    exit_for,
    fail_on_option,
    kb_option,
    print_written,
    say,
    show_reports,
)
from gdn_review.common import fail_conditions
from gdn_review.kb.subjects import key_label, key_short
from gdn_review.run import evidence_file
from gdn_review.run.selection import current_modules, load_records


def interruptible(command):
    """SIGINT or SIGTERM stops the run (``common.interrupts``): its processes stopped, one line
    said, exit 130 or 143."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        from gdn_review.common import interrupts

        try:
            with interrupts.handled():
                return command(*args, **kwargs)
        except interrupts.Interrupted as stop:
            say(f"interrupted by {stop.name}: its processes are stopped; nothing was written")
            sys.exit(stop.exit_code)

    return wrapper


@click.command()
@kb_option
@click.option(
    "--record",
    "numbers",
    type=RECORD_KEY,
    multiple=True,
    help="Only this record: a PR's number or a contract's id (repeatable).",
)
@click.option("--risk", "risk", default=None, metavar="ID", help="Only the mutants of this risk.")
@click.option(
    "--mutant",
    "patterns",
    multiple=True,
    metavar="ID",
    help="Only this mutant (repeatable; shell patterns such as 'auto.*').",
)
@click.option(
    "--list", "list_only", is_flag=True, help="List the mutants and their state; run nothing."
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Mutants run at once.  [default: CPU count]",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Seconds a mutant may run before its process is killed (status: timeout).",
)
@click.option(
    "-k",
    "keyword",
    default=None,
    help="pytest -k expression: the tests that may kill mutants (a weaker selection kills less).",
)
@click.option(
    "--generated",
    "out_dir",
    default="generated_tests",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Folder of generated modules.",
)
@click.option("--write", is_flag=True, help="Regenerate stale modules instead of stopping at them.")
@click.option(
    "--offline",
    is_flag=True,
    help="Use only releases already in the cache (automatic mutants need "
    "the base and head releases).",
)
@click.option(
    "--evidence",
    "evidence_path",
    default=str(evidence_file.DEFAULT_PATH),
    show_default=True,
    type=click.Path(path_type=Path),
    help="Where the evidence JSON (tests and mutants) goes.",
)
@click.option(
    "--reports",
    "reports_dir",
    default="reports",
    show_default=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Where reports go.",
)
@fail_on_option(fail_conditions.REPORT, "fails,survived")
@click.option(
    "--whole-file",
    is_flag=True,
    help="Score the whole target file against every record's tests "
    "(reports/guard.md + .json), not a record's PR hunks.",
)
@click.option(
    "--release",
    default=None,
    metavar="X.Y.Z",
    help="With --whole-file: score this release from the release cache "
    "(fetched once) instead of the installed one.",
)
@click.option(
    "--min-score",
    type=click.FloatRange(0, 100),
    default=95.0,
    show_default=True,
    help="With --whole-file: exit 1 below this percentage of detected mutants.",
)
@exit_codes
@interruptible
def mutate(
    kb_dir,
    numbers,
    risk,
    patterns,
    list_only,
    jobs,
    timeout,
    keyword,
    out_dir,
    write,
    offline,
    evidence_path,
    reports_dir,
    fail_on,
    whole_file,
    release,
    min_score,
) -> None:
    """Plant each risk's bug in vLLM's real builder and check a generated test fails.

    Mutants come from the record (exact find/replace edits under each risk) and
    from the PR's diff (standard operators on the lines the PR added, mapped by
    content onto the loaded release; the base and head releases are fetched once
    into the release cache). vLLM is imported once; each mutant runs in a forked
    child on CPU, its source compiled in memory: vLLM's files are never written.
    The unmutated suite runs first and must pass; its evidence, with every
    mutant's result, goes to --evidence, and the reports show the kill matrix.

    \b
    Examples:
      gdn-review mutate --list                     # every mutant, with its id and state
      gdn-review mutate --record 52078             # run them all; reports/52078.md
      gdn-review mutate --risk R1 --jobs 2
      gdn-review mutate --mutant 'auto.or_to_and.*'
      gdn-review mutate -k C1 --fail-on survived   # how much the C1 tests alone catch
      gdn-review mutate --whole-file               # the whole file: reports/guard.md
      gdn-review mutate --whole-file --release 0.31.0 --jobs 2
    """
    import collections

    from gdn_review.cli.progress import MutationProgress

    if whole_file:
        if risk or keyword or list_only:
            raise click.UsageError(
                "--whole-file runs every record's tests against every mutant: "
                "--risk, -k and --list do not apply"
            )
        sys.exit(
            _whole_file(
                kb_dir,
                numbers,
                patterns,
                jobs,
                timeout,
                out_dir,
                write,
                offline,
                reports_dir,
                release,
                min_score,
            )
        )
    if release:
        raise click.UsageError(
            "--release applies to --whole-file (a record's mutants run on "
            "the installed release; see `gdn-review matrix`)"
        )

    from gdn_review import mutation
    from gdn_review.report import report as reporting
    from gdn_review.report import verdicts

    records = load_records(kb_dir, numbers)
    catalogues = mutation.catalogues(records, risk, patterns, fetch=not offline, say=say)
    if list_only:
        click.echo("\n".join(mutation.listing_lines(catalogues)))
        return
    modules = current_modules(
        kb_dir,
        {p: r for p, r in records.items() if r.key in {c.record for c in catalogues}},
        out_dir,
        write,
        say,
    )
    say("[1/3] baseline: the generated suite without mutants (vLLM imported once, CPU)")
    progress = MutationProgress(say)
    try:
        entries = mutation.mutate(
            catalogues,
            modules,
            keyword,
            jobs or os.cpu_count() or 1,
            timeout,
            evidence_path,
            progress.start,
            progress.advance,
        )
    except mutation.MutationError as error:  # the baseline failed: a check, not the input
        progress.stop()
        say(str(error))
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        progress.stop()
        raise
    progress.stop()
    counts = collections.Counter(e["status"] for e in entries)
    say(
        "[3/3] "
        + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no mutant to run")
        + f"; evidence {evidence_path}"
    )
    paths = evidence_file.with_bench(evidence_path, say)
    written, reports = reporting.write_reports(
        records, evidence_file.load(list(paths)), reports_dir
    )
    show_reports(reports, written)
    sys.exit(exit_for(verdicts.tripped(reports, fail_on)))


def _whole_file(
    kb_dir,
    numbers,
    patterns,
    jobs,
    timeout,
    out_dir,
    write,
    offline,
    reports_dir,
    release,
    min_score,
) -> int:
    """``mutate --whole-file``: the guard score of the loaded (or ``release``'s) target file; the
    exit code."""
    from gdn_review.cli.progress import MutationProgress
    from gdn_review.mutation import guard, whole_file

    records = load_records(kb_dir, numbers)
    modules = current_modules(kb_dir, records, out_dir, write, say)
    options = [
        "--kb",
        str(kb_dir),
        "--generated",
        str(out_dir),
        "--reports",
        str(reports_dir),
        "--timeout",
        str(timeout),
        "--min-score",
        str(min_score),
        *(f"--record={n}" for n in numbers),
        *(f"--mutant={p}" for p in patterns),
        *([f"--jobs={jobs}"] if jobs else []),
    ]
    progress = MutationProgress(say)
    try:
        scored = whole_file.score_and_write(
            kb_dir,
            records,
            modules,
            reports_dir,
            release,
            options,
            not offline,
            patterns,
            jobs or os.cpu_count() or 1,
            timeout,
            progress.start,
            progress.advance,
            say,
        )
    except (
        guard.GuardError
    ) as error:  # the baseline failed, or another tracer is active: a check, not the input
        progress.stop()
        say(str(error))
        return EXIT_FAILED
    finally:
        progress.stop()
    if scored.child_exit is not None:
        return scored.child_exit
    data, score = scored.data, scored.data["score"]
    say(
        f"[3/3] score {score['percent']}% ({score['detected']} of {score['scored']}); "
        + ", ".join(f"{n} {s}" for s, n in score["counts"].items())
        + f"; {data['duration_s']} s"
    )
    say(f"wrote {scored.written[0]} and {scored.written[1]}")
    for note in data["notes"]:
        say(f"note: {note}")
    return EXIT_FAILED if scored.below(min_score) else EXIT_OK


@click.command(name="bench")
@kb_option
@click.option(
    "--record",
    "numbers",
    type=RECORD_KEY,
    multiple=True,
    help="Only this record: a PR's number or a contract's id "
    "(repeatable).  [default: every record with a latency claim]",
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
@click.option(
    "--evidence",
    "evidence_path",
    default=str(evidence_file.BENCH_PATH),
    show_default=True,
    type=click.Path(path_type=Path),
    help="Where the bench evidence JSON goes (run, mutate and report merge it).",
)
@exit_codes
@interruptible
def bench_command(
    kb_dir, numbers, pair, device, case_ids, max_seconds, tolerance, evidence_path
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
    from gdn_review.review import diff_side
    from gdn_review.run import bench

    records = load_records(kb_dir, numbers)
    bench.bench_records(
        records,
        bool(numbers),
        pair,
        device,
        case_ids,
        max_seconds,
        tolerance,
        evidence_path,
        say=say,
        show=click.echo,
        apply_diff=diff_side.release_with_diff,
    )
    say(f"evidence {evidence_path} (reports of `gdn-review run`/`mutate` include it)")


@click.command(name="matrix")
@kb_option
@click.option(
    "--record",
    "numbers",
    multiple=True,
    type=RECORD_KEY,
    help="PR number of a record (repeatable).",
)
@click.option(
    "--all",
    "every",
    is_flag=True,
    help="Every record that is not a draft, in one pool of release runs; "
    "also writes the history page.",
)
@click.option(
    "--since",
    default=None,
    metavar="X.Y.Z",
    help="Leave out releases older than this (the history's window, e.g. 0.28.0).",
)
@click.option(
    "--vllm",
    "versions",
    multiple=True,
    metavar="X.Y.Z",
    help="A release to run (repeatable).  [default: the record's base and "
    "head release and every release after it up to the installed one]",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Releases run at once.  [default: CPUs, at most one per 2 GiB of free memory]",
)
@click.option(
    "-k", "keyword", default=None, help="pytest -k expression (others are reported 'not run')."
)
@click.option(
    "--generated",
    "out_dir",
    default="generated_tests",
    show_default=True,
    type=click.Path(path_type=Path),
    help="Folder of generated modules.",
)
@click.option("--write", is_flag=True, help="Regenerate stale modules instead of stopping at them.")
@click.option(
    "--work",
    "work_dir",
    default=None,
    type=click.Path(path_type=Path, file_okay=False),
    help="Where evidence, snapshots and logs per release go.  [default: "
    ".gdn-review/matrix-N; with several records WORK/matrix-N]",
)
@click.option(
    "--reports",
    "reports_dir",
    default="reports/matrix",
    show_default=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Where the reports go.",
)
@click.option(
    "--history",
    "history_path",
    default=None,
    type=click.Path(path_type=Path, dir_okay=False),
    help="With --all: where the history page goes.  [default: reports/history.md]",
)
@fail_on_option(("fails", "unverified", "uncovered", "drift"), "drift")
@exit_codes
@interruptible
def matrix_command(
    kb_dir,
    numbers,
    every,
    since,
    versions,
    jobs,
    keyword,
    out_dir,
    write,
    work_dir,
    reports_dir,
    history_path,
    fail_on,
) -> None:
    """Run records' generated tests on the release without the PR, the release with it, and every
    later one.

    Each release runs in its own subprocess with that release's Python sources
    (from the release cache, fetched once) first on PYTHONPATH over the
    installed torch; releases run in parallel. On the base release every claim
    runs whatever its range, so the report says per claim whether the check
    discriminates (fails before the PR, holds after it) or, for a claim of no
    change, is preserved. Every case's full metadata is compared between
    consecutive releases; each difference is attributed to a PR
    (target.changes, related[].changes) or shown as unexplained drift.

    With --all, every record runs and reports/history.md says, release by
    release, which PRs changed the builder, what moved and each claim's
    verdict since (`gdn-review history` renders it again without running).

    Exit 0 ok, 1 what --fail-on names, 2 bad input (unknown record or release).

    \b
    Examples:
      gdn-review matrix --record 52078
      gdn-review matrix --record 56531 --vllm 0.31.0 --vllm 0.32.0
      gdn-review matrix --record 52078 --jobs 1 --fail-on drift,fails
      gdn-review matrix --all --since 0.28.0       # the whole KB, 0.28.0 to the installed release; writes reports/history.md
    """
    from gdn_review.matrix import matrix_command, matrix_report
    from gdn_review.review import diff_side

    if bool(numbers) == every:
        raise click.UsageError("give --record N (repeatable) or --all")
    if history_path is not None and not every:
        raise click.UsageError("--history goes with --all (the page needs every record's matrix)")
    chosen = fail_on
    reports, written, history_data = matrix_command.run_records(
        kb_dir,
        list(numbers),
        list(versions),
        jobs,
        keyword,
        out_dir,
        write,
        work_dir,
        reports_dir,
        say=click.echo,
        since=since,
        diff_side=lambda path, record, release, evidence_path: diff_side.add_to_evidence(
            path, record, release, evidence_path, kb_dir, out_dir, say=say
        ),
        history_path=(history_path or Path("reports/history.md")) if every else None,
    )
    for report_data in reports:
        if len(reports) > 1:
            click.echo(f"{key_label(report_data['number'])}:")
        click.echo(
            "\n".join(
                ("  " if len(reports) > 1 else "") + line
                for line in matrix_report.summary_lines(report_data)
            )
        )
    if history_data is not None:
        for number, why in history_data["missing"].items():
            say(f"history: left out {key_short(number)}: {why}")
        click.echo(_history_line(history_data))
    print_written(written)
    sys.exit(exit_for(matrix_report.tripped(chosen, reports, history_data)))


def _history_line(data: dict) -> str:
    releases = data["releases"]
    prs = sum(len(r["prs"]) for r in data["per_release"])
    return (
        f"history: {len(releases)} releases ({releases[0]} .. "
        f"{releases[-1]}), {prs} PRs, {len(data['unexplained'])} "
        "unexplained change(s)"
    )


@click.command(name="history")
@kb_option
@click.option(
    "--since",
    default=None,
    metavar="X.Y.Z",
    help="Leave out releases older than this.  [default: every release the matrix runs have]",
)
@click.option(
    "--work",
    "work_dir",
    default=".gdn-review",
    show_default=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Where the matrix runs are (WORK/matrix-N).",
)
@click.option(
    "--bench",
    "bench_path",
    default=str(evidence_file.BENCH_PATH),
    show_default=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="`gdn-review bench`'s results (latency per record), if any.",
)
@click.option(
    "--out",
    "out_path",
    default="reports/history.md",
    show_default=True,
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where the page goes.",
)
@click.option(
    "--matrix-reports",
    "matrix_reports",
    default="reports/matrix",
    show_default=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="The records' matrix reports, which the page links.",
)
@fail_on_option(("drift",), "drift")
@exit_codes
def history_command(kb_dir, since, work_dir, bench_path, out_path, matrix_reports, fail_on) -> None:
    """Write the builder's history from the matrix runs already made (runs nothing).

    Per release: the PRs that first shipped in it (records by their head
    release, related PRs by from_release, each relation checked against the
    matrix: the cases it says it changed moved, or none moved), what moved in
    every record's cases and which PR explains it, metadata fields that came
    or went, op counts and build() latency; then every claim's verdict on
    every release.

    Exit 0 ok, 1 an unexplained change (with --fail-on drift, the default),
    2 no matrix run to read or an unreadable bench file.

    \b
    Examples:
      gdn-review matrix --all --since 0.28.0       # runs the matrices, then writes the page
      gdn-review history --since 0.28.0            # the page again from .gdn-review/matrix-N
      gdn-review history --work /tmp/runs --out /tmp/history.md --fail-on none
    """
    from gdn_review.matrix import history, matrix_report

    chosen = fail_on
    data, path = history.write_page(kb_dir, work_dir, bench_path, out_path, since, matrix_reports)
    for number, why in data["missing"].items():
        say(f"left out {key_short(number)}: {why}")
    click.echo(_history_line(data))
    click.echo(f"wrote {path}")
    sys.exit(exit_for(matrix_report.tripped(chosen, history=data)))


@click.command(name="bundle")
@kb_option
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder to write (must not exist or be empty, unless --force).",
)
@click.option(
    "--record",
    "numbers",
    multiple=True,
    type=RECORD_KEY,
    help="A record to carry (repeatable).  [default: every record that is not a draft]",
)
@click.option(
    "--vllm",
    "versions",
    multiple=True,
    metavar="X.Y.Z",
    help="A release to carry (repeatable).  [default: the installed one "
    "and the base and head of every latency claim]",
)
@click.option(
    "--python",
    "python",
    default=None,
    metavar="X.Y",
    help="Python of the machine that runs it (picks the wheels).  "
    "[default: 3.12, the GPU machine's; this Python's with --dry-run]",
)
@click.option(
    "--max-mib",
    default=60,
    show_default=True,
    type=click.IntRange(min=1),
    help="Refuse to write a bundle bigger than this.",
)
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Then run it here on CPU, in a venv that has only PyTorch and "
    "the packages a GPU machine has, with no network: proves the "
    "bundle complete.",
)
@click.option(
    "--work",
    "work_dir",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the dry run's environment and evidence go.  [default: a temp folder, kept]",
)
@click.option(
    "--dry-run-python",
    "source_python",
    default=None,
    metavar="PYTHON",
    help="The dry run's venv links this interpreter's PyTorch and "
    "packages (e.g. a venv with the GPU machine's torch 2.11).  "
    "[default: this one]",
)
@exit_codes
@interruptible
def bundle_command(
    kb_dir, out_dir, numbers, versions, python, max_mib, force, dry_run, work_dir, source_python
) -> None:
    """Write an offline bundle that runs the generated checks and the bench on a GPU machine.

    The folder (at most --max-mib) holds the project and its generated tests,
    vLLM's Python files for each release carried (no compiled kernels), and
    wheels of every package vLLM's builder path imports beyond PyTorch,
    numpy, transformers, tokenizers, safetensors, jinja2, pyyaml, pytest,
    hypothesis, click, rich and tqdm. DIR/run.sh installs them into a temp
    folder with pip --no-index, probes each release's builder path, runs
    every record's generated tests (CPU and CUDA) with `matrix`, the bench on
    the GPU, and writes all evidence to one folder (see DIR/README.md).

    Exit 0 written (and, with --dry-run, the dry run passed), 1 the dry run
    failed, 2 bad input (too big, unknown release, a wheel not on the index).

    \b
    Examples:
      gdn-review bundle --out /tmp/gdn-bundle                 # for the GPU machine (Python 3.12)
      gdn-review bundle --out /tmp/b --dry-run                # for this Python, then run it here offline
      gdn-review bundle --out /tmp/b --dry-run --dry-run-python ~/torch-2.11/bin/python   # over another torch
      gdn-review bundle --out /tmp/b --record 52078 --vllm 0.28.0 --vllm 0.29.0
      /tmp/gdn-bundle/run.sh /tmp/gpu-evidence                # on the GPU machine
    """
    from gdn_review.export import bundle

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if source_python and not dry_run:
        raise click.UsageError("--dry-run-python goes with --dry-run")
    python = python or (here if dry_run else bundle.DEFAULT_PYTHON)
    if dry_run and python != here:
        raise click.UsageError(
            f"--dry-run runs the bundle with this Python ({here}): leave out "
            f"--python or give {here}"
        )
    records = load_records(kb_dir, numbers)
    ran = bundle.make_bundle(
        records,
        out_dir,
        list(versions),
        python,
        max_mib,
        force,
        dry_run,
        work_dir,
        source_python,
        say=say,
    )
    if ran is None:
        click.echo(f"wrote {out_dir}; on the GPU machine: {out_dir}/run.sh OUT")
        return
    code, out, offline = ran
    click.echo(
        f"dry run: run.sh exit {code}, "
        f"{'no network' if offline else 'network not cut'}; evidence in "
        f"{out}"
    )
    sys.exit(EXIT_OK if code == 0 else EXIT_FAILED)
