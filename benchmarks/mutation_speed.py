"""Benchmark: the same mutants per-process (a fresh pytest interpreter each) and in-process
(forked).

Per-process is what a naive mutation runner does: one fresh interpreter per
mutant, importing vLLM and building builders every time. In-process is
`gdn-review mutate`: vLLM imported and the suite warmed once, then one forked
child per mutant. Both ways run the same tests with the same kill rules (the
same plugin), so only the per-mutant overhead differs. Prints each mutant's
time both ways, the per-mutant medians, their ratio, and that the verdicts agree.

Usage: .venv/bin/python benchmarks/mutation_speed.py [--record 52078] [--sample 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from gdn_review.kb import load_record
from gdn_review.mutation import catalogue_for, runner
from gdn_review.run import suite

ROOT = Path(__file__).resolve().parent.parent


def _in_process(sample: list, found, args: list[str]) -> tuple[dict, float]:
    """Each mutant's result run as `gdn-review mutate` runs it (a forked child of a warmed
    process), and the seconds the warm-up took."""
    runner.prepare_cpu()
    from gdn_review.harness import mutation as loader

    with tempfile.TemporaryDirectory() as scratch:
        started = time.monotonic()
        runner.baseline(args, Path(scratch) / "evidence.json")
        warm_up = time.monotonic() - started
    for mutant in sample:
        mutant.code = loader.compile_source(found.target_file, mutant.source)
    in_process = {}
    runner.run_forked(
        sample,
        found.target_file,
        args,
        jobs=1,
        timeout=300,
        on_result=lambda m, r: in_process.__setitem__(m.id, r),
    )
    for mutant in sample:
        result = in_process[mutant.id]
        print(f"  in-process   {result['duration_s']:6.2f} s  {result['status']:<9} {mutant.id}")
    return in_process, warm_up


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--record", type=int, default=52078)
    parser.add_argument(
        "--sample",
        type=int,
        default=5,
        help="mutants to time both ways (spread over the catalogue)",
    )
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()

    path = ROOT / "kb" / f"{options.record}.yaml"
    record = load_record(path)
    found = catalogue_for(path, record, say=lambda line: print(line, file=sys.stderr))
    runnable = found.runnable()
    step = max(1, len(runnable) // max(1, options.sample))
    sample = runnable[::step][: options.sample]
    args = suite.test_args([ROOT / "generated_tests" / f"test_pr_{options.record}.py"], None)
    print(
        f"{len(sample)} of {len(runnable)} runnable mutants of PR #{options.record} "
        f"on vLLM {found.release}"
    )

    per_process = {}
    for mutant in sample:
        per_process[mutant.id] = runner.run_fresh_process(
            found.target_file, mutant.source, args, cwd=ROOT
        )
        result = per_process[mutant.id]
        print(
            f"  per-process  {result['duration_s']:6.2f} s  {result['status']:<9} {mutant.id}",
            flush=True,
        )

    in_process, warm_up = _in_process(sample, found, args)

    slow = statistics.median(r["duration_s"] for r in per_process.values())
    fast = statistics.median(r["duration_s"] for r in in_process.values())
    agree = all(per_process[i]["status"] == in_process[i]["status"] for i in per_process)
    print(
        f"median per mutant: per-process {slow:.2f} s, in-process {fast:.2f} s "
        f"-> {slow / fast:.1f}x faster in-process"
    )
    print(
        f"in-process paid once: {warm_up:.1f} s (import vLLM, build builders, unmutated suite); "
        f"verdicts agree: {agree}"
    )
    if options.json:
        options.json.write_text(
            json.dumps(
                {
                    "per_process": per_process,
                    "in_process": in_process,
                    "ratio": slow / fast,
                    "warm_up_s": warm_up,
                    "agree": agree,
                },
                indent=1,
            )
        )
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
