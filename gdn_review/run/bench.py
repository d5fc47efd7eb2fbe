"""A/B latency of ``build()`` between two vLLM releases on the same machine.

Each release runs in its own worker process (``harness.timing``) with its
Python sources first on ``PYTHONPATH`` (the release cache; the installed
release as it is). Rounds interleave the releases, alternating which goes
first (A B, B A, ...), so drift of the machine falls on both. After a warm-up,
rounds continue until every case's 95% interval of the head/base ratio of
medians is tight, or the time cap is reached. Intervals are bootstrap
percentiles (resampling each release's samples); the pooled ratio is the
geometric mean over cases.

What it measures is ``build()``'s latency, the mechanism a throughput claim
names; an end-to-end throughput figure needs a serving benchmark.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from gdn_review.common import interrupts, release_cache
from gdn_review.kb.subjects import key_label, key_order

SUPPORTED, NOISE, CONTRADICTED = "supported", "not distinguishable from noise", "contradicted"
CUDA_ON_CPU_PLATFORM = "GDN_REVIEW_CUDA_ON_CPU_PLATFORM"  # read by harness.cuda_on_cpu_platform


class BenchError(Exception):
    """The benchmark cannot run (release unavailable, worker died): said for people."""


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
    logs = [math.log(statistics.median(h) / statistics.median(b)) for b, h in zip(base_sets, head_sets)]
    return math.exp(sum(logs) / len(logs))


def bootstrap_ratio(base_sets: list[list[int]], head_sets: list[list[int]], resamples: int, rng: random.Random) -> tuple[float, float]:
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
    """vLLM's platform for a worker timing ``device``: the device's own, except a bundle's CUDA tensors on the CPU platform."""
    if device == "cuda" and env.get(CUDA_ON_CPU_PLATFORM) == "1" and env.get("VLLM_TARGET_DEVICE") == "cpu":
        return "cpu"
    return device


class _Worker:
    def __init__(self, release: str, device: str, cases: dict):
        env = dict(os.environ)
        if release != release_cache.installed():
            path = str(release_cache.ensure(release).path)
            env["PYTHONPATH"] = path + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["VLLM_TARGET_DEVICE"] = platform_for(device, env)
        self.release = release
        self.process = interrupts.popen(
            [sys.executable, "-m", "gdn_review.harness.timing"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
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
            raise BenchError(f"the timing worker for vLLM {self.release} stopped (exit {self.process.poll()})")
        return json.loads(line)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def bench(
    cases: dict[str, dict],
    base: str,
    head: str,
    device: str = "cpu",
    round_seconds: float = 0.15,
    min_rounds: int = 4,
    max_seconds: float = 90.0,
    tolerance: float = 0.01,
    resamples: int = 1000,
    seed: int = 0,
    say: Callable[[str], None] = lambda line: None,
) -> dict:
    """Interleaved A/B rounds until every case's interval is within ``tolerance`` or time runs out."""
    if not cases:
        raise BenchError("no cases to time")
    started = time.monotonic()
    workers = []
    try:
        for release in (base, head):
            say(f"starting a timing worker for vLLM {release} ({device})")
            workers.append(_Worker(release, device, cases))
        for worker in workers:  # both import vLLM at once; only the rounds must not overlap
            worker.wait_ready()
        timings = {case: CaseTiming(case, [], []) for case in cases}
        # Calls per case per round: about round_seconds of build() each, 5 to 200 calls.
        repeats = {
            case: max(5, min(200, int(round_seconds * 1e9 / max(1, max(w.warm_ns[case] for w in workers)))))
            for case in cases
        }
        rng = random.Random(seed)
        rounds = 0
        while True:
            rounds += 1
            order = workers if rounds % 2 else workers[::-1]
            for case in cases:
                for worker in order:
                    samples = worker.ask({"case": case, "repeats": repeats[case]})["ns"]
                    target = timings[case].base_ns if worker is workers[0] else timings[case].head_ns
                    target.extend(samples)
            elapsed = time.monotonic() - started
            if rounds < min_rounds:
                continue
            widths = []
            for timing in timings.values():
                low, high = bootstrap_ratio([timing.base_ns], [timing.head_ns], 200, rng)
                widths.append((high - low) / 2)
            tight = max(widths) <= tolerance
            say(f"round {rounds}: {elapsed:.0f} s, widest 95% half-interval {max(widths):.3f}")
            if tight or elapsed >= max_seconds:
                break
        environments = {w.release: w.environment for w in workers}
    except BaseException:
        for worker in workers:  # now: a worker left to end on its own finishes its request first
            interrupts.stop(worker.process)
        raise
    finally:
        for worker in workers:
            worker.close()
    per_case = [timing.summary(resamples, rng) for timing in timings.values()]
    low, high = bootstrap_ratio([t.base_ns for t in timings.values()], [t.head_ns for t in timings.values()], resamples, rng)
    pooled = _median_ratio([t.base_ns for t in timings.values()], [t.head_ns for t in timings.values()])
    return {
        "base": base,
        "head": head,
        "device": device,
        "rounds": rounds,
        "repeats_per_round": repeats,
        "stopped": "intervals tight" if tight else f"time cap ({max_seconds:g} s)",
        "seconds": round(time.monotonic() - started, 1),
        "cases": per_case,
        "pooled": {"ratio": round(pooled, 4), "ci95": [round(low, 4), round(high, 4)]},
        "verdict": verdict(low, high),
        "environments": environments,
    }


def write_evidence(path: Path, results: dict[int, dict]) -> None:
    """Bench results as an evidence file the report merges (no tests, a ``bench`` section per record)."""
    from gdn_review.common.files import atomic_write
    from gdn_review.run.evidence_parts import EVIDENCE_FORMAT

    first = next(iter(results.values()))
    data = {
        "format": EVIDENCE_FORMAT,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
        "environment": first["environments"].get(first["head"], {}),
        "tests": [],
        "bench": {str(number): result for number, result in sorted(results.items(), key=lambda item: key_order(item[0]))},
    }
    atomic_write(Path(path), json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")


def latency_records(records: dict, named: bool) -> list[tuple[Path, object, object]]:
    """(path, record, latency check or None) of the records to bench: those with a latency claim,
    or every named record (``named``: --record was given)."""
    chosen = []
    for path, record in sorted(records.items(), key=lambda item: item[1].sort_key):
        latency = next((c.check for c in record.claims if c.check.kind == "latency"), None)
        if latency is not None or named:
            chosen.append((path, record, latency))
    return chosen


def bench_command(
    records: dict,
    named: bool,
    pair: str | None,
    device: str,
    case_ids: tuple[str, ...],
    max_seconds: float,
    tolerance: float,
    evidence_path: Path,
    say: Callable[[str], None] = print,
    show: Callable[[str], None] = print,
) -> dict[int, dict]:
    """``gdn-review bench``: time each chosen record's cases between its two releases; write the evidence.

    ``say`` gets progress, ``show`` the result table of each record.
    """
    from gdn_review.generate import module_context

    chosen = latency_records(records, named)
    if not chosen:
        raise BenchError("no record has a latency claim; name one with --record N")
    if case_ids and len(chosen) > 1:
        raise BenchError("--case needs a single --record")
    results = {}
    for path, record, latency in chosen:
        base = (latency.base if latency else None) or record.target.base_release
        head = (latency.head if latency else None) or record.target.head_release
        if pair:
            try:
                base, head = (part.strip() for part in pair.split(","))
            except ValueError:
                raise BenchError(f"--releases takes BASE,HEAD (two release numbers), got {pair!r}") from None
        if not base or not head:
            raise BenchError(f"{path}: the record has no base and head release; give --releases BASE,HEAD")
        cases = module_context(record, path.name)["cases"]
        wanted = list(case_ids) or (list(latency.cases) if latency is not None else list(cases))
        unknown = [c for c in wanted if c not in cases]
        if unknown:
            raise BenchError(f"no case {', '.join(unknown)} in {path} (cases: {', '.join(cases)})")
        say(f"{record.label}: timing build() on {len(wanted)} case(s): vLLM {base} (base) vs {head} (head), {device}")
        result = bench({c: cases[c] for c in wanted}, base, head, device=device, max_seconds=max_seconds,
                       tolerance=tolerance, say=lambda line: say(f"  {line}"))
        for line in result_lines(record.number, result):
            show(line)
        results[record.number] = result
    interrupts.finishing()  # every record was timed: the evidence is written whatever comes now
    write_evidence(evidence_path, results)
    return results


def result_lines(number: int, result: dict) -> list[str]:
    """One record's bench as a table: per case both medians and the ratio with its interval, then pooled."""
    base, head = result["base"], result["head"]
    lines = [f"{key_label(number)}  {'case':<28} {base + ' µs':>12} {head + ' µs':>12} {'head/base':>10}  95% interval"]
    for row in result["cases"]:
        low, high = row["ci95"]
        lines.append(f"         {row['case']:<28} {row['base_median_us']:>12.1f} {row['head_median_us']:>12.1f} {row['ratio']:>10.3f}  [{low:.3f}, {high:.3f}]")
    low, high = result["pooled"]["ci95"]
    lines.append(f"         {'pooled (geometric mean)':<28} {'':>12} {'':>12} {result['pooled']['ratio']:>10.3f}  [{low:.3f}, {high:.3f}]")
    lines.append(f"         verdict: {result['verdict']} ({result['rounds']} rounds, {result['seconds']} s, stopped: {result['stopped']})")
    return lines
