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

import concurrent.futures
import dataclasses
import difflib
import hashlib
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from packaging.version import Version

from gdn_review.common import fast_exit, interrupts, release_cache, release_trees
from gdn_review.common.files import atomic_write
from gdn_review.matrix.matrix_files import MATRIX_FORMAT, MatrixError, write_matrix
from gdn_review.matrix.release_plan import Planned, default_jobs, plan
from gdn_review.run import evidence_file

CLAIMS_ON_ANY_RELEASE = "GDN_REVIEW_CLAIMS_ON_ANY_RELEASE"  # read by harness.claim_in_range
# The release run's pytest process, from its first line: the test hook of ``interrupts.hold``
# (gdn_review is imported only where it holds, so pytest can still rewrite its plugin's asserts).
PYTEST_HELD = (
    "import os\n"
    "if os.environ.get('GDN_REVIEW_HOLD') == 'matrix-pytest':\n"
    "    from gdn_review.common.interrupts import hold; hold('matrix-pytest')\n"
) + fast_exit.PYTEST


def fetch(
    planned: list[Planned], say: Callable[[str], None]
) -> tuple[dict[str, Path | None], list[str]]:
    """Each release's folder for PYTHONPATH (None: the installed one) and the versions downloaded
    now; the releases not at hand are fetched side by side (downloads and unpacking overlap)."""
    paths: dict[str, Path | None] = {item.version: None for item in planned if item.installed}
    wanted = [item.version for item in planned if not item.installed]
    downloaded = [version for version in wanted if release_cache.cached(version) is None]
    try:
        paths.update(release_trees.trees(wanted, say=say))
    except release_trees.ReleaseError as error:
        raise MatrixError(str(error)) from None
    return paths, downloaded


def run_one(
    item: Planned,
    path: Path | None,
    module: Path,
    record_path: Path,
    out_dir: Path,
    keyword: str | None = None,
) -> dict:
    """Run the record's module on one release (a subprocess); the evidence, snapshot and log go to
    ``out_dir``."""
    return run_group(item, path, [(module, record_path, out_dir)], keyword)[0]


def run_group(
    item: Planned,
    path: Path | None,
    members: list[tuple[Path, Path, Path]],
    keyword: str | None = None,
) -> list[dict]:
    """Run several records' modules on one release in one subprocess (vLLM imported once); a result
    per member.

    ``members``: (module, record path, out dir) of records that run this release in
    the same role (a base release runs every claim, so it is never shared with a
    record for which it is a later release). Each member gets its own evidence
    (the session's tests of its record), snapshot and the session's log.
    """
    first_dir = members[0][2]
    shared = len(members) > 1
    session_evidence = first_dir / (
        f".group-evidence-{item.version}.json" if shared else f"evidence-{item.version}.json"
    )
    log = first_dir / (
        f".group-pytest-{item.version}.log" if shared else f"pytest-{item.version}.log"
    )
    outputs = [
        (
            out / f"evidence-{item.version}.json",
            out / f"snapshot-{item.version}.json",
            out / f"pytest-{item.version}.log",
        )
        for _, _, out in members
    ]
    for stale in [session_evidence, log, *(p for trio in outputs for p in trio)]:
        stale.unlink(missing_ok=True)
    env = release_trees.environment(path)
    env.pop(CLAIMS_ON_ANY_RELEASE, None)
    if item.role == "base":
        env[CLAIMS_ON_ANY_RELEASE] = "1"
    command = [
        sys.executable,
        "-c",
        PYTEST_HELD,
        *(str(module) for module, _, _ in members),
        "-q",
        "-p",
        "no:cacheprovider",
        "--gdn-evidence",
        str(session_evidence),
        "-p",
        "gdn_review.run.snapshot_take",
    ]
    if shared:  # one module that does not collect must not take the others' tests with it
        command.append("--continue-on-collection-errors")
    for (_, record_path, _), (_, snapshot, _) in zip(members, outputs):
        command += ["--gdn-snapshot-record", str(record_path), "--gdn-snapshot-out", str(snapshot)]
    if keyword:
        command += ["-k", keyword]
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as stream:
        code = interrupts.run_child(
            command, env=env, stdout=stream, stderr=subprocess.STDOUT
        ).returncode
    duration = round(time.monotonic() - started, 1)
    text = log.read_text(encoding="utf-8", errors="replace")
    lines = [line for line in text.splitlines() if line.strip()]
    summary = next(
        (
            line.strip("= ")
            for line in reversed(lines)
            if " in " in line
            and ("passed" in line or "failed" in line or "skipped" in line or "error" in line)
        ),
        f"pytest exit code {code}",
    )
    data = None
    if shared:
        data = evidence_file.take_tests(session_evidence)
        log.unlink(missing_ok=True)
    results = []
    for member, (own_evidence, snapshot, own_log) in zip(members, outputs):
        own_summary, own_code = summary, code
        if shared:
            mine = (
                evidence_file.record_slice(data, _record_number(member[1]))
                if data is not None
                else None
            )
            if not mine or not mine["tests"]:
                # Nothing of this record in the shared session (another module's crash, a
                # collection error): it runs alone, so its result is its own.
                (alone,) = run_group(item, path, [member], keyword)
                alone["summary"] += " (run alone: the shared session gave it no tests)"
                results.append(alone)
                continue
            atomic_write(own_log, text)
            evidence_file.write(own_evidence, mine)
            own_summary = outcome_summary(mine["tests"], duration, len(members))
            own_code = mine["pytest_exit_status"]
        results.append(
            {
                "version": item.version,
                "role": item.role,
                "source": "installed" if path is None else "unpacked on PYTHONPATH",
                "claims_on_any_release": item.role == "base",
                "evidence": own_evidence.name if own_evidence.exists() else None,
                "snapshot": snapshot.name if snapshot.exists() else None,
                "log": own_log.name,
                "pytest_exit": own_code,
                "summary": own_summary,
                "duration_s": duration,
                **({"shared_with": len(members) - 1} if shared else {}),
            }
        )
    return results


def _record_number(record_path: Path) -> int | str:
    """The key of the record at ``kb/<key>.yaml``: a PR's number, or a contract's id."""
    stem = Path(record_path).stem
    return int(stem) if stem.isdigit() else stem


def outcome_summary(tests: list[dict], duration: float, records: int) -> str:
    """pytest's closing line for one record's share of a session ('12 passed, 3 skipped of a session
    of 4 records in 40.1s')."""
    counts: dict[str, int] = {}
    for test in tests:
        counts[test["outcome"]] = counts.get(test["outcome"], 0) + 1
    order = ["failed", "passed", "skipped", "xfailed", "xpassed", "error", "deselected", "not run"]
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
            text = release_cache.source(version, record.target.file, fetch=False)
        except release_cache.ReleaseError:
            text = None
        if text is None:
            return None
        texts.append(text)
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


def run_matrix(
    record,
    record_path: Path,
    module: Path,
    out_dir: Path,
    requested: list[str] | None = None,
    jobs: int | None = None,
    keyword: str | None = None,
    say: Callable[[str], None] = print,
    since: str | None = None,
) -> dict:
    """Run the record's module on every planned release; write and return matrix.json's data."""
    installed = (
        release_cache.installed()
    )  # None in a bundle: every release comes from the release cache
    job = Job(record, record_path, module, out_dir, plan(record, installed, requested, since))
    return run_matrices([job], installed, jobs, keyword, say)[record.key]


def run_matrices(
    work: list[Job],
    installed: str | None,
    jobs: int | None = None,
    keyword: str | None = None,
    say: Callable[[str], None] = print,
    share_sessions: bool = True,
) -> dict[int, dict]:
    """Run several records' matrices with one pool of release runs; each record's matrix.json data
    by PR number.

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
    paths, downloaded = fetch(list(wanted.values()), say)
    if downloaded:
        say(f"release cache: downloaded {', '.join(downloaded)}")
    else:
        say(
            "release cache: every release was already cached; nothing "
            f"downloaded ({release_cache.cache_root()})"
        )
    before = _listings(
        [job.out_dir for job in work]
    )  # what an interrupted run removes is what is not in these
    for job in work:
        job.out_dir.mkdir(parents=True, exist_ok=True)
    # One session per release and per kind of run: a base release (every claim checked)
    # apart from the records for which it is a later release; vLLM is imported once each.
    groups: dict[tuple, list[tuple[Job, Planned]]] = {}
    for job in work:
        for item in job.planned:
            key = (
                (item.version, item.role == "base")
                if share_sessions
                else (item.version, job.record.key)
            )
            groups.setdefault(key, []).append((job, item))
    ordered = sorted(
        groups.items(), key=lambda entry: (-len(entry[1]), Version(entry[0][0]))
    )  # big sessions first
    jobs = jobs or default_jobs()
    several = len(work) > 1
    runs = sum(len(members) for members in groups.values())
    say(
        f"running {runs} release runs of {len(work)} records in "
        f"{len(groups)} sessions, {jobs} at a time"
        if several
        else f"running {runs} releases, {jobs} at a time"
    )
    started = time.monotonic()
    results: dict[tuple[int, str], dict] = {}
    done = 0
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=jobs)
    try:
        futures = {
            pool.submit(
                run_group,
                members[0][1],
                paths[version],
                [(job.module, job.record_path, job.out_dir) for job, _ in members],
                keyword,
            ): members
            for (version, _), members in ordered
        }
        for future in concurrent.futures.as_completed(futures):
            members = futures[future]
            for (job, item), result in zip(members, future.result()):
                result["role"] = item.role  # head, later or earlier: the same kind of session
                results[(job.record.key, item.version)] = result
                done += 1
                where = "installed" if item.installed else "unpacked"
                forced = ", every claim checked" if result["claims_on_any_release"] else ""
                whose = f"{job.record.short} " if several else ""
                say(
                    f"[{done}/{runs}] {whose}vLLM {item.version} ({item.role}, "
                    f"{where}{forced}): {result['summary']} "
                    f"({result['duration_s']:.0f} s)"
                )
    except BaseException as error:
        # the release runs' processes: their threads end now, not when the runs would
        interrupts.stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        if isinstance(error, KeyboardInterrupt):
            _remove_new(before)
        raise
    pool.shutdown()
    # every release ran: matrix.json and the reports are written whatever comes now
    interrupts.finishing()
    duration = round(time.monotonic() - started, 1)
    run_id = (
        f"{time.strftime('%Y-%m-%dT%H:%M:%S', time.gmtime(time.time() - duration))}Z+{os.getpid()}"
    )
    written = {}
    for job in work:
        number = job.record.key
        data = {
            "format": MATRIX_FORMAT,
            "record": number,
            "installed": installed,
            "downloaded": [v for v in downloaded if v in {p.version for p in job.planned}],
            "jobs": jobs,
            "duration_s": duration,
            # the same for every record of one run (the history page tells runs apart by it)
            "run_id": run_id,
            # What the run was of: the history page refuses a run whose record has changed since, or
            # that ran only part.
            "record_sha256": hashlib.sha256(Path(job.record_path).read_bytes()).hexdigest(),
            "keyword": keyword,
            "releases": [results[(number, p.version)] for p in job.planned],
            "target_diff": target_diff(job.record),
        }
        if several:
            data["records_in_run"] = len(work)
        write_matrix(job.out_dir, data)
        written[number] = data
    return written


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
