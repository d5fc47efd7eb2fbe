"""Thin click commands over the library: parse, call, print, choose the exit code.

Exit codes: 0 ok, 1 a check failed (stale modules, failing claims), 2 bad input or usage.
"""

from __future__ import annotations

import collections
import json
import os
import sys
from pathlib import Path

import click

from gdn_review import generate as generator
from gdn_review import release_cache
from gdn_review import report as reporting
from gdn_review import suite
from gdn_review.kb import RecordErrors, incomplete, is_draft, load_kb, record_schema
from gdn_review.plugin import DEFAULT_EVIDENCE

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2


class BadInput(click.ClickException):
    exit_code = EXIT_BAD_INPUT


def _print_record_errors(failure: RecordErrors) -> None:
    for error in failure.errors:
        click.echo(str(error), err=True)
    files = len({e.file for e in failure.errors})
    click.echo(f"{len(failure.errors)} error(s) in {files} file(s)", err=True)


def _plan(kb_dir: Path, out_dir: Path, templates: Path) -> generator.Plan:
    try:
        return generator.plan(kb_dir, out_dir, templates)
    except RecordErrors as failure:
        _print_record_errors(failure)
        sys.exit(EXIT_BAD_INPUT)
    except generator.GenerateError as error:
        raise BadInput(str(error)) from None


kb_option = click.option(
    "--kb", "kb_dir", default="kb", show_default=True, type=click.Path(path_type=Path), help="Folder of YAML records."
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gdn-review")
def main() -> None:
    """Turn pull-request review reports into checked knowledge about vLLM's GDN builder.

    \b
    Examples:
      gdn-review validate                 # check every record in kb/
      gdn-review generate                 # kb/*.yaml -> generated_tests/test_pr_N.py
      gdn-review generate --check         # exit 1 if generated_tests/ is stale
      gdn-review schema > record.schema.json
      gdn-review run                      # generate --check, run the suite, write reports/
      gdn-review report --format json     # verdicts from the last run's evidence
      gdn-review import report.md         # a review report -> draft kb/N.yaml
    """


@main.command()
@kb_option
def validate(kb_dir: Path) -> None:
    """Check every record: types, unknown keys, duplicate ids, references.

    Each mutant's find must match exactly once in the record's target file on
    every release at hand (the installed vLLM and the release cache) that its
    range covers; releases not at hand are named, not fetched.

    A draft record (from `gdn-review import`) is well-formed but incomplete:
    each open TODO is listed and the exit code is 1.

    \b
    Examples:
      gdn-review validate
      gdn-review validate --kb path/to/records
    """
    try:
        records = load_kb(kb_dir)
    except RecordErrors as failure:
        _print_record_errors(failure)
        sys.exit(EXIT_BAD_INPUT)
    if not records:
        raise BadInput(f"no records (*.yaml) in {kb_dir}")
    from gdn_review.mutation import check_finds

    find_errors = []
    for path, record in records.items():
        problems, skipped = check_finds(path, record)
        find_errors += problems
        for what in skipped:
            click.echo(f"note: {path}: mutant finds not checked against {what}", err=True)
    if find_errors:
        _print_record_errors(RecordErrors(find_errors))
        sys.exit(EXIT_BAD_INPUT)
    open_items = 0
    for path, record in records.items():
        todos = incomplete(path, record)
        open_items += len(todos)
        state = "ok   " if not todos else "draft"
        click.echo(f"{state}  {path}  PR #{record.pr.number}: {len(record.claims)} claims, {len(record.cases)} cases, {len(record.risks)} risks")
        for todo in todos:
            click.echo(f"  incomplete: {todo}", err=True)
    if open_items:
        click.echo(f"{open_items} open TODO(s): the record(s) above are drafts, not yet checkable", err=True)
        sys.exit(EXIT_FAILED)


@main.command(name="generate")
@kb_option
@click.option("--out", "out_dir", default="generated_tests", show_default=True, type=click.Path(path_type=Path), help="Folder of generated modules.")
@click.option("--templates", "templates", default=None, type=click.Path(path_type=Path, exists=True, file_okay=False), help="Template folder (default: the project's templates/).")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 naming every stale, missing or orphaned module.")
def generate_command(kb_dir: Path, out_dir: Path, templates: Path | None, check: bool) -> None:
    """Render the records into pytest modules (one per record).

    Only files that carry the generator's banner are replaced; modules of
    records that were removed are removed.

    \b
    Examples:
      gdn-review generate
      gdn-review generate --check          # in CI: fail when someone forgot to regenerate
      gdn-review generate --kb tests/golden/kb --out tests/golden/generated
    """
    result = _plan(kb_dir, out_dir, templates or generator.DEFAULT_TEMPLATES)
    if result.foreign:
        for path in result.foreign:
            click.echo(f"foreign  {path}: exists without the gdn-review banner; move it away, it will not be overwritten", err=True)
        sys.exit(EXIT_BAD_INPUT)
    for path in result.drafts:
        click.echo(f"warning: skipped draft {path}: it has open TODOs (see `gdn-review validate`)", err=True)
    if check:
        for path in result.write:
            state = "stale" if path.exists() else "missing"
            click.echo(f"{state}  {path}: run `gdn-review generate`", err=True)
        for path in result.remove:
            click.echo(f"orphan  {path}: its record is gone; run `gdn-review generate` to remove it", err=True)
        if result.stale:
            sys.exit(EXIT_FAILED)
        click.echo(f"up to date: {len(result.unchanged)} module(s) in {out_dir}")
        return
    generator.apply(result)
    for path in result.write:
        click.echo(f"wrote    {path}")
    for path in result.remove:
        click.echo(f"removed  {path}")
    click.echo(f"{len(result.write)} written, {len(result.remove)} removed, {len(result.unchanged)} unchanged")

FAIL_ON_CHOICES = ("uncovered", "fails", "unverified", "survived")


def _fail_on(value: str) -> set[str]:
    chosen = {item.strip() for item in value.split(",") if item.strip()}
    unknown = chosen - set(FAIL_ON_CHOICES)
    if unknown:
        raise click.BadParameter(f"unknown {', '.join(sorted(unknown))}; choose from {', '.join(FAIL_ON_CHOICES)}")
    return chosen


fail_on_option = click.option(
    "--fail-on",
    default="fails",
    show_default=True,
    help="Comma list of what makes the exit code 1: fails, unverified, uncovered.",
)


def _load_records(kb_dir: Path, numbers: tuple[int, ...]):
    try:
        records = load_kb(kb_dir)
    except RecordErrors as failure:
        _print_record_errors(failure)
        sys.exit(EXIT_BAD_INPUT)
    if numbers:
        missing = set(numbers) - {r.pr.number for r in records.values()}
        if missing:
            raise BadInput(f"no record for PR {', '.join(map(str, sorted(missing)))} in {kb_dir}")
        records = {p: r for p, r in records.items() if r.pr.number in numbers}
    if not records:
        raise BadInput(f"no records (*.yaml) in {kb_dir}")
    return records


def _write_reports(records, evidence_paths, out_dir: Path, fmt: str, fail_on: set[str]) -> int:
    try:
        evidence = reporting.load_evidence(list(evidence_paths))
    except reporting.ReportError as error:
        raise BadInput(str(error)) from None
    written, reports = reporting.write_reports(records, evidence, out_dir, fmt)
    for data in reports:
        verdicts = ", ".join(f"{n} {v}" for v, n in data["verdict_counts"].items() if n)
        coverage = ", ".join(f"{n} {c}" for c, n in data["coverage_counts"].items() if n) or "no risks"
        click.echo(f"PR #{data['number']}: claims {verdicts}; risks {coverage}")
    for path in written:
        click.echo(f"report   {path}")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary and fmt == "markdown":
        with open(summary, "a", encoding="utf-8") as stream:
            for path in written:
                stream.write(path.read_text(encoding="utf-8") + "\n")
        click.echo(f"appended to GITHUB_STEP_SUMMARY ({summary})")
    tripped = reporting.failures(reports, fail_on)
    for line in tripped:
        click.echo(f"fail-on: {line}", err=True)
    return EXIT_FAILED if tripped else EXIT_OK


def _current_modules(kb_dir: Path, records, out_dir: Path, write: bool) -> dict[int, Path]:
    """The generated module of each complete record, after checking (or regenerating) them."""
    plan = _plan(kb_dir, out_dir, generator.DEFAULT_TEMPLATES)
    if plan.foreign:
        raise BadInput(f"files without the gdn-review banner in the way: {', '.join(map(str, plan.foreign))}")
    if plan.stale and not write:
        for path in plan.stale:
            click.echo(f"stale  {path}", err=True)
        click.echo("generated tests are out of date: run `gdn-review generate` (or add --write)", err=True)
        sys.exit(EXIT_FAILED)
    if plan.stale:
        generator.apply(plan)
        click.echo(f"regenerated {len(plan.write)} module(s), removed {len(plan.remove)}")
    for path in plan.drafts:
        if path in records:
            click.echo(f"warning: skipped draft {path}: it has open TODOs (see `gdn-review validate`)", err=True)
    modules = {r.pr.number: out_dir / generator.module_name(r) for p, r in records.items() if p not in plan.drafts}
    if not modules:
        raise BadInput("no complete record to run (only drafts)")
    return modules


@main.command()
@kb_option
@click.option("--record", "numbers", type=int, multiple=True, help="Only this PR's record (repeatable).")
@click.option("--evidence", "evidence_paths", type=click.Path(path_type=Path), multiple=True, help=f"Evidence JSON (repeatable; default {DEFAULT_EVIDENCE}).")
@click.option("--out", "out_dir", default="reports", show_default=True, type=click.Path(path_type=Path, file_okay=False), help="Where reports go.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "json"]), default="markdown", show_default=True)
@fail_on_option
def report(kb_dir: Path, numbers, evidence_paths, out_dir: Path, fmt: str, fail_on: str) -> None:
    """Write a risk report per record from evidence, plus reports/index.md.

    Each report says, claim by claim, holds / fails / known deviation / not
    applicable / unverified (with the reason and measured values), and, risk
    by risk, uncovered / targeted / passing with what is missing.

    \b
    Examples:
      gdn-review report
      gdn-review report --record 52078 --evidence cpu.json --evidence gpu.json
      gdn-review report --format json --out /tmp/reports
      gdn-review report --fail-on fails,uncovered      # for CI
    """
    conditions = _fail_on(fail_on)
    records = _load_records(kb_dir, numbers)
    sys.exit(_write_reports(records, evidence_paths or _report_evidence(DEFAULT_EVIDENCE), out_dir, fmt, conditions))


@main.command(context_settings={"ignore_unknown_options": True})
@kb_option
@click.option("--record", "numbers", type=int, multiple=True, help="Only this PR's record (repeatable).")
@click.option("--generated", "out_dir", default="generated_tests", show_default=True, type=click.Path(path_type=Path), help="Folder of generated modules.")
@click.option("--write", is_flag=True, help="Regenerate stale modules instead of stopping at them.")
@click.option("-k", "keyword", default=None, help="pytest -k expression: run only matching tests (others are reported 'not run').")
@click.option("--evidence", "evidence_path", default=str(DEFAULT_EVIDENCE), show_default=True, type=click.Path(path_type=Path), help="Where the evidence JSON goes.")
@click.option("--reports", "reports_dir", default="reports", show_default=True, type=click.Path(path_type=Path, file_okay=False), help="Where reports go.")
@fail_on_option
@click.argument("pytest_args", nargs=-1, type=click.UNPROCESSED)
def run(kb_dir, numbers, out_dir, write, keyword, evidence_path, reports_dir, fail_on, pytest_args) -> None:
    """Check the generated tests are current, run them on the installed vLLM, write reports.

    Exit 0 when every claim that was checked holds or is a known deviation;
    1 when a claim fails (or whatever --fail-on adds); 2 on bad input.
    Arguments after `--` go to pytest.

    \b
    Examples:
      gdn-review run
      gdn-review run -k pure_spec_decode          # one case; other claims: "unverified: not run"
      gdn-review run --record 52078 --write
      gdn-review run --fail-on fails,unverified,uncovered -- -x
    """
    conditions = _fail_on(fail_on)
    records = _load_records(kb_dir, numbers)
    modules = _current_modules(kb_dir, records, out_dir, write)
    # Evidence left by an earlier run must never be reported as this run's.
    Path(evidence_path).unlink(missing_ok=True)
    command = suite.pytest_command(list(modules.values()), evidence_path, keyword, pytest_args)
    click.echo(f"[1/2] running {len(modules)} generated module(s) on the installed vLLM: {' '.join(command[2:])}")
    code = suite.run_pytest(command)
    if code == suite.NO_TESTS:
        click.echo("pytest collected no test (exit 5): nothing was checked", err=True)
    elif code not in suite.RAN_EXIT_CODES:
        click.echo(f"pytest stopped with exit code {code} (usage or internal error); see its output above", err=True)
        sys.exit(EXIT_BAD_INPUT)
    if not Path(evidence_path).exists():
        raise BadInput(f"pytest wrote no evidence at {evidence_path}")
    click.echo("[2/2] writing risk reports")
    status = _write_reports(records, _report_evidence(evidence_path), reports_dir, "markdown", conditions)
    if code == suite.NO_TESTS:
        status = EXIT_FAILED
    sys.exit(status)


@main.command()
@kb_option
@click.option("--record", "numbers", type=int, multiple=True, help="Only this PR's record (repeatable).")
@click.option("--risk", "risk", default=None, metavar="ID", help="Only the mutants of this risk.")
@click.option("--mutant", "patterns", multiple=True, metavar="ID", help="Only this mutant (repeatable; shell patterns such as 'auto.*').")
@click.option("--list", "list_only", is_flag=True, help="List the mutants and their state; run nothing.")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Mutants run at once.  [default: CPU count]")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True, help="Seconds a mutant may run before its process is killed (status: timeout).")
@click.option("-k", "keyword", default=None, help="pytest -k expression: the tests that may kill mutants (a weaker selection kills less).")
@click.option("--generated", "out_dir", default="generated_tests", show_default=True, type=click.Path(path_type=Path), help="Folder of generated modules.")
@click.option("--write", is_flag=True, help="Regenerate stale modules instead of stopping at them.")
@click.option("--offline", is_flag=True, help="Use only releases already in the cache (automatic mutants need the base and head releases).")
@click.option("--evidence", "evidence_path", default=str(DEFAULT_EVIDENCE), show_default=True, type=click.Path(path_type=Path), help="Where the evidence JSON (tests and mutants) goes.")
@click.option("--reports", "reports_dir", default="reports", show_default=True, type=click.Path(path_type=Path, file_okay=False), help="Where reports go.")
@click.option("--fail-on", "fail_on", default="fails,survived", show_default=True, help="Comma list of what makes the exit code 1: fails, survived, unverified, uncovered.")
def mutate(kb_dir, numbers, risk, patterns, list_only, jobs, timeout, keyword, out_dir, write, offline, evidence_path, reports_dir, fail_on) -> None:
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
    """
    from gdn_review import mutation

    conditions = _fail_on(fail_on)
    records = _load_records(kb_dir, numbers)
    catalogues = []
    errors = []
    for path, record in sorted(records.items(), key=lambda item: item[1].pr.number):
        if is_draft(record):
            click.echo(f"warning: skipped draft {path}: it has open TODOs", err=True)
            continue
        try:
            found = mutation.catalogue_for(path, record, fetch=not offline, say=lambda line: click.echo(line, err=True))
        except RecordErrors as failure:
            errors.extend(failure.errors)
            continue
        except (mutation.MutationError, release_cache.ReleaseError) as error:
            raise BadInput(str(error)) from None
        catalogues.append(mutation.select(found, risk, patterns))
    if errors:
        _print_record_errors(RecordErrors(errors))
        sys.exit(EXIT_BAD_INPUT)
    if (risk or patterns) and not any(c.mutants for c in catalogues):
        raise BadInput(f"no mutant matches --risk {risk or '*'} --mutant {' '.join(patterns) or '*'} (see `gdn-review mutate --list`)")
    for found in catalogues:
        for note in found.notes:
            click.echo(f"note: PR {found.record}: {note}", err=True)
    if list_only:
        for found in catalogues:
            click.echo(f"PR #{found.record} on vLLM {found.release}: {len(found.mutants)} mutants, {len(found.runnable())} to run")
            for mutant in found.mutants:
                state = mutant.status or "to run"
                risks = ",".join(mutant.risks) or "-"
                click.echo(f"  {mutant.id:<58} {mutant.origin:<6} risks {risks:<8} {state}{': ' + mutant.reason if mutant.reason else ''}")
            for hunk in found.gone_hunks:
                click.echo(f"  (no mutant) PR hunk no longer in vLLM {found.release}: {hunk}")
        return
    modules = _current_modules(kb_dir, {p: r for p, r in records.items() if r.pr.number in {c.record for c in catalogues}}, out_dir, write)
    jobs = jobs or os.cpu_count() or 1
    click.echo(f"[1/3] baseline: the generated suite without mutants (vLLM imported once, CPU)", err=True)
    progress = _MutationProgress()
    try:
        entries = mutation.run(catalogues, modules, keyword, jobs, timeout, evidence_path, progress.start, progress.advance)
    except mutation.MutationError as error:
        progress.stop()
        click.echo(str(error), err=True)
        sys.exit(EXIT_FAILED)
    except KeyboardInterrupt:
        progress.stop()
        click.echo(f"interrupted after {progress.done} mutant(s): nothing written, vLLM's files untouched", err=True)
        sys.exit(130)
    progress.stop()
    counts = collections.Counter(e["status"] for e in entries)
    click.echo("[3/3] " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f"; evidence {evidence_path}", err=True)
    sys.exit(_write_reports(records, _report_evidence(evidence_path), reports_dir, "markdown", conditions))


class _MutationProgress:
    """A progress bar with the counts so far (rich); one line per mutant when not on a terminal."""

    def __init__(self):
        self.done = 0
        self.counts: collections.Counter = collections.Counter()
        self.bar = None

    def start(self, total: int) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        click.echo(f"[2/3] {total} mutant(s) to run", err=True)
        console = Console(stderr=True)
        self.bar = Progress(TextColumn("mutants"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), console=console, transient=False)
        self.task = self.bar.add_task("mutants", total=total, counts="")
        self.bar.start()

    def advance(self, entry: dict) -> None:
        self.done += 1
        self.counts[entry["status"]] += 1
        counts = " ".join(f"{s} {n}" for s, n in sorted(self.counts.items()))
        where = ", ".join(sorted(entry["killed_by"])) if entry["killed_by"] else entry["reason"][:80]
        if self.bar is not None:
            self.bar.console.print(f"  {entry['status']:<9} {entry['id']}  ({entry['duration_s']:.1f} s) {where}")
            self.bar.update(self.task, advance=1, counts=counts)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


BENCH_EVIDENCE = Path(".gdn-review") / "bench.json"


def _report_evidence(evidence_path: Path) -> tuple[Path, ...]:
    """This run's evidence, plus the last `gdn-review bench` results when there are some."""
    if BENCH_EVIDENCE.exists() and Path(evidence_path) != BENCH_EVIDENCE:
        click.echo(f"with latency evidence from {BENCH_EVIDENCE} (gdn-review bench)", err=True)
        return (Path(evidence_path), BENCH_EVIDENCE)
    return (Path(evidence_path),)


@main.command(name="bench")
@kb_option
@click.option("--record", "numbers", type=int, multiple=True, help="Only this PR's record (repeatable).  [default: every record with a latency claim]")
@click.option("--releases", "pair", default=None, metavar="BASE,HEAD", help="The two releases to compare.  [default: the latency check's, else the record's base and head]")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@click.option("--case", "case_ids", multiple=True, metavar="ID", help="Only these cases (repeatable; one record).  [default: the latency check's cases]")
@click.option("--max-seconds", type=click.FloatRange(min=1), default=120.0, show_default=True, help="Per record: stop adding rounds after this long, tight or not.")
@click.option("--tolerance", type=click.FloatRange(min=0.0001), default=0.01, show_default=True, help="Stop once every case's 95%% half-interval of the ratio is this narrow.")
@click.option("--evidence", "evidence_path", default=str(BENCH_EVIDENCE), show_default=True, type=click.Path(path_type=Path), help="Where the bench evidence JSON goes (run, mutate and report merge it).")
def bench_command(kb_dir, numbers, pair, device, case_ids, max_seconds, tolerance, evidence_path) -> None:
    """A/B latency of build() between a record's base and head releases, with 95% intervals.

    Each release runs in its own process (its sources from the release cache,
    the installed release as it is); rounds interleave them (A B, B A, ...)
    after a warm-up, until every case's interval is tight or --max-seconds.
    Prints per case the medians and the head/base ratio with its bootstrap 95%
    interval, and the pooled ratio: supported (head faster, interval below 1),
    not distinguishable from noise, or contradicted; the record's latency claim
    takes that verdict in the reports. This is build()'s latency, the mechanism
    of a throughput claim; end-to-end throughput needs a serving benchmark.

    \b
    Examples:
      gdn-review bench                                          # every record with a latency claim
      gdn-review bench --record 52078 --releases 0.28.0,0.33.0 --case pure_spec_decode
      gdn-review bench --record 52078 --device cuda             # on a GPU machine
      gdn-review report --evidence .gdn-review/evidence.json --evidence .gdn-review/bench.json
    """
    from gdn_review import bench as benching
    from gdn_review.generate import module_context

    records = _load_records(kb_dir, numbers)
    chosen = []
    for path, record in sorted(records.items(), key=lambda item: item[1].pr.number):
        latency = next((c.check for c in record.claims if c.check.kind == "latency"), None)
        if latency is None and not numbers:
            continue
        chosen.append((path, record, latency))
    if not chosen:
        raise BadInput(f"no record in {kb_dir} has a latency claim; name one with --record N")
    if case_ids and len(chosen) > 1:
        raise BadInput("--case needs a single --record")
    results = {}
    for path, record, latency in chosen:
        base = (latency.base if latency else None) or record.target.base_release
        head = (latency.head if latency else None) or record.target.head_release
        if pair:
            try:
                base, head = (part.strip() for part in pair.split(","))
            except ValueError:
                raise BadInput(f"--releases takes BASE,HEAD (two release numbers), got {pair!r}") from None
        if not base or not head:
            raise BadInput(f"{path}: the record has no base and head release; give --releases BASE,HEAD")
        cases = module_context(record, path.name)["cases"]
        wanted = list(case_ids) or (list(latency.cases) if latency is not None else list(cases))
        unknown = [c for c in wanted if c not in cases]
        if unknown:
            raise BadInput(f"no case {', '.join(unknown)} in {path} (cases: {', '.join(cases)})")
        click.echo(f"PR #{record.pr.number}: timing build() on {len(wanted)} case(s): vLLM {base} (base) vs {head} (head), {device}", err=True)
        try:
            result = benching.bench(
                {c: cases[c] for c in wanted}, base, head, device=device, max_seconds=max_seconds, tolerance=tolerance,
                say=lambda line: click.echo(f"  {line}", err=True),
            )
        except (benching.BenchError, release_cache.ReleaseError) as error:
            raise BadInput(str(error)) from None
        click.echo(f"PR #{record.pr.number}  {'case':<28} {base + ' µs':>12} {head + ' µs':>12} {'head/base':>10}  95% interval")
        for row in result["cases"]:
            low, high = row["ci95"]
            click.echo(f"         {row['case']:<28} {row['base_median_us']:>12.1f} {row['head_median_us']:>12.1f} {row['ratio']:>10.3f}  [{low:.3f}, {high:.3f}]")
        low, high = result["pooled"]["ci95"]
        click.echo(f"         {'pooled (geometric mean)':<28} {'':>12} {'':>12} {result['pooled']['ratio']:>10.3f}  [{low:.3f}, {high:.3f}]")
        click.echo(f"         verdict: {result['verdict']} ({result['rounds']} rounds, {result['seconds']} s, stopped: {result['stopped']})")
        results[record.pr.number] = result
    benching.write_evidence(evidence_path, results)
    click.echo(f"evidence {evidence_path} (reports of `gdn-review run`/`mutate` include it)", err=True)


@main.command()
def schema() -> None:
    """Print the JSON Schema of a record (for editors that validate YAML).

    \b
    Example:
      gdn-review schema > record.schema.json
      # then, in a record: # yaml-language-server: $schema=../record.schema.json
    """
    click.echo(json.dumps(record_schema(), indent=2, sort_keys=True))


@main.command(name="import")
@click.argument("report_path", metavar="REPORT", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", "out_path", default=None, type=click.Path(path_type=Path), help="Where the draft goes: a file named <number>.yaml or a folder.  [default: kb/<number>.yaml]")
@click.option("--force", is_flag=True, help="Replace the file if it exists.")
def import_command(report_path: Path, out_path: Path | None, force: bool) -> None:
    """Turn a review report (markdown) into a draft record.

    Reads the PR's metadata, summary, motivation, implementation, key files,
    code snippets, discussion, risks and related PRs. Each sentence that
    states a checkable effect becomes a claim with a TODO check; the target
    releases are left open. Complete the draft by hand, then validate it.

    \b
    Examples:
      gdn-review import report.md                     # -> kb/<number>.yaml
      gdn-review import report.md --out /tmp/drafts   # -> /tmp/drafts/<number>.yaml
      gdn-review import report.md --force             # replace an existing record
      gdn-review validate                             # lists the draft's open TODOs
    """
    from gdn_review.importers.review_report import ReportImportError, write_draft
    from gdn_review.kb import load_record, open_items

    try:
        path = write_draft(report_path, out_path, force)
    except ReportImportError as error:
        raise BadInput(str(error)) from None
    todos = len(open_items(load_record(path)))
    click.echo(f"wrote {path} (draft: {todos} open TODOs; run gdn-review validate)")


@main.command(name="export")
@kb_option
@click.option("--record", "number", required=True, type=int, help="PR number of the record to export.")
@click.option("--out", "out_dir", default=".", show_default=True, type=click.Path(file_okay=False, path_type=Path), help="Folder the module is written to.")
@click.option("--vllm-release", "release", default=None, metavar="X.Y.Z", help="Release whose known deviations become strict xfails.  [default: the installed vLLM]")
def export_command(kb_dir: Path, number: int, out_dir: Path, release: str | None) -> None:
    """Export a record's checks as one standalone test module for vLLM's tests/.

    The module (test_gdn_pr_N.py) imports only the standard library, pytest,
    torch and vLLM, so it runs in vLLM's own CI without gdn-review and without
    network. Claims and cases outside the target release are left out; known
    deviations of that release are strict xfails.

    \b
    Examples:
      gdn-review export --record 52078 --out /tmp/x
      cd /tmp/x && python -m pytest -q test_gdn_pr_52078.py
      gdn-review export --record 52078 --out ~/vllm/tests/v1/attention --vllm-release 0.33.0
    """
    from gdn_review.export import ExportError, export

    try:
        path = export(kb_dir, number, out_dir, release)
    except RecordErrors as failure:
        _print_record_errors(failure)
        sys.exit(EXIT_BAD_INPUT)
    except ExportError as error:
        raise BadInput(str(error)) from None
    click.echo(f"wrote {path} (run: python -m pytest {path})")


@main.command(name="bundle")
@kb_option
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path), help="Folder to write (must not exist or be empty, unless --force).")
@click.option("--record", "numbers", multiple=True, type=int, help="A record to carry (repeatable).  [default: every record that is not a draft]")
@click.option("--vllm", "versions", multiple=True, metavar="X.Y.Z", help="A release to carry (repeatable).  [default: the installed one and the base and head of every latency claim]")
@click.option("--python", "python", default=None, metavar="X.Y", help="Python of the machine that runs it (picks the wheels).  [default: 3.12, the GPU machine's; this Python's with --dry-run]")
@click.option("--max-mib", default=60, show_default=True, type=click.IntRange(min=1), help="Refuse to write a bundle bigger than this.")
@click.option("--force", is_flag=True, help="Replace --out if it exists.")
@click.option("--dry-run", is_flag=True, help="Then run it here on CPU, in a venv that has only PyTorch and the packages a GPU machine has, with no network: proves the bundle complete.")
@click.option("--work", "work_dir", default=None, type=click.Path(file_okay=False, path_type=Path), help="Where the dry run's environment and evidence go.  [default: a temp folder, kept]")
@click.option("--dry-run-python", "source_python", default=None, metavar="PYTHON", help="The dry run's venv links this interpreter's PyTorch and packages (e.g. a venv with the GPU machine's torch 2.11).  [default: this one]")
def bundle_command(kb_dir, out_dir, numbers, versions, python, max_mib, force, dry_run, work_dir, source_python) -> None:
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
    import tempfile

    from gdn_review import bundle as bundling

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if source_python and not dry_run:
        raise click.UsageError("--dry-run-python goes with --dry-run")
    python = python or (here if dry_run else bundling.DEFAULT_PYTHON)
    if dry_run and python != here:
        raise click.UsageError(f"--dry-run runs the bundle with this Python ({here}): leave out --python or give {here}")
    records = _load_records(kb_dir, numbers)
    records = {path: record for path, record in records.items() if not is_draft(record)}
    if not records:
        raise BadInput(f"no record in {kb_dir} that is not a draft")
    say = lambda line: click.echo(line, err=True)  # noqa: E731
    try:
        chosen = list(versions) or bundling.default_versions(records.values())
        bundling.write_bundle(out_dir, records, chosen, python=python, max_bytes=max_mib << 20, force=force, say=say)
    except (bundling.BundleError, release_cache.ReleaseError) as error:
        raise BadInput(str(error)) from None
    if not dry_run:
        click.echo(f"wrote {out_dir}; on the GPU machine: {out_dir}/run.sh OUT")
        return
    work = work_dir or Path(tempfile.mkdtemp(prefix="gdn-bundle-dry-run-"))
    try:
        code, out, offline = bundling.dry_run(out_dir, work, source_python=source_python, say=say)
    except bundling.BundleError as error:
        raise BadInput(str(error)) from None
    click.echo(f"dry run: run.sh exit {code}, {'no network' if offline else 'network not cut'}; evidence in {out}")
    sys.exit(EXIT_OK if code == 0 else EXIT_FAILED)


MATRIX_FAIL_ON = ("fails", "unverified", "uncovered", "drift")


@main.command(name="matrix")
@kb_option
@click.option("--record", "number", required=True, type=int, help="PR number of the record.")
@click.option("--vllm", "versions", multiple=True, metavar="X.Y.Z", help="A release to run (repeatable).  [default: the record's base and head release and every release after it up to the installed one]")
@click.option("--jobs", type=click.IntRange(min=1), default=None, help="Releases run at once.  [default: CPUs, at most one per 2 GiB of free memory]")
@click.option("-k", "keyword", default=None, help="pytest -k expression (others are reported 'not run').")
@click.option("--generated", "out_dir", default="generated_tests", show_default=True, type=click.Path(path_type=Path), help="Folder of generated modules.")
@click.option("--write", is_flag=True, help="Regenerate stale modules instead of stopping at them.")
@click.option("--work", "work_dir", default=None, type=click.Path(path_type=Path, file_okay=False), help="Where evidence, snapshots and logs per release go.  [default: .gdn-review/matrix-N]")
@click.option("--reports", "reports_dir", default="reports/matrix", show_default=True, type=click.Path(path_type=Path, file_okay=False), help="Where the report goes.")
@click.option("--fail-on", "fail_on", default="drift", show_default=True, help="Comma list of what makes the exit code 1: fails (on the newest release), unverified, uncovered, drift (unexplained).")
def matrix_command(kb_dir, number, versions, jobs, keyword, out_dir, write, work_dir, reports_dir, fail_on) -> None:
    """Run a record's generated tests on the release without the PR, the release with it, and every later one.

    Each release runs in its own subprocess with that release's Python sources
    (from the release cache, fetched once) first on PYTHONPATH over the
    installed torch; releases run in parallel. On the base release every claim
    runs whatever its range, so the report says per claim whether the check
    discriminates (fails before the PR, holds after it). Every case's full
    metadata is compared between consecutive releases; each difference is
    attributed to a PR (target.changes, related[].changes) or shown as
    unexplained drift.

    Exit 0 ok, 1 what --fail-on names, 2 bad input (unknown record or release).

    \b
    Examples:
      gdn-review matrix --record 52078
      gdn-review matrix --record 56531 --vllm 0.31.0 --vllm 0.32.0
      gdn-review matrix --record 52078 --jobs 1 --fail-on drift,fails
    """
    from gdn_review import matrix as matrices

    chosen = {item.strip() for item in fail_on.split(",") if item.strip()}
    if chosen - set(MATRIX_FAIL_ON):
        raise click.BadParameter(f"unknown {', '.join(sorted(chosen - set(MATRIX_FAIL_ON)))}; choose from {', '.join(MATRIX_FAIL_ON)}", param_hint="--fail-on")
    all_records = _load_records(kb_dir, ())
    records = _load_records(kb_dir, (number,))
    (record_path, record), = records.items()
    if is_draft(record):
        raise BadInput(f"{record_path} is a draft (open TODOs): nothing to run")
    modules = _current_modules(kb_dir, records, out_dir, write)
    work = work_dir or Path(".gdn-review") / f"matrix-{number}"
    try:
        data = matrices.run_matrix(record, record_path, modules[number], work, list(versions) or None, jobs, keyword, say=click.echo)
        data = matrices.load_matrix(work)
        known = {r.pr.number for r in all_records.values()}
        report_data = reporting.matrix_report(record, data, known)
    except (matrices.MatrixError, release_cache.ReleaseError, reporting.ReportError) as error:
        raise BadInput(str(error)) from None
    written, _ = reporting.write_reports(records, None, reports_dir, "markdown", reports=[report_data])
    for row in report_data["matrix"]["rows"]:
        cells = ", ".join(f"{c['version']} {c['verdict']}" + (f" ({c['measure']})" if c["measure"] else "") for c in row["cells"])
        click.echo(f"{row['id']}: {row['discrimination']}: {cells}")
        for line in row["trajectories"]:
            click.echo(f"    {line}")
    drift = report_data["matrix"]["drift"]
    click.echo(f"drift: {len(drift['rows'])} changed case(s) between releases, {len(drift['unexplained'])} unexplained")
    for path in written:
        click.echo(f"report   {path}")
    tripped = reporting.matrix_failures(report_data, chosen)
    for line in tripped:
        click.echo(f"fail-on: {line}", err=True)
    sys.exit(EXIT_FAILED if tripped else EXIT_OK)


@main.command(name="snapshot")
@kb_option
@click.option("--record", "number", required=True, type=int, help="PR number of the record.")
@click.option("--release", "versions", multiple=True, metavar="X.Y.Z", help="Release to snapshot (repeatable; from the release cache unless installed).  [default: the installed vLLM]")
@click.option("--case", "case_id", default=None, metavar="ID", help="With --as-expect: the case to print.")
@click.option("--as-expect", is_flag=True, help="Print the case's `expect` block (YAML) instead of storing the snapshot.")
def snapshot_command(kb_dir: Path, number: int, versions, case_id: str | None, as_expect: bool) -> None:
    """Store the full metadata build() returns for every case of a record, per release.

    The snapshot of release V goes to kb/snapshots/N/V.json (the release, the
    device and this command are named in it). Generated tests compare the
    loaded release's build() with it field by field; a release without a stored
    snapshot is skipped with this command as the hint. Each release is taken in
    its own interpreter (its sources first on PYTHONPATH).

    \b
    Examples:
      gdn-review snapshot --record 52078                       # the installed release
      gdn-review snapshot --record 52078 --release 0.31.0 --release 0.32.0
      gdn-review snapshot --record 56531 --case all_zero_drafts --release 0.32.0 --as-expect
    """
    import tempfile
    import typing

    import yaml

    from gdn_review import snapshot as snapshots
    from gdn_review.files import atomic_write
    from gdn_review.kb.models import ExpectField

    records = _load_records(kb_dir, (number,))
    (record_path, record), = records.items()
    if as_expect and (not case_id or len(versions) > 1):
        raise click.UsageError("--as-expect needs --case ID and at most one --release")
    if case_id and case_id not in {c.id for c in record.cases}:
        raise BadInput(f"{record_path}: no case {case_id!r} (known: {', '.join(sorted(c.id for c in record.cases))})")
    try:
        installed, _ = release_cache.loaded()
        chosen = list(versions) or [installed]
        paths = {}
        for version in chosen:
            paths[version] = None if release_cache.checked_version(version) == installed else release_cache.ensure(version, say=lambda m: click.echo(m, err=True)).path
    except release_cache.ReleaseError as error:
        raise BadInput(str(error)) from None
    for version, path in paths.items():
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "snapshot.json"
            done = snapshots.take_in_subprocess(record_path, path, out)
            data = snapshots.load(out) if done.returncode == 0 else None
            if data is None:
                click.echo(done.stderr[-3000:], err=True)
                raise BadInput(f"vLLM {version}: the snapshot could not be taken (exit code {done.returncode})")
        if as_expect:
            case = data["cases"].get(case_id)
            if case is None:
                raise BadInput(f"case {case_id!r} does not apply to vLLM {version} (its releases range)")
            expect = {field: case[field] for field in typing.get_args(ExpectField) if field in case}
            click.echo(f"# expect of case {case_id}, measured on vLLM {version} ({data['device']}); read it through before pasting")
            click.echo(yaml.safe_dump({"expect": expect}, sort_keys=False, default_flow_style=None, width=120), nl=False)
            continue
        target = snapshots.snapshot_path(kb_dir, number, data["release"])
        atomic_write(target, snapshots.dumps(data))
        click.echo(f"wrote {target} ({len(data['cases'])} cases, vLLM {data['release']}, {data['device']})")


if __name__ == "__main__":
    main()
