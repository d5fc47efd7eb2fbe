"""How long `gdn-review review` takes for one change against the whole KB, and where the time goes.

The change is PR #52078's: the 0.28.0 -> 0.29.0 diff of the builder's file, from the
release cache, reviewed onto 0.28.0 with every mutant of its added lines. The first
run warms the caches (release cache entry, vLLM's model-info cache); the later runs
are the measurement.

    .venv/bin/python benchmarks/review_time.py [--runs 2]
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gdn_review.common import release_trees

ROOT = Path(__file__).resolve().parents[1]
TARGET = "vllm/v1/attention/backends/gdn_attn.py"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=2, help="runs after the warm-up run")
    args = parser.parse_args()
    old, new = (release_trees.entry(v).path / TARGET for v in ("0.28.0", "0.29.0"))
    with tempfile.TemporaryDirectory() as scratch:
        diff = Path(scratch) / "pr-52078.diff"
        diff.write_text(
            "".join(
                difflib.unified_diff(
                    old.read_text().splitlines(True),
                    new.read_text().splitlines(True),
                    f"a/{TARGET}",
                    f"b/{TARGET}",
                )
            )
        )
        for run in range(args.runs + 1):
            started = time.monotonic()
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "gdn_review.cli",
                    "review",
                    str(diff),
                    "--onto",
                    "0.28.0",
                    "--out",
                    scratch,
                    "--fail-on",
                    "",
                ],
                cwd=ROOT,
                capture_output=True,
                text=True,
            )
            wall = time.monotonic() - started
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                return 1
            data = json.loads((Path(scratch) / "pr-52078.json").read_text())
            warm = re.search(r"imported and warm \((\d+) s\)", done.stderr)
            sides = max(data["run"]["sides_s"].values())
            mutants = [m["duration_s"] or 0 for m in data["mutants"]]
            label = "warm-up run" if run == 0 else f"run {run}"
            warm_s = warm.group(1) if warm else "?"
            print(
                f"{label}: {wall:.1f} s wall; vLLM import and warm-up {warm_s} s; "
                f"both sides side by side {sides:.1f} s; "
                f"{len(mutants)} mutants {sum(mutants):.1f} s of child time "
                f"(2 at a time); {data['run']['mode']}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
