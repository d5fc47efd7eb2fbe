"""Benchmark: `gdn-review matrix --all` with shared sessions (one pytest session per release
and kind of run) against one session per record and release.

Both ways run the same generated modules on the same releases with the same
plugin and snapshots; only the number of interpreters that import vLLM and make
builders differs. Runs each way once, one after the other (never overlapping),
and prints both wall times, their ratio, and that every record's per-release
outcomes agree.

Usage: .venv/bin/python benchmarks/matrix_sessions.py [--since 0.28.0] [--jobs 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from gdn_review.common import release
from gdn_review.kb import is_draft, load_kb
from gdn_review.matrix import matrix, release_plan
from gdn_review.run import evidence_file
from gdn_review.run.selection import current_modules

ROOT = Path(__file__).resolve().parent.parent


def _outcomes(folder: Path, data: dict) -> dict:
    found = {}
    for entry in data["releases"]:
        tests = evidence_file.tests_of(folder / entry["evidence"]) if entry.get("evidence") else []
        found[entry["version"]] = sorted((t["nodeid"], t["outcome"]) for t in tests)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--since", default="0.28.0")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()

    kb = ROOT / "kb"
    records = {p: r for p, r in load_kb(kb).items() if not is_draft(r)}
    modules = current_modules(kb, records, ROOT / "generated_tests", False, print)
    installed = release.loaded_or_none()
    times, outcomes = {}, {}
    for shared in (True, False):
        with tempfile.TemporaryDirectory(prefix="gdn-matrix-bench-") as scratch:
            work = [
                matrix.Job(
                    r,
                    p,
                    modules[r.pr.number],
                    Path(scratch) / f"matrix-{r.pr.number}",
                    release_plan.plan(r, installed, None, options.since),
                )
                for p, r in sorted(records.items(), key=lambda item: item[1].pr.number)
            ]
            started = time.monotonic()
            results = matrix.run_matrices(
                work, installed, options.jobs, None, lambda line: None, share_sessions=shared
            )
            times[shared] = time.monotonic() - started
            outcomes[shared] = {
                n: _outcomes(job.out_dir, results[n])
                for n, job in ((j.record.pr.number, j) for j in work)
            }
        way = "shared sessions" if shared else "one session per record and release"
        print(f"{way}: {times[shared]:.1f} s", flush=True)
    ratio = times[True] / times[False]
    agree = outcomes[True] == outcomes[False]
    print(f"shared / separate wall time: {ratio:.2f}; outcomes agree: {agree}")
    if options.json:
        options.json.write_text(
            json.dumps(
                {
                    "shared_s": round(times[True], 1),
                    "separate_s": round(times[False], 1),
                    "ratio": round(ratio, 3),
                    "outcomes_agree": agree,
                },
                indent=1,
            )
            + "\n"
        )
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
