"""Benchmark: the generated suite's wall time before and after a change, side by side in one run.

Three configurations, each a fresh `python -m pytest` on CPU, run in alternating
rounds so that a busy machine slows them alike (medians reported):
  A. the PR records' generated modules of an earlier commit (--before, default
     af87e7e: before contract records and the new record properties), in a
     temporary git worktree;
  B. the same records' generated modules in this tree (the harness as it is now);
  C. this tree's whole generated suite (PR records and contract records).
Prints the medians and the ratios B/A (the same records: target within 1.5x) and
C/A (what the contract records add).

Usage: .venv/bin/python benchmarks/suite_growth.py [--before REF] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(tree: Path, modules: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GDN_"))}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-n",
        "0",
        *modules,
    ]
    started = time.monotonic()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(
            f"pytest failed in {tree} (exit {done.returncode}):\n{done.stdout[-2000:]}"
        )
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="af87e7e")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", dest="json_path", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gdn-review-before-") as scratch:
        before = Path(scratch) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(before), args.before],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            old = sorted(p.name for p in (before / "generated_tests").glob("test_pr_*.py"))
            configurations = {
                "A: PR records, before": (before, [f"generated_tests/{name}" for name in old]),
                "B: PR records, now": (ROOT, [f"generated_tests/{name}" for name in old]),
                "C: every record, now": (ROOT, ["generated_tests"]),
            }
            times: dict[str, list[float]] = {name: [] for name in configurations}
            for round_index in range(args.rounds):
                for name, (tree, modules) in configurations.items():
                    times[name].append(timed(tree, modules))
                    print(f"round {round_index + 1}: {name}: {times[name][-1]:.1f} s", flush=True)
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(before)], cwd=ROOT, capture_output=True
            )
    medians = {name: statistics.median(values) for name, values in times.items()}
    a, b, c = medians.values()
    result = {
        "before": args.before,
        "records_before": len(old),
        "medians_s": medians,
        "times_s": times,
        "ratio_same_records": round(b / a, 2),
        "ratio_with_contracts": round(c / a, 2),
    }
    for name, value in medians.items():
        print(f"{name}: median {value:.1f} s")
    print(
        f"same records, now / before: {b / a:.2f}x (target <= 1.5x); "
        f"with the contract records: {c / a:.2f}x"
    )
    if args.json_path:
        args.json_path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
