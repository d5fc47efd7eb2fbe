"""``gdn-review review DIFF``: the whole KB against a vLLM release with a change applied.

The diff is applied to a copy of the release's Python files (the release
cache's entry, or a vLLM source folder: ``onto_release``): never to the
installed vLLM and never to the cache itself. Before anything runs, what the hunks touch is said per
record (``impact``). Then one worker per vLLM tree (``worker``) runs each
selected record's generated module and snapshots on the release as it is and
with the change, and the automatic mutants of the change's added lines; a
change of the target module alone is loaded in memory over the release (one
vLLM import for everything), a change of several files runs on a patched tree
of links (``tree``). What moved is compared in ``compare`` and rendered as
markdown for a PR comment (``render``); the command writes it and the JSON
through ``review_files``, which also reads a shard's JSON back for merging.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from gdn_review.common import interrupts, release_cache, release_trees, unified_diff
from gdn_review.matrix.matrix import CLAIMS_ON_ANY_RELEASE
from gdn_review.mutation import family
from gdn_review.review import compare, impact, tree
from gdn_review.review.onto_release import next_minor, onto_release
from gdn_review.review.review_files import REVIEW_FORMAT, ReviewError


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


def plan_mutants(
    target: str,
    patched_text: str,
    added: set[int],
    equivalent: dict[str, str],
    limit: int,
    folder: Path,
) -> tuple[list[dict], int]:
    """The automatic mutants of the added lines (at most ``limit``, in line order) and how many were
    left out."""
    from gdn_review.mutation import catalogue, operators

    found = sorted(operators.automatic_mutants(patched_text, added), key=lambda m: (m.line, m.id))
    chosen, left_out = found[:limit], max(0, len(found) - limit)
    entries = []
    for index, auto in enumerate(chosen):
        entry = {
            "id": auto.id,
            "operator": auto.operator,
            "line": auto.line,
            "diff": catalogue.edit_diff(patched_text, auto.source, target),
        }
        if auto.id in equivalent:
            entry.update(status="equivalent", reason=equivalent[auto.id])
        else:
            source_file = folder / f"mutant-{index}.py.txt"
            source_file.write_text(auto.source, encoding="utf-8")
            entry["source_file"] = str(source_file)
        entries.append(entry)
    return entries, left_out


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
    numbers: tuple[int, ...] = (),
    onto: str | None = None,
    vllm_src: Path | None = None,
    lands_in: str | None = None,
    generated: Path = Path("generated_tests"),
    keyword: str | None = None,
    timeout: float = 300.0,
    max_mutants: int = 30,
    jobs: int = 2,
    shard: tuple[int, int] | None = None,
    work: Path | None = None,
    say: Callable[[str], None] = print,
    own: int | None = None,
) -> dict:
    """Apply the diff, say its impact, run both sides and the mutants; the review's data (nothing
    written yet).

    ``own``: the PR whose diff this is (``--pr N``; default: the diff's file
    name ``N.diff`` or ``pr-N.diff`` where the KB holds an open record of PR
    N). Its record explains the fields it states it changes, and its claims
    are read with the change in.
    """
    from gdn_review.kb import is_draft
    from gdn_review.run.selection import current_modules, load_records

    started = time.monotonic()
    text, files = unified_diff.read_diff_file(
        diff_path
    )  # every file name a plain relative path, or PatchError
    records = {p: r for p, r in load_records(kb_dir, numbers).items() if not is_draft(r)}
    every = load_records(kb_dir)
    known = {r.key for r in every.values()}
    own = own_record(own, diff_path, every)
    if own is not None and onto is None and vllm_src is None:
        # The PR's own diff goes onto the release its record checks it against.
        onto = next(r for r in every.values() if r.key == own).target.base_release
    base = onto_release(onto, vllm_src, say)
    window_end = release_cache.checked_version(lands_in) if lands_in else next_minor(base.version)
    in_tree = [
        f for f in files if any(p and p.startswith("vllm/") for p in (f.old_path, f.new_path))
    ]
    unified_diff.confine(
        in_tree, base.tree, str(diff_path)
    )  # no symlink out of the release, regular files only
    _check_work(work, base.tree)
    patched = unified_diff.apply(in_tree, base.read, str(diff_path))  # PatchError: nothing has run
    targets = {r.target.file for r in records.values()} | {
        relative
        for r in records.values()
        for relative, _ in family.covered_files(r, patched, base.read)
    }
    data = {
        "format": REVIEW_FORMAT,
        "name": Path(diff_path).stem,
        "diff_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "onto": base.version,
        "source": base.label,
        "lands_in": window_end,
        "files": classify(files, targets),
        "shard": list(shard) if shard else None,
        "impact": [],
        "carried": [],
        "records": [],
        "mutants": [],
        "mutants_left_out": 0,
        "run": {},
        "own": own,
    }
    say(
        f"review of {diff_path} onto {base.label}: {len(files)} file(s)"
        + (f"; the diff of PR #{own}, with its record" if own else "")
    )
    # A record runs when the diff changes its target file, a file that defines a builder its
    # cases name (a subclass of GDN's), or GDN's file under a subclass case (the subclass
    # inherits GDN's __init__, and build() where it has none of its own).
    covered = {
        p: family.covered_files(r, patched, base.read)
        for p, r in sorted(records.items(), key=lambda item: item[1].sort_key)
    }
    affected = {p: r for p, r in records.items() if covered[p]}
    affected = dict(sorted(affected.items(), key=lambda item: item[1].sort_key))
    by_file = {f.path: f for f in in_tree}
    for path, record in affected.items():
        for relative, symbol in covered[path]:
            file = by_file.get(relative) or next(f for f in in_tree if f.old_path == relative)
            data["impact"].append(
                impact.record_impact(record, path, file, base.read(relative) or "", symbol)
            )
    data["carried"] = compare.carried(affected.values(), base.version, window_end)
    own_record_ = next((r for r in affected.values() if r.key == own), None)
    if own_record_ is not None and not any(c["number"] == own for c in data["carried"]):
        data["carried"].insert(
            0, {"number": own, "title": own_record_.title, "release": "this diff", "record": True}
        )
    for line in impact.impact_lines(data["files"], data["impact"]):
        say(line)
    if affected:
        say(
            f"recorded PRs that first shipped after {base.version}, by {window_end}: "
            + (
                ", ".join(f"#{c['number']} ({c['release']})" for c in data["carried"])
                or "none: no record explains a change there"
            )
        )
    if not affected:
        say("no recorded claim affected: the diff changes no file a record targets")
        data["run"] = {"seconds": round(time.monotonic() - started, 1)}
        return data
    chosen = list(affected.items())
    if shard:
        index, count = shard
        chosen = chosen[index - 1 :: count]
        say(f"shard {index}/{count}: records {', '.join(str(r.key) for _, r in chosen) or 'none'}")
        if not chosen:
            data["run"] = {"seconds": round(time.monotonic() - started, 1)}
            return data
    chosen_records = dict(chosen)
    deleted = sorted(
        {
            relative
            for p in chosen_records
            for relative, _ in covered[p]
            if patched.get(relative) is None
        }
    )
    if deleted:
        raise ReviewError(
            f"{diff_path}: the change deletes {', '.join(deleted)}, which "
            "records target: nothing to run them on"
        )
    modules = current_modules(kb_dir, chosen_records, generated, False, say)
    changed_py = sorted(p for p, t in patched.items() if p.endswith(".py"))
    covered_files = {relative for p in chosen_records for relative, _ in covered[p]}
    target = (
        changed_py[0]  # a subclass file alone: its own module, in memory
        if len(changed_py) == 1 and changed_py[0] in covered_files
        else next(iter(chosen_records.values())).target.file
    )
    in_memory = changed_py == [target] and patched[target] is not None
    data["run"]["mode"] = (
        "in memory over the release (one vLLM import)"
        if in_memory
        else "patched tree of links (one vLLM import per side)"
    )
    # The outermost folder --work makes (None: it is there): an interrupted review removes it.
    made = (
        next((f for f in reversed([Path(work), *Path(work).parents]) if not f.exists()), None)
        if work is not None
        else None
    )
    workspace = _workspace(work)
    workers = _Workers(say)
    try:
        equivalent = {
            k: v for r in chosen_records.values() for k, v in r.equivalent_mutants.items()
        }
        added = next((f.added_lines() for f in in_tree if f.path == target), set())
        mutants, data["mutants_left_out"] = (
            plan_mutants(target, patched[target], added, equivalent, max_mutants, workspace)
            if patched.get(target)
            else ([], 0)
        )
        say(
            f"running {len(chosen_records)} record(s) before and after the change "
            f"({data['run']['mode']}), "
            f"then {sum('source_file' in m for m in mutants)} mutant(s) of the added lines"
        )
        spec = {
            "modules": [str(modules[r.key]) for r in chosen_records.values()],
            "records": {str(r.key): str(p) for p, r in chosen_records.items()},
            "keyword": keyword,
            "target": target,
            # The records' target module must import with the change (it imports what it needs of
            # the rest).
            "changed_modules": sorted(
                {
                    relative
                    for relative in covered_files
                    if relative.endswith(".py") and patched.get(relative) is not None
                }
            ),
            "timeout": timeout,
            "jobs": jobs,
            "lands_in": window_end,
            "mutants": [m for m in mutants if "source_file" in m],
            "own": own,
        }
        env = dict(os.environ, **{CLAIMS_ON_ANY_RELEASE: "1"})
        results = {}
        if in_memory:
            source_file = workspace / "patched.py.txt"
            source_file.write_text(patched[target], encoding="utf-8")
            paths = {
                "both": _spec(
                    workspace,
                    spec,
                    ["unpatched", "patched"],
                    {"path": target, "source_file": str(source_file)},
                )
            }
            workers.start(paths["both"], release_trees.environment(base.pythonpath, env))
        else:
            overlay = tree.overlay(
                base.tree, {p: t for p, t in patched.items()}, workspace / "tree"
            )
            paths = {
                "unpatched": _spec(workspace, {**spec, "mutants": []}, ["unpatched"], None),
                "patched": _spec(workspace, spec, ["patched"], None),
            }
            workers.start(paths["unpatched"], release_trees.environment(base.pythonpath, env))
            # The overlay's vllm/_version.py is its release's: it gets that release's
            # VLLM_CACHE_ROOT.
            workers.start(paths["patched"], release_trees.environment(overlay, env))
        workers.wait()
        for name, spec_path in paths.items():
            result_file = spec_path.with_name(f"result-{name}.json")
            if not result_file.exists():
                tail = "\n".join(next(iter(workers.tails.values()), [])[-15:])
                raise RuntimeError(f"the review worker ({name}) ended without a result:\n{tail}")
            results[name] = json.loads(result_file.read_text(encoding="utf-8"))
        error = next((r["import_error"] for r in results.values() if r.get("import_error")), None)
        if error:
            raise ReviewError(
                f"{diff_path}: with the change, {', '.join(spec['changed_modules'])} "
                f"does not import on {base.label}: {error}. "
                "The change needs code outside the diff: add those files to the diff, "
                "or review it onto a later release (--onto)"
            )
        sides = {
            side: {**outcome, "folder": str(workspace / name)}
            for name, r in results.items()
            for side, outcome in r["sides"].items()
        }
        mutant_results = [m for r in results.values() for m in r.get("mutants", [])]
        data["records"] = [
            compare.record_effect(
                record, sides, base.version, window_end, known, own=record.key == own
            )
            for record in chosen_records.values()
        ]
        data["mutants"] = compare.mutant_entries(mutants, mutant_results)
        data["run"]["seconds"] = round(time.monotonic() - started, 1)
        data["run"]["sides_s"] = {
            side: outcome.get("duration_s") for side, outcome in sides.items()
        }
        return data
    except BaseException as error:
        workers.stop()
        if (
            isinstance(error, KeyboardInterrupt) and work is not None
        ):  # interrupted: --work as it was (not there, or empty)
            shutil.rmtree(made or workspace, ignore_errors=True)
            if made is None:
                workspace.mkdir()
        raise
    finally:
        if work is None:
            shutil.rmtree(workspace, ignore_errors=True)


def own_record(own: int | None, diff_path: Path, records: dict) -> int | None:
    """The PR whose diff is reviewed: ``own`` (checked: the KB has a record of it), else one its
    file name gives."""
    numbers = {r.key: r for r in records.values() if r.pr is not None}
    if own is not None:
        if own not in numbers:
            raise ReviewError(
                f"--pr {own}: the KB has no record of PR #{own} (its record "
                "explains the diff's stated changes)"
            )
        return own
    match = re.fullmatch(r"(?:pr-)?([1-9][0-9]{0,8})", Path(diff_path).stem)
    if match and int(match.group(1)) in numbers and numbers[int(match.group(1))].is_open:
        return int(match.group(1))
    return None


def _check_work(work: Path | None, tree: Path) -> None:
    """--work must not lie in the sources the diff is applied to (their files are read, never
    written)."""
    if work is None:
        return
    resolved, tree = Path(work).resolve(), Path(tree).resolve()
    if resolved == tree or tree in resolved.parents or resolved in tree.parents:
        raise ReviewError(
            f"--work {work}: inside (or holding) the vLLM sources the diff is "
            f"applied to ({tree}); give a folder apart from them"
        )


def _workspace(work: Path | None) -> Path:
    """``work`` (kept: each side's evidence and snapshots, for a look), else a temp folder removed
    at the end."""
    if work is None:
        return Path(tempfile.mkdtemp(prefix="gdn-review-review-"))
    work = Path(work)
    if work.exists() and any(work.iterdir()):
        raise ReviewError(
            f"--work {work}: not empty (give a new or empty folder; an "
            "earlier run's files would be mixed in)"
        )
    work.mkdir(parents=True, exist_ok=True)
    return work


def _spec(workspace: Path, spec: dict, sides: list[str], in_memory: dict | None) -> Path:
    name = "both" if len(sides) == 2 else sides[0]
    out = workspace / name
    out.mkdir()
    path = out / "spec.json"
    path.write_text(
        json.dumps(
            {
                **spec,
                "sides": sides,
                "in_memory": in_memory,
                "out_dir": str(out),
                "result": f"result-{name}.json",
            }
        ),
        encoding="utf-8",
    )
    return path
