"""``gdn-review review DIFF``: the whole KB against a vLLM release with a change applied.

``review()`` is a pipeline of named steps, each a function of its own inputs: ``apply`` (the
diff onto a copy of the release's files, ``onto_release``: never the installed vLLM nor the
cache), ``map_records`` (what the hunks touch per record, ``impact``, said before anything runs;
which records run), ``mutate`` (the automatic mutants of the added lines), ``run_sides`` (one
``worker`` per vLLM tree: the records' modules and snapshots before and with the change, then
the mutants; one changed target module is loaded in memory, several files make a patched
``tree`` of links) and ``render`` (what moved, ``compare``, into the review's data).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from gdn_review.common import interrupts, patched_tree, release_trees, unified_diff
from gdn_review.common.release import Release
from gdn_review.common.release_trees import CLAIMS_ON_ANY_RELEASE
from gdn_review.common.vocabulary import MutantStatus
from gdn_review.kb import Record
from gdn_review.kb.subjects import key_short
from gdn_review.mutation import family
from gdn_review.review import compare, impact
from gdn_review.review.onto_release import Onto, check_work, onto_release, own_record
from gdn_review.review.review_files import REVIEW_FORMAT, ReviewCouldNotRun, ReviewError


@dataclasses.dataclass(frozen=True)
class ReviewOptions:
    """What a review checks and how (`gdn-review review --help` says each option)."""

    keys: tuple = ()  # the records to check (empty: every one that is not a draft)
    onto: str | None = None
    vllm_src_dir: Path | None = None
    lands_in: str | None = None
    generated_dir: Path = Path("generated_tests")
    keyword: str | None = None
    timeout: float = 300.0
    max_mutants: int = 30
    jobs: int = 2
    shard: tuple[int, int] | None = None
    work_dir: Path | None = None
    own: int | None = None  # the PR whose diff this is (None: from the diff's file name)


@dataclasses.dataclass
class Change:
    """The diff applied onto its release (``apply``): nothing has run yet."""

    path: Path
    text: str
    files: list[unified_diff.FileDiff]
    in_tree: list[unified_diff.FileDiff]  # the files in vLLM's Python package (applied)
    base: Onto
    lands_in: str
    patched: dict[str, str | None]  # relative path -> its text with the change (None: deleted)
    records: dict[Path, Record]  # the records asked for that are not drafts
    every: dict[Path, Record]  # every record of the KB
    own: int | None

    @property
    def known(self) -> set:
        """Every record's key in the KB."""
        return {r.key for r in self.every.values()}


@dataclasses.dataclass
class Chosen:
    """The records that run and how (``map_records``)."""

    records: dict[Path, Record]  # in the KB's order (this shard's only)
    covered: set[str]  # the changed files the records' cases build through
    modules: dict  # record key -> its generated module
    target: str  # the file whose added lines are mutated (in memory when it is the only change)
    in_memory: bool

    @property
    def mode(self) -> str:
        if self.in_memory:
            return "in memory over the release (one vLLM import)"
        return "patched tree of links (one vLLM import per side)"


def classify(files: list[unified_diff.FileDiff], targets: set[str]) -> list[dict]:
    rows = []
    for file in files:
        paths = {p for p in (file.old_path, file.new_path) if p}
        if not any(p.startswith("vllm/") for p in paths):
            status = "outside vLLM's Python package: not applied"
        elif paths & targets:
            status = "targeted by the KB"
        else:
            status = "outside the KB (applied)"
        rows.append({"path": file.path, "status": status})
    return rows


class _Workers:
    """The worker processes, each in its own session (``interrupts.popen``): stopping one stops
    every process under it."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.procs: list[subprocess.Popen] = []
        self.tails: dict[int, list[str]] = {}

    def start(self, spec_path: Path, env: dict) -> subprocess.Popen:
        proc = interrupts.popen(
            [sys.executable, "-m", "gdn_review.review.worker", str(spec_path)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        self.tails[proc.pid] = []
        threading.Thread(target=self._relay, args=(proc,), daemon=True).start()
        return proc

    def _relay(self, proc: subprocess.Popen) -> None:
        from gdn_review.review.worker import PROGRESS

        for line in proc.stderr:
            line = line.rstrip("\n")
            if line.startswith(PROGRESS):
                self.say("  " + line[len(PROGRESS) :].strip())
            else:
                self.tails[proc.pid] = (self.tails[proc.pid] + [line])[-40:]

    def wait(self) -> None:
        for proc in self.procs:
            proc.wait()

    def stop(self) -> None:
        for proc in self.procs:
            interrupts.stop(proc)


def review(
    diff_path: Path,
    kb_dir: Path,
    options: ReviewOptions = ReviewOptions(),
    say: Callable[[str], None] = print,
    every: dict[Path, Record] | None = None,
) -> dict:
    """Apply the diff, say its impact, run both sides and the mutants; the review's data (nothing
    written yet). ``every``: the KB's records where the caller has loaded them.

    ``options.own``: the PR whose diff this is (``--pr N``; default: the diff's
    file name ``N.diff`` or ``pr-N.diff`` where the KB holds an open record of
    PR N). Its record explains the fields it states it changes, and its claims
    are read with the change in.
    """
    started = time.monotonic()
    change = apply(diff_path, kb_dir, options, say, every)
    data, chosen = map_records(change, kb_dir, options, say)
    if chosen is not None:
        with _workspace(options.work_dir, say) as (workspace, workers):
            mutants, data["mutants_left_out"] = mutate(
                change, chosen, options.max_mutants, workspace
            )
            results = run_sides(change, chosen, options, mutants, workspace, workers)
            sides_s = render(change, chosen, results, mutants, workspace, data)
            data["run"].update(seconds=round(time.monotonic() - started, 1), sides_s=sides_s)
            return data
    data["run"] = {"seconds": round(time.monotonic() - started, 1)}
    return data


def apply(
    diff_path: Path,
    kb_dir: Path,
    options: ReviewOptions,
    say: Callable,
    every: dict[Path, Record] | None = None,
) -> Change:
    """Read the diff and the records, choose the release, apply the diff in memory (PatchError or
    ReviewError: nothing has run)."""
    from gdn_review.kb import is_draft
    from gdn_review.run.selection import load_records, pick

    text, files = unified_diff.read_diff_file(diff_path)  # every file name a plain relative path
    every = load_records(kb_dir) if every is None else every
    records = {p: r for p, r in pick(every, kb_dir, options.keys).items() if not is_draft(r)}
    own = own_record(options.own, diff_path, every)
    onto = options.onto
    if own is not None and onto is None and options.vllm_src_dir is None:
        # The PR's own diff goes onto the release its record checks it against.
        onto = next(r for r in every.values() if r.key == own).target.base_release
    base = onto_release(onto, options.vllm_src_dir, say)
    lands_in = options.lands_in
    window_end = Release(lands_in) if lands_in else Release(base.version).next_minor()
    in_tree = [
        f for f in files if any(p and p.startswith("vllm/") for p in (f.old_path, f.new_path))
    ]
    # no symlink out of the release, regular files only
    unified_diff.confine(in_tree, base.tree, str(diff_path))
    check_work(options.work_dir, base.tree)
    patched = unified_diff.apply(in_tree, base.read, str(diff_path))
    return Change(diff_path, text, files, in_tree, base, window_end, patched, records, every, own)


def map_records(
    change: Change, kb_dir: Path, options: ReviewOptions, say: Callable
) -> tuple[dict, Chosen | None]:
    """The review's data with what the hunks touch per record, said before anything runs; the
    records that run (None: none)."""
    base = change.base
    # A record runs when the diff changes its target file, a file that defines a builder its
    # cases name (a subclass of GDN's), or GDN's file under a subclass case (the subclass
    # inherits GDN's __init__, and build() where it has none of its own).
    covered = {
        p: family.covered_files(r, change.patched, base.read)
        for p, r in sorted(change.records.items(), key=lambda item: item[1].sort_key)
    }
    targets = {r.target.file for r in change.records.values()}
    data = {
        "format": REVIEW_FORMAT,
        "name": Path(change.path).stem,
        "diff_sha256": hashlib.sha256(change.text.encode("utf-8")).hexdigest(),
        "onto": base.version,
        "source": base.label,
        "lands_in": change.lands_in,
        "files": classify(change.files, targets | {f for c in covered.values() for f, _ in c}),
        "shard": list(options.shard) if options.shard else None,
        "impact": [],
        "carried": [],
        "records": [],
        "mutants": [],
        "mutants_left_out": 0,
        "run": {},
        "own": change.own,
    }
    say(
        f"review of {change.path} onto {base.label}: {len(change.files)} file(s)"
        + (f"; the diff of PR #{change.own}, with its record" if change.own else "")
    )
    affected = {p: change.records[p] for p in covered if covered[p]}
    _say_impact(change, affected, covered, data, say)
    if not affected:
        say("no recorded claim affected: the diff changes no file a record targets")
        return data, None
    picked = list(affected.items())
    if options.shard:
        index, count = options.shard
        picked = picked[index - 1 :: count]
        say(f"shard {index}/{count}: records {', '.join(str(r.key) for _, r in picked) or 'none'}")
        if not picked:
            return data, None
    records = dict(picked)
    files = {relative for p in records for relative, _ in covered[p]}
    deleted = sorted(f for f in files if change.patched.get(f) is None)
    if deleted:
        raise ReviewError(
            f"{change.path}: the change deletes {', '.join(deleted)}, which "
            "records target: nothing to run them on"
        )
    from gdn_review.run.selection import current_modules

    modules = current_modules(kb_dir, records, options.generated_dir, False, say, change.every)
    changed_py = sorted(p for p in change.patched if p.endswith(".py"))
    target = (
        changed_py[0]  # a subclass file alone: its own module, in memory
        if len(changed_py) == 1 and changed_py[0] in files
        else next(iter(records.values())).target.file
    )
    in_memory = changed_py == [target] and change.patched[target] is not None
    chosen = Chosen(records, files, modules, target, in_memory)
    data["run"]["mode"] = chosen.mode
    return data, chosen


def _say_impact(change: Change, affected: dict, covered: dict, data: dict, say: Callable) -> None:
    """Each affected record's impact rows and the recorded PRs the change carries, into ``data``
    and said."""
    by_file = {f.path: f for f in change.in_tree}
    for path, record in affected.items():
        for relative, symbol in covered[path]:
            file = by_file.get(relative) or next(
                f for f in change.in_tree if f.old_path == relative
            )
            source = change.base.read(relative) or ""
            data["impact"].append(impact.record_impact(record, path, file, source, symbol))
    base, own = change.base.version, change.own
    data["carried"] = compare.carried(affected.values(), base, change.lands_in)
    own_record_ = next((r for r in affected.values() if r.key == own), None)
    if own_record_ is not None and not any(c["key"] == own for c in data["carried"]):
        data["carried"].insert(
            0, {"key": own, "title": own_record_.title, "release": "this diff", "record": True}
        )
    for line in impact.impact_lines(data["files"], data["impact"]):
        say(line)
    if affected:
        say(
            f"recorded PRs that first shipped after {base}, by {change.lands_in}: "
            + (
                ", ".join(f"{key_short(c['key'])} ({c['release']})" for c in data["carried"])
                or "none: no record explains a change there"
            )
        )


def mutate(change: Change, chosen: Chosen, limit: int, workspace: Path) -> tuple[list[dict], int]:
    """The automatic mutants of the target's added lines (at most ``limit``, in line order; their
    sources in ``workspace``) and how many were left out."""
    from gdn_review.mutation import catalogue, operators

    target, text = chosen.target, change.patched.get(chosen.target)
    if not text:
        return [], 0
    equivalent = {k: v for r in chosen.records.values() for k, v in r.equivalent_mutants.items()}
    added = next((f.added_lines() for f in change.in_tree if f.path == target), set())
    found = sorted(operators.automatic_mutants(text, added), key=lambda m: (m.line, m.id))
    entries = []
    for index, auto in enumerate(found[:limit]):
        entry = {
            "id": auto.id,
            "operator": auto.operator,
            "line": auto.line,
            "diff": catalogue.edit_diff(text, auto.source, target),
        }
        if auto.id in equivalent:
            entry.update(status=MutantStatus.EQUIVALENT, reason=equivalent[auto.id])
        else:
            source_file = workspace / f"mutant-{index}.py.txt"
            source_file.write_text(auto.source, encoding="utf-8")
            entry["source_file"] = str(source_file)
        entries.append(entry)
    return entries, max(0, len(found) - limit)


def run_sides(
    change: Change,
    chosen: Chosen,
    options: ReviewOptions,
    mutants: list[dict],
    workspace: Path,
    workers: _Workers,
) -> dict[str, dict]:
    """Both sides of each chosen record, and the mutants, in the workers; each worker's result by
    its name."""
    workers.say(
        f"running {len(chosen.records)} record(s) before and after the change ({chosen.mode}), "
        f"then {sum('source_file' in m for m in mutants)} mutant(s) of the added lines"
    )
    patched = change.patched
    spec = {
        "modules": [str(chosen.modules[r.key]) for r in chosen.records.values()],
        "records": {str(r.key): str(p) for p, r in chosen.records.items()},
        "keyword": options.keyword,
        "target": chosen.target,
        # The records' target module must import with the change (it imports what it needs of
        # the rest).
        "changed_modules": sorted(
            f for f in chosen.covered if f.endswith(".py") and patched.get(f) is not None
        ),
        "timeout": options.timeout,
        "jobs": options.jobs,
        "lands_in": change.lands_in,
        "mutants": [m for m in mutants if "source_file" in m],
        "own": change.own,
    }
    env = dict(os.environ, **{CLAIMS_ON_ANY_RELEASE: "1"})
    unpatched_env = release_trees.environment(change.base.pythonpath, env)
    if chosen.in_memory:
        source_file = workspace / "patched.py.txt"
        source_file.write_text(patched[chosen.target], encoding="utf-8")
        in_memory = {"path": chosen.target, "source_file": str(source_file)}
        paths = {"both": _spec(workspace, spec, ["unpatched", "patched"], in_memory)}
        workers.start(paths["both"], unpatched_env)
    else:
        overlay = patched_tree.overlay(change.base.tree, dict(patched), workspace / "tree")
        paths = {
            "unpatched": _spec(workspace, {**spec, "mutants": []}, ["unpatched"], None),
            "patched": _spec(workspace, spec, ["patched"], None),
        }
        workers.start(paths["unpatched"], unpatched_env)
        # The overlay's vllm/_version.py is its release's: it gets that release's VLLM_CACHE_ROOT.
        workers.start(paths["patched"], release_trees.environment(overlay, env))
    workers.wait()
    results = {}
    for name, spec_path in paths.items():
        result_file = spec_path.with_name(f"result-{name}.json")
        if not result_file.exists():
            tail = "\n".join(next(iter(workers.tails.values()), [])[-15:])
            raise RuntimeError(f"the review worker ({name}) ended without a result:\n{tail}")
        results[name] = json.loads(result_file.read_text(encoding="utf-8"))
    cannot = next((r["could_not_run"] for r in results.values() if r.get("could_not_run")), None)
    if cannot:
        raise ReviewCouldNotRun(
            f"could not run: vLLM {change.base.label} does not load here, before any change "
            f"is applied: {cannot}. No verdict: fix the environment, or review onto another "
            "release (--onto)"
        )
    error = next((r["import_error"] for r in results.values() if r.get("import_error")), None)
    if error:
        raise ReviewError(
            f"{change.path}: with the change, {', '.join(spec['changed_modules'])} "
            f"does not import on {change.base.label}: {error}. "
            "The change needs code outside the diff: add those files to the diff, "
            "or review it onto a later release (--onto)"
        )
    return results


def render(
    change: Change,
    chosen: Chosen,
    results: dict[str, dict],
    mutants: list[dict],
    workspace: Path,
    data: dict,
) -> dict[str, float | None]:
    """What moved, into ``data``: each chosen record's before and after, the mutants' outcomes;
    each side's seconds."""
    sides = {
        side: {**outcome, "folder": str(workspace / name)}
        for name, r in results.items()
        for side, outcome in r["sides"].items()
    }
    mutant_results = [m for r in results.values() for m in r.get("mutants", [])]
    onto, known = change.base.version, change.known
    data["records"] = [
        compare.record_effect(r, sides, onto, change.lands_in, known, own=r.key == change.own)
        for r in chosen.records.values()
    ]
    data["mutants"] = compare.mutant_entries(mutants, mutant_results)
    return {side: outcome.get("duration_s") for side, outcome in sides.items()}


@contextlib.contextmanager
def _workspace(work: Path | None, say: Callable) -> Iterator[tuple[Path, _Workers]]:
    """``work`` (kept: each side's evidence and snapshots, for a look), else a temp folder removed
    at the end; and the workers, stopped if anything goes wrong. An interrupted review leaves
    ``work`` as it was (not there, or empty)."""
    made = (  # the outermost folder --work makes (None: it is there)
        next((f for f in reversed([Path(work), *Path(work).parents]) if not f.exists()), None)
        if work is not None
        else None
    )
    if work is None:
        workspace = Path(tempfile.mkdtemp(prefix="gdn-review-review-"))
    elif Path(work).exists() and any(Path(work).iterdir()):
        raise ReviewError(
            f"--work {work}: not empty (give a new or empty folder; an "
            "earlier run's files would be mixed in)"
        )
    else:
        workspace = Path(work)
        workspace.mkdir(parents=True, exist_ok=True)
    workers = _Workers(say)
    try:
        yield workspace, workers
    except BaseException as error:
        workers.stop()
        if isinstance(error, KeyboardInterrupt) and work is not None:
            shutil.rmtree(made or workspace, ignore_errors=True)
            if made is None:
                workspace.mkdir()
        raise
    finally:
        if work is None:
            shutil.rmtree(workspace, ignore_errors=True)


def _spec(workspace: Path, spec: dict, sides: list[str], in_memory: dict | None) -> Path:
    name = "both" if len(sides) == 2 else sides[0]
    out = workspace / name
    out.mkdir()
    path = out / "spec.json"
    whole = {**spec, "sides": sides, "in_memory": in_memory, "out_dir": str(out)}
    path.write_text(json.dumps({**whole, "result": f"result-{name}.json"}), encoding="utf-8")
    return path
