"""A/B latency of ``build()`` between two vLLM releases on the same machine.

Each release runs in its own worker process (``harness.timing``) with its
Python sources first on ``PYTHONPATH`` (the release cache; the installed
release as it is). Rounds interleave the releases, alternating which goes
first (A B, B A, ...), so drift of the machine falls on both. After a warm-up,
rounds continue until every case's 95% interval of the head/base ratio of
medians is tight, or the time cap is reached. Intervals are bootstrap
percentiles (resampling each release's samples); the pooled ratio is the
geometric mean over cases.

An open PR's change is in no release: its head side is its base release
with the PR's diff (``kb/N.diff``) applied to a copy of the release's files,
as ``gdn-review review`` applies it (``common.patched_tree.release_with_diff``,
which the command passes in: the review stage comes after this one), and
both sides then load that release's files from the same copy.

What it measures is ``build()``'s latency, the mechanism a throughput claim
names; an end-to-end throughput figure needs a serving benchmark.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from gdn_review.common import interrupts, patched_tree, release_trees, unified_diff
from gdn_review.common.release_trees import CUDA_ON_CPU_PLATFORM
from gdn_review.kb.subjects import key_label, key_order

SUPPORTED, NOISE, CONTRADICTED = "supported", "not distinguishable from noise", "contradicted"


class BenchError(Exception):
    """The benchmark cannot run (release unavailable, worker died): said for people."""


class DiffNeeded(BenchError):
    """An open PR's head side is its diff, and none is stored beside its record."""


@dataclasses.dataclass
class CaseTiming:
    case: str
    base_ns: list[int]
    head_ns: list[int]

    def summary(self, resamples: int, rng: random.Random) -> dict:
        base, head = statistics.median(self.base_ns), statistics.median(self.head_ns)
        low, high = bootstrap_ratio([self.base_ns], [self.head_ns], resamples, rng)
        return {
            "case": self.case,
            "base_median_us": round(base / 1000, 2),
            "head_median_us": round(head / 1000, 2),
            "ratio": round(head / base, 4),
            "ci95": [round(low, 4), round(high, 4)],
            "samples": [len(self.base_ns), len(self.head_ns)],
        }


def _median_ratio(base_sets, head_sets) -> float:
    """Geometric mean over cases of head median / base median."""
    logs = [
        math.log(statistics.median(h) / statistics.median(b)) for b, h in zip(base_sets, head_sets)
    ]
    return math.exp(sum(logs) / len(logs))


def bootstrap_ratio(
    base_sets: list[list[int]], head_sets: list[list[int]], resamples: int, rng: random.Random
) -> tuple[float, float]:
    """95% percentile interval of the (pooled) head/base ratio of medians."""
    ratios = []
    for _ in range(resamples):
        b = [rng.choices(samples, k=len(samples)) for samples in base_sets]
        h = [rng.choices(samples, k=len(samples)) for samples in head_sets]
        ratios.append(_median_ratio(b, h))
    ratios.sort()
    return ratios[int(0.025 * (len(ratios) - 1))], ratios[int(0.975 * (len(ratios) - 1))]


def verdict(low: float, high: float) -> str:
    """Head faster when the whole interval is below 1, slower when it is above."""
    if high < 1.0:
        return SUPPORTED
    if low > 1.0:
        return CONTRADICTED
    return NOISE


def platform_for(device: str, env: dict) -> str:
    """vLLM's platform for a worker timing ``device``: the device's own, except a bundle's CUDA
    tensors on the CPU platform."""
    if (
        device == "cuda"
        and env.get(CUDA_ON_CPU_PLATFORM) == "1"
        and env.get("VLLM_TARGET_DEVICE") == "cpu"
    ):
        return "cpu"
    return device


class _Worker:
    def __init__(self, release: str, device: str, cases: dict, pythonpath: Path | None = None):
        """``pythonpath``: the folder holding this side's vllm/ (a patched copy); None: the release
        itself."""
        if pythonpath is None:
            pythonpath = release_trees.tree(release)
        env = release_trees.environment(pythonpath)
        env["VLLM_TARGET_DEVICE"] = platform_for(device, env)
        self.release = release
        self.process = interrupts.popen(
            [sys.executable, "-m", "gdn_review.harness.timing"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.cases, self.device = cases, device

    def wait_ready(self) -> None:
        """Send the cases and wait for the warm-up (workers start side by side, then this)."""
        ready = self.ask({"cases": self.cases, "device": self.device})
        self.environment, self.warm_ns = ready["environment"], ready["warm_ns"]

    def ask(self, request: dict) -> dict:
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            raise BenchError(
                f"the timing worker for vLLM {self.release} stopped (exit {self.process.poll()})"
            )
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


@dataclasses.dataclass(frozen=True)
class BenchOptions:
    """How the A/B rounds run: on which device, and when they stop."""

    device: str = "cpu"
    max_seconds: float = 90.0  # stop adding rounds after this long, tight or not
    tolerance: float = 0.01  # or once every case's 95% half-interval is this narrow
    round_seconds: float = 0.15  # calls per case per round: about this long of build()
    min_rounds: int = 4
    resamples: int = 1000
    seed: int = 0


def bench(
    cases: dict[str, dict],
    base: str,
    head: str,
    options: BenchOptions = BenchOptions(),
    say: Callable[[str], None] = lambda line: None,
    paths: dict[str, Path] | None = None,
) -> dict:
    """Interleaved A/B rounds until every case's interval is within ``tolerance`` or time runs out.

    ``paths``: side name (``base``, ``head``) -> the folder holding that side's vllm/
    (an open PR's patched copy); a side not named loads its release.
    """
    if not cases:
        raise BenchError("no cases to time")
    started = time.monotonic()
    workers = []
    try:
        for side, release in (("base", base), ("head", head)):
            say(f"starting a timing worker for vLLM {release} ({options.device})")
            workers.append(_Worker(release, options.device, cases, (paths or {}).get(side)))
        for worker in workers:  # both import vLLM at once; only the rounds must not overlap
            worker.wait_ready()
        # Calls per case per round: about round_seconds of build() each, 5 to 200 calls.
        slowest = {case: max(1, *(w.warm_ns[case] for w in workers)) for case in cases}
        per_call = options.round_seconds * 1e9
        repeats = {case: max(5, min(200, int(per_call / ns))) for case, ns in slowest.items()}
        rng = random.Random(options.seed)
        timings, rounds, tight = _time_rounds(workers, repeats, options, rng, started, say)
        environments = {w.release: w.environment for w in workers}
    except BaseException:
        for worker in workers:  # now: a worker left to end on its own finishes its request first
            interrupts.stop(worker.process)
        raise
    finally:
        for worker in workers:
            worker.close()
    per_case = [timing.summary(options.resamples, rng) for timing in timings.values()]
    base_sets = [t.base_ns for t in timings.values()]
    head_sets = [t.head_ns for t in timings.values()]
    low, high = bootstrap_ratio(base_sets, head_sets, options.resamples, rng)
    pooled = _median_ratio(base_sets, head_sets)
    return {
        "base": base,
        "head": head,
        "device": options.device,
        "rounds": rounds,
        "repeats_per_round": repeats,
        "stopped": "intervals tight" if tight else f"time cap ({options.max_seconds:g} s)",
        "seconds": round(time.monotonic() - started, 1),
        "cases": per_case,
        "pooled": {"ratio": round(pooled, 4), "ci95": [round(low, 4), round(high, 4)]},
        "verdict": verdict(low, high),
        "environments": environments,
    }


def _time_rounds(
    workers: list[_Worker],
    repeats: dict[str, int],
    options: BenchOptions,
    rng: random.Random,
    started: float,
    say: Callable[[str], None],
) -> tuple[dict[str, CaseTiming], int, bool]:
    """(timings, rounds, whether every interval is tight): rounds alternate which side goes first
    (A B, B A, ...) and stop, after ``min_rounds``, once tight or past ``max_seconds``."""
    timings = {case: CaseTiming(case, [], []) for case in repeats}
    rounds = 0
    while True:
        rounds += 1
        order = workers if rounds % 2 else workers[::-1]
        for case in repeats:
            for worker in order:
                samples = worker.ask({"case": case, "repeats": repeats[case]})["ns"]
                target = timings[case].base_ns if worker is workers[0] else timings[case].head_ns
                target.extend(samples)
        elapsed = time.monotonic() - started
        if rounds < options.min_rounds:
            continue
        widths = []
        for timing in timings.values():
            low, high = bootstrap_ratio([timing.base_ns], [timing.head_ns], 200, rng)
            widths.append((high - low) / 2)
        tight = max(widths) <= options.tolerance
        say(f"round {rounds}: {elapsed:.0f} s, widest 95% half-interval {max(widths):.3f}")
        if tight or elapsed >= options.max_seconds:
            return timings, rounds, tight


def write_evidence(path: Path, results: dict[int, dict]) -> None:
    """Bench results as an evidence file the report merges (no tests, a ``bench`` part per
    record)."""
    from gdn_review.run import evidence_file

    first = next(iter(results.values()))
    by_record = {
        str(number): result
        for number, result in sorted(results.items(), key=lambda item: key_order(item[0]))
    }
    finished = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime())
    environment = first["environments"].get(first["head"], {})
    evidence_file.write(path, evidence_file.bench_document(by_record, finished, environment))


DIFF_SIDE = "+diff"  # the head side of an open PR: its base release with its diff applied


def sides(path: Path, record, pair: str | None) -> tuple[str, str, Path | None]:
    """(base, head, diff) to time for one record: ``--releases``, else the latency check's, else the
    record's releases.

    An open PR (its change in no release) is timed as its base release against
    ``BASE+diff``: the same release with the PR's diff beside the record
    (``kb/N.diff``) applied; without that file, BenchError says where it goes.
    """
    if pair:
        try:
            base, head = (part.strip() for part in pair.split(","))
        except ValueError:
            raise BenchError(
                f"--releases takes BASE,HEAD (two release numbers), got {pair!r}"
            ) from None
        return base, head, None
    base, head = record.latency_releases()
    if base and not head and record.is_open:
        diff = unified_diff.stored_beside(path)  # PatchError: a link or a folder there
        if diff is None:
            raise DiffNeeded(
                f"{path}: {record.label} is open, so no release has its change: "
                f"bench times vLLM {base} against {base} "
                "with the PR's diff, which is not stored; put it beside the "
                f"record as {Path(path).with_suffix('.diff')} "
                f"(`gh pr diff {record.key} > {Path(path).with_suffix('.diff')}`), or "
                "give --releases BASE,HEAD"
            )
        return base, base + DIFF_SIDE, diff
    if not base or not head:
        raise BenchError(
            f"{path}: the record has no base and head release; give --releases BASE,HEAD"
        )
    return base, head, None


@dataclasses.dataclass(frozen=True)
class _Planned:
    """One record to time: its two sides (``diff``: an open PR's head side) and its cases."""

    path: Path
    record: object
    base: str
    head: str
    diff: Path | None
    cases: dict[str, dict]


def _plan(
    records: dict, named: bool, pair: str | None, case_ids: tuple[str, ...], say
) -> list[_Planned]:
    """Every record to time, with its sides and cases, before any timing: bad input stops here.

    The records with a latency claim, or every named one (``named``: --record was given); an
    open PR without its diff is skipped, saying so, unless it was named.
    """
    from gdn_review.generate import module_context

    chosen = [
        (path, record)
        for path, record in sorted(records.items(), key=lambda item: item[1].sort_key)
        if record.latency_check is not None or named
    ]
    if not chosen:
        raise BenchError("no record has a latency claim; name one with --record N")
    if case_ids and len(chosen) > 1:
        raise BenchError("--case needs a single --record")
    planned = []
    for path, record in chosen:
        try:
            base, head, diff = sides(path, record, pair)
        except DiffNeeded as error:
            if named:
                raise
            say(f"skipped: {error}")  # every record with a latency claim: the others are timed
            continue
        cases = module_context(record, path.name)["cases"]
        latency = record.latency_check
        wanted = list(case_ids) or (list(latency.cases) if latency is not None else list(cases))
        unknown = [c for c in wanted if c not in cases]
        if unknown:
            raise BenchError(f"no case {', '.join(unknown)} in {path} (cases: {', '.join(cases)})")
        planned.append(_Planned(path, record, base, head, diff, {c: cases[c] for c in wanted}))
    if not planned:
        raise BenchError(
            "no record to time: each one with a latency claim is an open PR "
            "without its diff stored (see above)"
        )
    return planned


def _time_record(plan: _Planned, options: BenchOptions, say: Callable[[str], None]) -> dict:
    """One record's bench; an open PR's two sides load a copy of its base release's files, one
    with its diff applied (``patched_tree.release_with_diff``)."""
    from gdn_review.run.evidence_file import record_sha256

    stamp = record_sha256(plan.path)  # the record as it is when its timing starts
    label, diff = plan.record.label, plan.diff
    folder = Path(tempfile.mkdtemp(prefix="gdn-review-bench-")) if diff is not None else None
    try:
        paths = None
        if diff is not None:
            say(
                f"{label}: its diff {diff} applied onto a copy of vLLM "
                f"{plan.base}'s files (both sides load that copy)"
            )
            unpatched, patched = patched_tree.release_with_diff(diff, plan.base, folder, say=say)
            paths = {"base": unpatched, "head": patched}
        say(
            f"{label}: timing build() on {len(plan.cases)} case(s): vLLM "
            f"{plan.base} (base) vs {plan.head} (head), {options.device}"
        )
        result = bench(
            plan.cases, plan.base, plan.head, options, lambda line: say(f"  {line}"), paths
        )
    finally:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    if diff is not None:
        result["diff"] = str(diff)
        result["diff_sha256"] = hashlib.sha256(Path(diff).read_bytes()).hexdigest()
    result["record_sha256"] = stamp
    return result


def bench_records(
    records: dict,
    named: bool,
    pair: str | None,
    case_ids: tuple[str, ...],
    evidence_path: Path,
    options: BenchOptions,
    say: Callable[[str], None] = print,
    show: Callable[[str], None] = print,
) -> dict[int, dict]:
    """``gdn-review bench``: time each chosen record's cases between its two releases; write the
    evidence.

    ``say`` gets progress, ``show`` the result table of each record.
    """
    results = {}
    for plan in _plan(records, named, pair, case_ids, say):
        result = _time_record(plan, options, say)
        for line in result_lines(plan.record.key, result):
            show(line)
        results[plan.record.key] = result
    interrupts.finishing()  # every record was timed: the evidence is written whatever comes now
    write_evidence(evidence_path, results)
    return results


def result_lines(key: int | str, result: dict) -> list[str]:
    """One record's bench as a table: per case both medians and the ratio with its interval, then
    pooled."""
    base, head = result["base"], result["head"]
    lines = [
        f"{key_label(key)}  {'case':<28} {base + ' µs':>12} "
        f"{head + ' µs':>12} {'head/base':>10}  95% interval"
    ]
    for row in result["cases"]:
        low, high = row["ci95"]
        lines.append(
            f"         {row['case']:<28} {row['base_median_us']:>12.1f} "
            f"{row['head_median_us']:>12.1f} {row['ratio']:>10.3f}  "
            f"[{low:.3f}, {high:.3f}]"
        )
    low, high = result["pooled"]["ci95"]
    lines.append(
        f"         {'pooled (geometric mean)':<28} {'':>12} {'':>12} "
        f"{result['pooled']['ratio']:>10.3f}  [{low:.3f}, {high:.3f}]"
    )
    lines.append(
        f"         verdict: {result['verdict']} ({result['rounds']} "
        f"rounds, {result['seconds']} s, stopped: {result['stopped']})"
    )
    return lines
