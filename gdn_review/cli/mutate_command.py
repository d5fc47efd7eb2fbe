"""``gdn-review mutate``: plant each risk's bug in vLLM's real builder, check a test fails.

The command parses its options, calls the mutation stage (a record's mutants, or with
``--whole-file`` the score of the whole target file), prints and picks the exit code;
``cli/main.py`` adds it to the group.
"""

from __future__ import annotations

import collections
import os
import sys

import click

from gdn_review.cli.support import (
    EXIT_FAILED,
    EXIT_OK,
    evidence_option,
    exit_codes,
    fail_on_option,
    generated_option,
    interruptible,
    jobs_option,
    kb_option,
    keyword_option,
    offline_option,
    records_option,
    release_option,
    reports_option,
    say,
    timeout_option,
    write_option,
    write_reports,
)
from gdn_review.common import fail_conditions
from gdn_review.kb import is_draft
from gdn_review.run import evidence_file
from gdn_review.run.selection import SelectionError, current_modules, load_records, pick

# The baseline could not run (or raised an error in the check): no verdict on vLLM, not a
# claim that broke (common.fail_conditions.exit_code's 3).
EXIT_NO_VERDICT = 3


@click.command()
@kb_option
@records_option()
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
@jobs_option("Mutants run at once.  [default: CPU count]")
@timeout_option(60.0, "Seconds a mutant may run before its process is killed (status: timeout).")
@keyword_option(
    "pytest -k expression: the tests that may kill mutants (a weaker selection kills less)."
)
@generated_option()
@write_option
@offline_option(
    "Use only releases already in the cache (automatic mutants need the base and head releases)."
)
@evidence_option("Where the evidence JSON (tests and mutants) goes.")
@reports_option()
@fail_on_option(fail_conditions.REPORT, "fails,survived,error")
@click.option(
    "--whole-file",
    is_flag=True,
    help="Score the whole target file against every record's tests "
    "(reports/guard.md + .json), not a record's PR hunks.",
)
@release_option(
    "--release",
    help_text="With --whole-file: score this release from the release cache "
    "(fetched once) instead of the installed one.",
)
@click.option(
    "--file",
    "target_file",
    default=None,
    metavar="PATH",
    help="With --whole-file: score this file of the GDN builder family (a subclass's, e.g. "
    "vllm/models/kimi_k3/amd/kda_metadata.py) under the records whose cases name its "
    "builder.  [default: vllm/v1/attention/backends/gdn_attn.py]",
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
    keys,
    risk,
    patterns,
    list_only,
    jobs,
    timeout,
    keyword,
    generated_dir,
    write,
    offline,
    evidence_path,
    reports_dir,
    fail_on,
    whole_file,
    release,
    target_file,
    min_score,
) -> None:
    """Plant each risk's bug in vLLM's real builder and check a generated test fails.

    Mutants come from the record (exact find/replace edits under each risk) and
    from the PR's diff (standard operators on the lines the PR added, mapped by
    content onto the loaded release; the base and head releases are fetched once
    into the release cache). vLLM is imported once; each mutant runs in a forked
    child on CPU, its source compiled in memory: vLLM's files are never written.
    The unmutated suite runs first and must pass (where its tests could not
    run, or raised an error in the check, no mutant runs and the exit code is
    3: no verdict); its evidence, with every mutant's result, goes to
    --evidence, and the reports show the kill matrix.
    The baseline is traced per case: for each line the PR added or changed the
    command names the cases that execute it, and each line no case reaches with
    the case that came closest (as `gdn-review run` does).

    \b
    Examples:
      gdn-review mutate --list                     # every mutant, with its id and state
      gdn-review mutate --record 52078             # run them all; reports/52078.md
      gdn-review mutate --risk R1 --jobs 2
      gdn-review mutate --mutant 'auto.or_to_and.*'
      gdn-review mutate -k C1 --fail-on survived   # how much the C1 tests alone catch
      gdn-review mutate --whole-file               # the whole file: reports/guard.md
      gdn-review mutate --whole-file --release 0.31.0 --jobs 2
      gdn-review mutate --whole-file --file vllm/models/kimi_k3/amd/kda_metadata.py
    """
    jobs = jobs or os.cpu_count() or 1
    if whole_file:
        if risk or keyword or list_only:
            raise click.UsageError(
                "--whole-file runs every record's tests against every mutant: "
                "--risk, -k and --list do not apply"
            )
        from gdn_review.mutation.whole_file import Options

        options = Options(
            jobs=jobs,
            timeout=timeout,
            patterns=patterns,
            kb_dir=kb_dir,
            reports_dir=reports_dir,
            release=release,
            fetch=not offline,
            file=target_file,
        )
        sys.exit(_whole_file(options, keys, generated_dir, write, min_score))
    if release or target_file:
        raise click.UsageError(
            "--release and --file apply to --whole-file (a record's mutants run on "
            "its target file on the installed release; see `gdn-review matrix`)"
        )

    from gdn_review import mutation

    every = load_records(kb_dir)
    records = pick(every, kb_dir, keys)
    if list_only:
        listed = mutation.catalogues(records, risk, patterns, fetch=not offline, say=say)
        click.echo("\n".join(mutation.listing_lines(listed)))
        return
    # The PRs' older releases are fetched while the baseline runs (it needs none of them), and the
    # catalogues made from them once it has; a selection is input, checked before the baseline.
    fetching = mutation.start_fetching(records, fetch=not offline, say=say)
    try:
        catalogues = _catalogues(records, risk, patterns, offline, fetching, kb_dir)
        ordered = sorted(records.items(), key=lambda item: item[1].sort_key)
        mutated = {p: r for p, r in ordered if not is_draft(r)}
        modules = current_modules(kb_dir, mutated, generated_dir, write, say, every)
        for line in _run_mutants(
            catalogues, modules, mutated, keyword, (jobs, timeout), evidence_path, offline
        ):
            click.echo(line)
    finally:
        fetching.close(wait=False)
    paths = evidence_file.with_bench(evidence_path, say)
    sys.exit(write_reports(records, paths, reports_dir, fail_on))


def _catalogues(records, risk, patterns, offline, fetching, kb_dir):
    """What makes the records' mutants, each with its guard notes (they name survivors
    equivalent or unreachable here), once the baseline has run; a selection (``risk``,
    ``patterns``) is input, so its mutants are made now, before the baseline."""
    from gdn_review import mutation
    from gdn_review.mutation.family import notes_path
    from gdn_review.mutation.guard_notes import load_notes

    def made() -> list:
        try:
            found = mutation.catalogues(records, risk, patterns, not offline, say, fetching)
        except mutation.MutationError as error:  # a selection or the loaded release: input
            raise SelectionError(str(error)) from None
        for each in found:
            each.guard_notes = load_notes(notes_path(kb_dir, each.target_file))
        return found

    if not (risk or patterns):
        return made
    selected = made()
    return lambda: selected


def _run_mutants(
    catalogues, modules, mutated, keyword, limits, evidence_path, offline
) -> list[str]:
    """``mutate``'s run of the ``mutated`` records' mutants into ``evidence_path`` (exit 1 when the
    baseline fails, 3 when it measured nothing); the lines of the reach of their own lines, said
    after the mutants."""
    from gdn_review import mutation
    from gdn_review.cli.progress import MutationProgress
    from gdn_review.mutation import own_reach

    say("[1/3] baseline: the generated suite without mutants (vLLM imported once, CPU)")
    progress = MutationProgress(say)
    reached: list[str] = []

    def judge_reach(trace, staged) -> None:
        reached.extend(
            own_reach.add_to_evidence(staged, mutated, say, trace=trace, fetch=not offline)
        )

    try:
        entries = mutation.mutate(
            catalogues,
            modules,
            {record.target.file for record in mutated.values()},
            keyword,
            limits,
            evidence_path,
            progress,
            on_baseline=judge_reach,
        )
    except mutation.MutationError as error:  # the baseline failed: a check, not the input
        progress.stop()
        say(str(error))
        sys.exit(EXIT_NO_VERDICT if error.no_verdict else EXIT_FAILED)
    finally:
        progress.stop()
    counts = collections.Counter(e["status"] for e in entries)
    say(
        "[3/3] "
        + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no mutant to run")
        + f"; evidence {evidence_path}"
    )
    return reached


def _whole_file(options, keys, generated_dir, write, min_score) -> int:
    """``mutate --whole-file``: the guard score of the loaded (or ``options.release``'s) target
    file; the exit code."""
    from gdn_review.cli.progress import MutationProgress
    from gdn_review.mutation import guard, whole_file

    every = load_records(options.kb_dir)
    records = pick(every, options.kb_dir, keys)
    modules = current_modules(options.kb_dir, records, generated_dir, write, say, every)
    progress = MutationProgress(say)
    try:
        scored = whole_file.score_and_write(records, modules, options, progress, say)
    except whole_file.FamilyError as error:  # --file names no family file, or no case covers it
        raise click.BadParameter(str(error), param_hint="--file") from None
    except guard.GuardError as error:  # a failed baseline or another tracer: a check, not input
        progress.stop()
        say(str(error))
        return EXIT_NO_VERDICT if error.no_verdict else EXIT_FAILED
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
    for mutant in scored.escaped():  # named with its diff: what a reviewer needs to act on
        say(
            f"{mutant['status']}: {mutant['id']}, line {mutant.get('line')}, "
            f"{mutant.get('function')}\n{mutant.get('diff', '').rstrip()}"
        )
    if scored.below(min_score):
        say(f"the score is below --min-score {min_score:g}%")
        return EXIT_FAILED
    return EXIT_OK
