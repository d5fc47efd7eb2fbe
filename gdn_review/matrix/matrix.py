"""The release matrix: a record's generated tests on the base release, the head release and every
later one.

Each release runs the record's generated module in a pytest subprocess of its
own, with that release's Python sources (from the release cache) first on
``PYTHONPATH`` over the installed torch; the installed release runs as it is.
On the base release (the last one without the PR) every claim runs whatever
its ``releases`` range (``GDN_REVIEW_CLAIMS_ON_ANY_RELEASE=1``), so that a
claim's ``before`` (fails: an improvement, holds: a preservation) can be
compared with what was measured: a check that fails before the PR and holds
after it *discriminates*. The same subprocess takes the full-metadata
snapshot of every case (``gdn_review.run.snapshot_take``); consecutive releases'
snapshots are compared field by field, and each difference is attributed to
the record's own PR (``target.changes``) or a related PR (``related[].changes``)
that first shipped between them, or shown as unexplained drift.

Evidence per release, the snapshots and ``matrix.json`` (which release ran
how) go to one folder; ``matrix_report.matrix_data`` turns them into the release x
claim table, the discrimination verdicts and the drift section. Which releases run
is release_plan.py's; the command's flow, matrix_command.py's.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import difflib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable

from packaging.version import Version

from gdn_review.common import interrupts, release_cache, release_trees
from gdn_review.common.files import atomic_write
from gdn_review.common.release_trees import CLAIMS_ON_ANY_RELEASE
from gdn_review.common.vocabulary import NOT_MEASURED, Outcome
from gdn_review.kb.subjects import as_key
from gdn_review.matrix.matrix_files import MATRIX_FORMAT, MatrixError, write_matrix
from gdn_review.matrix.release_plan import Planned, default_jobs
from gdn_review.run import evidence_file, suite


class Trees:
    """Each planned release's folder for PYTHONPATH (None: the installed one). The releases not
    at hand are fetched in the background, side by side (``release_trees.Fetches``), newest
    first (the biggest sessions are the newest releases'), while the sessions that need no
    download run: on a fresh machine the downloads (about 25 s for six releases, mostly waiting
    on the network) no longer hold back the installed release's session. A session waits for
    its own release only."""

    def __init__(self, planned: list[Planned], say: Callable[[str], None]):
        wanted = sorted(
            {item.version for item in planned if not item.installed}, key=Version, reverse=True
        )
        self.downloaded = [v for v in wanted if release_cache.cached(v) is None]
        self._fetches = release_trees.Fetches(wanted, say)

    def path(self, version: str) -> Path | None:
        """The folder of ``version`` once it is at hand; MatrixError where it cannot be had."""
        if version not in self._fetches.futures:
            return None
        try:
            return self._fetches.result(version)
        except release_trees.ReleaseError as error:
            raise MatrixError(str(error)) from None

    def close(self) -> None:
        """Wait for the downloads under way; those not started are dropped."""
        self._fetches.close()


def run_group(
    item: Planned,
    path: Path | None,
    members: list[tuple[Path, Path, Path]],
    keyword: str | None = None,
    side_by_side: bool = False,
) -> list[dict]:
    """Run several records' modules on one release in one subprocess (vLLM imported once); a result
    per member.

    ``members``: (module, record path, out dir) of records that run this release in
    the same role (a base release runs every claim, so it is never shared with a
    record for which it is a later release). Each member gets its own evidence
    (the session's tests of its record), snapshot and the session's log.
    """
    shared = len(members) > 1
    outputs = [_release_files(out, item.version) for _, _, out in members]
    session_evidence, _, log = outputs[0]
    if shared:  # the session's files, cut to each member's below
        session_evidence = members[0][2] / f".group-evidence-{item.version}.json"
        log = members[0][2] / f".group-pytest-{item.version}.log"
    probe = members[0][2] / f".probe-{item.version}.json"
    for stale in [session_evidence, log, probe, *(p for trio in outputs for p in trio)]:
        stale.unlink(missing_ok=True)
    env = release_trees.environment(path)
    if side_by_side:
        # Sessions run side by side, a CPU each: torch's own pool of a thread per CPU in
        # each oversubscribed them (two generated suites: 37.5 s each, 29.5 s with one
        # thread). The checks count ops and compare metadata: a thread count changes
        # neither. A value of the user's wins.
        env.setdefault("OMP_NUM_THREADS", "1")
    env.pop(CLAIMS_ON_ANY_RELEASE, None)
    if item.role == "base":
        env[CLAIMS_ON_ANY_RELEASE] = "1"
    # The release is probed once, before any test: where its set-up raises, no test runs.
    extra = ["-p", "gdn_review.run.snapshot_take", "--gdn-probe-out", str(probe)]
    if shared:  # one module that does not collect must not take the others' tests with it
        extra.append("--continue-on-collection-errors")
    for (_, record_path, _), (_, snapshot, _) in zip(members, outputs):
        extra += ["--gdn-snapshot-record", str(record_path), "--gdn-snapshot-out", str(snapshot)]
    tests = suite.test_args([module for module, _, _ in members], keyword)
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as stream:
        code = suite.run_pytest(
            suite.pytest_args(tests, session_evidence, tuple(extra)),
            hold="matrix-pytest",
            env=env,
            stdout=stream,
            stderr=subprocess.STDOUT,
        )
    duration = round(time.monotonic() - started, 1)
    text = log.read_text(encoding="utf-8", errors="replace")
    why = probed_could_not_run(probe)
    if why is not None:
        evidence_file.take_tests(session_evidence)  # its tests were deselected: nothing measured
        if shared:  # each member keeps the session's log
            log.unlink(missing_ok=True)
        return _could_not_run(item, path, outputs, (why, code, duration, text))
    if not shared:
        return [_result(item, path, outputs[0], code, _closing_line(text, code), duration)]
    data = evidence_file.take_tests(session_evidence)
    log.unlink(missing_ok=True)
    results = []
    for member, (own_evidence, snapshot, own_log) in zip(members, outputs):
        key = as_key(Path(member[1]).stem)
        mine = evidence_file.record_slice(data, key) if data is not None else None
        if not mine or not mine["tests"]:
            # Nothing of this record in the shared session (another module's crash, a
            # collection error): it runs alone, so its result is its own.
            (alone,) = run_group(item, path, [member], keyword)
            alone["summary"] += " (run alone: the shared session gave it no tests)"
            results.append(alone)
            continue
        atomic_write(own_log, text)
        evidence_file.write(own_evidence, mine)
        summary = outcome_summary(mine["tests"], duration, len(members))
        files = (own_evidence, snapshot, own_log)
        result = _result(item, path, files, mine["pytest_exit_status"], summary, duration)
        results.append({**result, "shared_with": len(members) - 1})
    return results


def probed_could_not_run(probe: Path) -> str | None:
    """Why the release could not run, as the session's probe wrote it (vLLM's message and
    where it came from); None where it ran, or where the session never got to the probe
    (its log and exit code say why)."""
    try:
        return json.loads(probe.read_text(encoding="utf-8")).get("could_not_run")
    except (OSError, ValueError, AttributeError):
        return None
    finally:
        probe.unlink(missing_ok=True)


def _could_not_run(item: Planned, path, outputs: list[tuple], run: tuple) -> list[dict]:
    """Each member's result of a release whose probe could not run (``run``: why, pytest's exit
    code, the duration and the session's log): no evidence and no snapshot (the probe's plugin
    took none: nothing was measured there), the log kept, and why in its summary."""
    why, code, duration, text = run
    results = []
    for evidence, snapshot, log in outputs:
        if not log.exists():
            atomic_write(log, text)
        result = _result(item, path, (evidence, snapshot, log), code, "", duration)
        results.append({**result, "summary": f"could not run: {why}", "could_not_run": why})
    return results


def _release_files(out_dir: Path, version: str) -> tuple[Path, Path, Path]:
    """A record's evidence, snapshot and pytest log of one release, in its matrix folder."""
    names = ("evidence-{}.json", "snapshot-{}.json", "pytest-{}.log")
    return tuple(out_dir / name.format(version) for name in names)


def _closing_line(log_text: str, code: int) -> str:
    """pytest's closing line ('12 passed, 3 skipped in 40.1s'), or its exit code."""
    for line in reversed(log_text.splitlines()):
        if " in " in line and any(w in line for w in ("passed", "failed", "skipped", "error")):
            return line.strip("= ")
    return f"pytest exit code {code}"


def _result(item: Planned, path, files: tuple, code: int, summary: str, duration: float) -> dict:
    """One record's run of one release, as matrix.json keeps it (``files``: its evidence, snapshot
    and log)."""
    evidence, snapshot, log = files
    return {
        "version": item.version,
        "role": item.role,
        "source": "installed" if path is None else "unpacked on PYTHONPATH",
        "claims_on_any_release": item.role == "base",
        "evidence": evidence.name if evidence.exists() else None,
        "snapshot": snapshot.name if snapshot.exists() else None,
        "log": log.name,
        "pytest_exit": code,
        "summary": summary,
        "duration_s": duration,
    }


def outcome_summary(tests: list[dict], duration: float, records: int) -> str:
    """pytest's closing line for one record's share of a session ('12 passed, 3 skipped of a session
    of 4 records in 40.1s')."""
    counts = collections.Counter(test["outcome"] for test in tests)
    order = [Outcome.FAILED, Outcome.PASSED, Outcome.SKIPPED, Outcome.XFAILED, Outcome.XPASSED]
    order += [*NOT_MEASURED, Outcome.DESELECTED, Outcome.NOT_RUN]
    parts = [f"{counts[o]} {o}" for o in order if counts.get(o)]
    return f"{', '.join(parts) or 'no tests'} (one session of {records} records, {duration:.1f}s)"


def target_diff(record) -> str | None:
    """The unified diff of the target file from the base to the head release (from the release
    cache), or None."""
    base, head = record.target.base_release, record.target.head_release
    if not base or not head:
        return None
    texts = []
    for version in (base, head):
        try:
            texts.append(release_cache.source(version, record.target.file))
        except release_cache.ReleaseError:
            return None
        if texts[-1] is None:
            return None
    lines = difflib.unified_diff(
        texts[0].splitlines(keepends=True),
        texts[1].splitlines(keepends=True),
        fromfile=f"{record.target.file} ({base})",
        tofile=f"{record.target.file} ({head})",
    )
    return "".join(lines)


@dataclasses.dataclass
class Job:
    """One record's matrix: what runs, and where its evidence, snapshots and matrix.json go."""

    record: object
    record_path: Path
    module: Path
    out_dir: Path
    planned: list[Planned]


def run_matrices(
    work: list[Job],
    installed: str | None,
    jobs: int | None = None,
    keyword: str | None = None,
    say: Callable[[str], None] = print,
    share_sessions: bool = True,
) -> dict[int, dict]:
    """Run several records' matrices with one pool of release runs; each record's matrix.json data
    by its key.

    ``share_sessions=False`` gives every record and release a session of its own
    (benchmarks/matrix_sessions.py compares the two).
    """
    for job in work:
        say(
            f"release matrix of {job.record.label}: vLLM "
            f"{', '.join(p.version for p in job.planned)} (installed: "
            f"{installed or 'none'})"
        )
    wanted = {p.version: p for job in work for p in job.planned}
    # what an interrupted or failed run removes is what is not in these
    before = _listings([job.out_dir for job in work])
    trees = Trees(list(wanted.values()), say)
    if trees.downloaded:
        say(
            f"release cache: fetching {', '.join(trees.downloaded)} in the background; "
            "the sessions that need none start now"
        )
    else:
        say(
            "release cache: every release was already cached; nothing "
            f"downloaded ({release_cache.cache_root()})"
        )
    for job in work:
        job.out_dir.mkdir(parents=True, exist_ok=True)
    jobs = jobs or default_jobs()
    started = time.monotonic()
    try:
        results = _run_sessions(
            work, _sessions(work, share_sessions), trees.path, keyword, jobs, say
        )
    except (KeyboardInterrupt, MatrixError):
        _remove_new(before)
        raise
    finally:
        trees.close()
    if trees.downloaded:
        say(f"release cache: downloaded {', '.join(trees.downloaded)}")
    # every release ran: matrix.json and the reports are written whatever comes now
    interrupts.finishing()
    duration = round(time.monotonic() - started, 1)
    began = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(time.time() - duration))
    run = {
        "format": MATRIX_FORMAT,
        "installed": installed,
        "jobs": jobs,
        "duration_s": duration,
        # the same for every record of one run (the history page tells runs apart by it)
        "run_id": f"{began}Z+{os.getpid()}",
        "keyword": keyword,
        **({"records_in_run": len(work)} if len(work) > 1 else {}),
    }
    written = {}
    for job in work:
        versions = [p.version for p in job.planned]
        data = {
            **run,
            "record": job.record.key,
            "downloaded": [v for v in trees.downloaded if v in versions],
            # What the run was of: the history page refuses a run whose record has changed since, or
            # that ran only part.
            "record_sha256": evidence_file.record_sha256(job.record_path),
            "releases": [results[(job.record.key, v)] for v in versions],
            "target_diff": target_diff(job.record),
        }
        write_matrix(job.out_dir, data)
        written[job.record.key] = data
    return written


def _sessions(work: list[Job], share_sessions: bool) -> list[list[tuple[Job, Planned]]]:
    """The release runs grouped into pytest sessions, the biggest first: one per release and per
    kind of run (a base release, every claim checked, apart from the records for which it is a
    later release), vLLM imported once each; ``share_sessions=False``: one per record too."""
    groups: dict[tuple, list[tuple[Job, Planned]]] = {}
    for job in work:
        for item in job.planned:
            kind = item.role == "base" if share_sessions else job.record.key
            groups.setdefault((item.version, kind), []).append((job, item))
    ordered = sorted(groups.items(), key=lambda entry: (-len(entry[1]), Version(entry[0][0])))
    return [members for _, members in ordered]


def _run_sessions(
    work: list[Job],
    sessions: list[list[tuple[Job, Planned]]],
    path: Callable[[str], Path | None],
    keyword: str | None,
    jobs: int,
    say: Callable[[str], None],
) -> dict[tuple, dict]:
    """Run the sessions ``jobs`` at a time, saying each release run as it ends; each run's result
    by (record key, release). Interrupted, the runs' processes end before it raises."""
    several = len(work) > 1
    runs = sum(len(members) for members in sessions)
    say(
        f"running {runs} release runs of {len(work)} records in "
        f"{len(sessions)} sessions, {jobs} at a time"
        if several
        else f"running {runs} releases, {jobs} at a time"
    )
    results: dict[tuple, dict] = {}
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {
            pool.submit(
                lambda planned, *rest: run_group(planned, path(planned.version), *rest),
                members[0][1],
                [(job.module, job.record_path, job.out_dir) for job, _ in members],
                keyword,
                jobs > 1 and len(sessions) > 1,
            ): members
            for members in sessions
        }
        for future in concurrent.futures.as_completed(futures):
            for (job, item), result in zip(futures[future], future.result()):
                result["role"] = item.role  # head, later or earlier: the same kind of session
                results[(job.record.key, item.version)] = result
                where = "installed" if item.installed else "unpacked"
                forced = ", every claim checked" if result["claims_on_any_release"] else ""
                whose = f"{job.record.short} " if several else ""
                say(
                    f"[{len(results)}/{runs}] {whose}vLLM {item.version} ({item.role}, "
                    f"{where}{forced}): {result['summary']} "
                    f"({result['duration_s']:.0f} s)"
                )
    except BaseException:
        # the release runs' processes: their threads end now, not when the runs would
        interrupts.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return results


def _listings(folders: list[Path]) -> dict[Path, set[str] | None]:
    """Each folder's entries; None for the first missing folder on the way to one (the run makes
    it)."""
    found: dict[Path, set[str] | None] = {}
    for folder in folders:
        missing = [f for f in [folder, *folder.parents] if not f.exists()]
        if missing:
            found[missing[-1]] = None
        else:
            found[folder] = set(os.listdir(folder))
    return found


def _remove_new(before: dict[Path, set[str] | None]) -> None:
    """An interrupted run's files: the folders it made, and what it added to folders that were
    there."""
    for folder, entries in before.items():
        added = (
            [folder]
            if entries is None
            else [folder / name for name in set(os.listdir(folder)) - entries]
        )
        for path in added:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
