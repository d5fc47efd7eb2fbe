"""``gdn-review release-step``: a new vLLM release checked against the KB in one go.

``release_step()`` is a pipeline of named steps, each a plain function: ``releases`` (which step:
``--to`` the newest release on the package index, ``--from`` the newest release the KB has
snapshots of before it), ``fetch`` (both into the release cache; the step's diff of GDN's file and
its family's files, ``step_hunks``), ``run_matrix`` (every record on both releases, the history's
section of the new release, from the matrix stage), ``review_files`` (each changed file's diff
reviewed onto the older release as ``review`` reviews a PR: claims before and with it, what moved,
the mutants of its new lines) and ``attribute`` (each hunk to the ``kb/history/changes.yaml``
entries that name it, drafts for the rest). ``findings`` says what ``--fail-on`` can name;
``step_report`` renders the result. Nothing here imports vLLM: the stages it calls run it in
their own processes.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Callable

from gdn_review.common import published, release_cache, release_trees
from gdn_review.common.fail_conditions import ERROR
from gdn_review.common.release import Release, ReleaseError
from gdn_review.common.vocabulary import SURVIVORS, MutantStatus
from gdn_review.review import step_hunks

STEP_FORMAT = 1


class StepError(Exception):
    """The step cannot be chosen or read (bad input: exit 2)."""


@dataclasses.dataclass(frozen=True)
class StepOptions:
    """What a release step checks (``gdn-review release-step --help`` says each option)."""

    old: str | None = None  # --from
    new: str | None = None  # --to
    keys: tuple = ()  # the records (empty: every one that is not a draft)
    jobs: int | None = None
    max_mutants: int = 1000
    timeout: float = 300.0
    generated_dir: Path = Path("generated_tests")
    work_dir: Path | None = None
    offline: bool = False


def newest_covered(kb_dir: Path, before: str) -> str | None:
    """The newest release before ``before`` that the KB covers (``kb.coverage``: every record
    that applies to it has its snapshot)."""
    from gdn_review.kb import coverage

    found = [v for v in coverage.covered(kb_dir) if v.version < Release(before).version]
    return str(found[-1]) if found else None


def releases(kb_dir: Path, options: StepOptions, say: Callable[[str], None]) -> tuple[str, str]:
    """(--from, --to): UnknownRelease for a release the package index does not have; StepError
    where no older release can be chosen."""
    new = options.new
    if new is not None and not options.offline:
        try:
            served = published.published_releases()
        except ReleaseError as error:  # the index cannot be read: the fetch will say
            say(f"{error}; --to {new} is checked when it is fetched")
        else:
            if Release(new) not in served:
                raise release_cache.UnknownRelease(
                    f"--to {new}: the package index has no vLLM {new} (newest: "
                    f"{served[-1] if served else 'none'})"
                )
    if new is None:
        found = published.default_newest(say, options.offline)
        if found is None:
            raise StepError("no vLLM release on the index or at hand: say one with --to")
        new = str(found)
    old = options.old or newest_covered(kb_dir, new)
    if old is None:
        raise StepError(
            f"{kb_dir}/snapshots: no release before {new} has snapshots: say one with --from"
        )
    if Release(old).version >= Release(new).version:
        raise StepError(f"--from {old} is not before --to {new}")
    return str(Release(old)), str(Release(new))


def plan(kb_dir: Path, options: StepOptions, say: Callable[[str], None]) -> dict:
    """Whether a step is due (runs nothing): ``to`` (the newest on the index) is newer than every
    release the KB has snapshots of; ``from`` as the step would choose it."""
    old, new = releases(kb_dir, options, say)
    newest = newest_covered(kb_dir, "99999.0.0")
    due = newest is None or Release(new).version > Release(newest).version
    return {"from": old, "to": new, "covered": newest, "due": due}


def fetch(
    old: str, new: str, options: StepOptions, say: Callable
) -> tuple[list[str], str, Callable]:
    """Both releases into the release cache; the family's files, the step's diff of them, and a
    reader of the new release's files."""
    entries = [release_trees.entry(v, fetch=not options.offline, say=say) for v in (old, new)]

    def reader(entry):
        def read(relative: str) -> str | None:
            path = entry.path / relative
            return path.read_text(encoding="utf-8") if path.is_file() else None

        return read

    paths = step_hunks.family_paths([e.path for e in entries])
    return (
        paths,
        step_hunks.step_diff(paths, reader(entries[0]), reader(entries[1])),
        reader(entries[1]),
    )


def run_matrix(
    kb_dir: Path, old: str, new: str, options: StepOptions, out: Path, say, every: dict
) -> dict:
    """Every record (or ``keys``) on both releases; each record's matrix report under
    ``out/matrix``, the history's section of ``new`` as ``out/history.md``; their data."""
    from gdn_review.kb.changes import load_changes
    from gdn_review.matrix import drift, history, matrix_command, matrix_report
    from gdn_review.matrix.history_sources import load_bench, load_matrices
    from gdn_review.matrix.matrix_files import matrix_folder_name
    from gdn_review.report import report as reporting
    from gdn_review.run import evidence_file

    root = (options.work_dir or Path(".gdn-review") / "release-step" / f"{old}-{new}") / "matrix"
    # One record's --work is its own folder (run_records); several records' a folder of them.
    keys = set(options.keys)
    single = len(keys) == 1
    matrix_options = matrix_command.MatrixOptions(
        keys=options.keys,
        since=old,
        versions=(old, new),
        jobs=options.jobs,
        generated_dir=options.generated_dir,
        work_dir=root / matrix_folder_name(next(iter(keys))) if single else root,
    )
    runs = matrix_command.run_records(kb_dir, matrix_options, say=say, every=every)
    reports, _, _ = matrix_command.write_reports(runs, out / "matrix", None)
    records = {job.record_path: job.record for job in runs.work}  # the records this step ran
    page = history.history_data(
        records,
        load_matrices(records, root),
        load_bench(evidence_file.BENCH_PATH),
        since=old,
        changes=load_changes(kb_dir),
    )
    page["per_release"] = [e for e in page["per_release"] if e["version"] == new]
    page["unexplained"] = [r for e in page["per_release"] for r in e["unexplained"]]
    page["matrix_link"] = "matrix/"
    reporting.write_history(page, out / "history.md")
    could_not_run = {
        version: why
        for data in reports
        for version, why in (data["matrix"].get("could_not_run") or {}).items()
    }
    unexplained = sorted(
        {r["record"] for r in page["unexplained"] if r["record"] is not None}, key=str
    )
    record_drafts = [
        text
        for key in unexplained
        for text in drift.drafts(kb_dir, [key], root / matrix_folder_name(key))
    ]
    return {
        "reports": reports,
        "history": page,
        "record_drafts": record_drafts,
        "findings": matrix_report.findings(reports, page),
        "could_not_run": could_not_run,
    }


def unreached_mutants(diff: str, source: str, path: str) -> list[dict]:
    """The automatic mutants of a file's new lines where no record's tests run the file, each
    ``not reached`` (named, never silently left out)."""
    from gdn_review.common import unified_diff
    from gdn_review.mutation import catalogue, operators

    added = set().union(*(f.added_lines() for f in unified_diff.read_diff(diff, path)))
    found = sorted(operators.automatic_mutants(source, added), key=lambda m: (m.line, m.id))
    return [
        {
            "id": m.id,
            "operator": m.operator,
            "line": m.line,
            "diff": catalogue.edit_diff(source, m.source, path),
            "status": MutantStatus.NOT_REACHED,
            "killed_by": {},
            "reason": "no record in the step runs this file's code (no case names its builder)",
            "duration_s": None,
        }
        for m in found
    ]


def review_files(
    kb_dir: Path,
    step: tuple[str, str],
    diff: str,
    options: StepOptions,
    out: Path,
    say,
    read_new: Callable[[str], str | None],
    every: dict,
) -> list[dict]:
    """Each changed file's part of the step's diff reviewed onto its older release (landing in
    the newer: ``step``);
    its review's markdown and JSON under ``out/review``; per file the review's data, or why it
    could not run."""
    from gdn_review.review import orchestrate, render
    from gdn_review.review import review_files as files
    from gdn_review.review.review_files import ReviewCouldNotRun, ReviewError

    old, new = step
    folder = out / "review"
    folder.mkdir(parents=True, exist_ok=True)
    done = []
    for path, part in step_hunks.split_by_file(diff).items():
        name = Path(path).with_suffix("").as_posix().removeprefix("vllm/").replace("/", ".")
        diff_path = folder / f"{name}.diff"
        diff_path.write_text(part, encoding="utf-8")
        review_options = orchestrate.ReviewOptions(
            keys=options.keys,
            onto=old,
            lands_in=new,
            generated_dir=options.generated_dir,
            timeout=options.timeout,
            max_mutants=options.max_mutants,
            jobs=2,
        )
        say(f"release step: reviewing {path} ({old} → {new}) against the KB")
        try:
            data = orchestrate.review(diff_path, kb_dir, review_options, say=say, every=every)
        except ReviewCouldNotRun as error:
            done.append({"file": path, "could_not_run": str(error)})
            continue
        except ReviewError as error:  # the new file does not import over the older release
            done.append({"file": path, "not_reviewed": str(error)})
            continue
        data["name"] = name
        if not data["records"]:  # no record's tests run this file: its mutants are reached by none
            data["mutants"] = unreached_mutants(part, read_new(path) or "", path)
        name_by_guard_notes(data["mutants"], kb_dir, path)
        files.write(data, folder, render.markdown(data))
        done.append({"file": path, "review": data, "report": f"review/{name}.md"})
    return done


def name_by_guard_notes(mutants: list[dict], kb_dir: Path, path: str) -> None:
    """A surviving mutant the file's guard notes (kb/guard/) name is what they judge it, with
    their reason, as the whole-file guard counts it (``guard_notes.judged_by_notes``):
    ``equivalent`` or ``unreachable here``; never a survivor of the step."""
    from gdn_review.mutation.family import notes_path
    from gdn_review.mutation.guard_notes import judged_by_notes, load_notes

    notes = load_notes(notes_path(kb_dir, path))
    for mutant in mutants:
        judged = mutant["status"] in SURVIVORS and judged_by_notes(mutant["id"], set(), notes, {})
        if judged:
            mutant["status"], mutant["guard_note"] = judged


def unguarded(reviews: list[dict]) -> list[dict]:
    """The new lines no record guards: each surviving (or unreached) mutant of a step's file, with
    its line and edit."""
    return [
        {"file": r["file"], **{k: m[k] for k in ("id", "line", "status", "diff")}}
        for r in reviews
        if "review" in r
        for m in r["review"]["mutants"]
        if m["status"] in SURVIVORS
    ]


def findings(data: dict) -> list[tuple[str, str]]:
    """What the step found that --fail-on can name, a ``(condition, what)`` pair each."""
    from gdn_review.review import render

    found = list(data["matrix"]["findings"])
    for entry in data["reviews"]:
        why = entry.get("could_not_run") or entry.get("not_reviewed")
        if why:
            found.append((ERROR, f"{entry['file']}: not reviewed: {why}"))
            continue
        found += [(c, f"{entry['file']}: {what}") for c, what in render.findings(entry["review"])]
    for row in data["hunks"]:
        if not row["by"]:
            found.append(
                (
                    "unexplained",
                    f"{row['file']} hunk {row['number']} ({row['header']}): no changes.yaml "
                    f"entry of {data['to']} names it (hunks:)",
                )
            )
    return found


def not_run(data: dict) -> list[str]:
    """What of the step could not run (no verdict on it): the matrix's release that could not, or
    each changed file whose review could not."""
    if data["could_not_run"]:
        return [data["could_not_run"]]
    return [
        f"the review of {entry['file']}: {entry['could_not_run']}"
        for entry in data["reviews"]
        if entry.get("could_not_run")
    ]


def exit_code(data: dict, tripped: int) -> int:
    """The step's exit code from what --fail-on tripped (``tripped``: 0, 1 or 3): 3 where the
    matrix could not run a release (nothing is reviewed then), or where a file's review could
    not run and nothing measured tripped, whatever --fail-on names: no verdict on it."""
    if data["could_not_run"] or (tripped == 0 and not_run(data)):
        return 3
    return tripped


def unattributed_fields(history_page: dict) -> list[dict]:
    """The metadata fields that came or went in the step with no changes.yaml entry behind them."""
    rows = []
    for entry in history_page["per_release"]:
        schema = entry.get("schema") or {}
        for how in ("added", "removed"):
            rows += [{"field": f["field"], "how": how} for f in schema.get(how, []) if not f["by"]]
    return rows


def release_step(
    kb_dir: Path, out_root: Path, options: StepOptions = StepOptions(), say=print
) -> dict:
    """Run the step; its data (also ``OUT/X-Y/step.json``, the drafts and the history section)."""
    from gdn_review.kb.changes import load_changes
    from gdn_review.run.selection import load_records

    started = time.monotonic()
    changes = load_changes(kb_dir)  # a bad changes.yaml stops the step before anything runs
    every = load_records(kb_dir)  # and a bad record: loaded once, for the matrix and each review
    old, new = releases(kb_dir, options, say)
    out = Path(out_root) / f"{old}-{new}"
    out.mkdir(parents=True, exist_ok=True)
    say(f"release step: vLLM {old} → {new}")
    paths, diff, read_new = fetch(old, new, options, say)
    (out / "step.diff").write_text(diff, encoding="utf-8")
    rows = step_hunks.attribute(step_hunks.hunks(diff, str(out / "step.diff")), changes, new)
    say(
        f"release step: {sum(1 for _ in step_hunks.split_by_file(diff))} of {len(paths)} "
        f"family file(s) changed, {len(rows)} hunk(s), {sum(1 for r in rows if r['by'])} "
        "named by changes.yaml"
    )
    matrix = run_matrix(kb_dir, old, new, options, out, say, every)
    data = {
        "format": STEP_FORMAT,
        "from": old,
        "to": new,
        "files": paths,
        "hunks": rows,
        "matrix": {k: matrix[k] for k in ("findings", "could_not_run")},
        "history": {"unexplained": matrix["history"]["unexplained"]},
        # what `matrix --record N --draft-changes` prints for each record with unexplained drift
        "record_drafts": matrix["record_drafts"],
        "reviews": [],
        "could_not_run": None,
    }
    if matrix["could_not_run"]:
        version, why = sorted(matrix["could_not_run"].items())[0]
        data["could_not_run"] = f"vLLM {version} could not run: {why}"
        say(f"release step: {data['could_not_run']}: the step's diff is not reviewed (no verdict)")
    else:
        data["reviews"] = review_files(kb_dir, (old, new), diff, options, out, say, read_new, every)
    data["unguarded"] = unguarded(data["reviews"])
    data["drafts"] = step_hunks.draft_entries(
        rows, unattributed_fields(matrix["history"]), new, changes
    )
    data["findings"] = [list(f) for f in findings(data)]
    data["seconds"] = round(time.monotonic() - started, 1)
    (out / "step.json").write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    data["out"] = str(out)
    return data
