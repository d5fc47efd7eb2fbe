"""Benchmark: how long the generated suite takes on CPU, and where the time goes.

Runs, each in a fresh interpreter and --repeat times (median reported):
  1. import vLLM's GDN backend (what every run pays first),
  2. import + build every builder the generated modules need,
  3. the whole generated suite under pytest.
Prints the suite time and the share spent importing vLLM and building builders.
The target (issue #2): the whole generated suite under 60 s on a 2-core machine.

With --vllm-tests FILE (vLLM's own tests/v1/attention/test_gdn_metadata_builder.py,
inside a checkout of vLLM's tests/ at the installed release), it also times that file
and the generated modules of the records that state its tests (`upstream_tests`),
side by side in one run, and prints their ratio (target: within 1.5x). vLLM's file
builds its config from the Hugging Face hub (Qwen/Qwen3.5-0.8B) and imports
tests.v1.attention.utils: where either is missing the run says so and stops.

Usage: .venv/bin/python benchmarks/suite_time.py [--repeat 3] [--json out.json] [--vllm-tests FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IMPORT_ONLY = """
import time
t = time.perf_counter()
from gdn_review import harness
harness.prepare_platform()
import vllm.v1.attention.backends.gdn_attn
print(time.perf_counter() - t)
"""

IMPORT_AND_BUILD = """
import importlib.util, sys, time
t = time.perf_counter()
from gdn_review import harness
harness.prepare_platform()
import vllm.v1.attention.backends.gdn_attn
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("generated", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    harness.prepare_builders("cpu", module.CASES.values())
print(time.perf_counter() - t)
"""


def timed_python(code: str, *args: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return float(out.strip().splitlines()[-1])


def timed_suite() -> float:
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "generated_tests", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"generated suite failed (exit {result.returncode}):\n{result.stdout[-2000:]}")
    return elapsed


def timed_pytest(*paths: str, cwd: Path = ROOT) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", "-o", "addopts="],
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - start, done


def side_by_side(vllm_tests: Path, repeat: int) -> dict:
    """vLLM's own test file against the generated modules that state its tests."""
    from gdn_review.kb import load_kb

    name = vllm_tests.name
    numbers = sorted(
        record.pr.number
        for record in load_kb(ROOT / "kb").values()
        if any(Path(t.test.split("::")[0]).name == name for t in record.upstream_tests)
    )
    ours = [str(ROOT / "generated_tests" / f"test_pr_{n}.py") for n in numbers]
    checkout = vllm_tests.resolve().parents[3]  # <checkout>/tests/v1/attention/<file>
    theirs_s, done = timed_pytest(str(vllm_tests.resolve()), cwd=checkout)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
        sys.exit(f"vLLM's {name} does not run here (exit {done.returncode}); no ratio:\n{tail}")
    samples = {"vllm": [theirs_s], "generated": []}
    for _ in range(repeat):
        samples["generated"].append(timed_pytest(*ours)[0])
        if len(samples["vllm"]) < repeat:
            samples["vllm"].append(timed_pytest(str(vllm_tests.resolve()), cwd=checkout)[0])
    median = {k: statistics.median(v) for k, v in samples.items()}
    ratio = median["generated"] / median["vllm"]
    met = "met" if ratio <= 1.5 else "NOT met"
    print(
        f"vLLM's {name}: {median['vllm']:.1f} s; "
        f"generated modules of #{', #'.join(map(str, numbers))}: "
        f"{median['generated']:.1f} s; ratio {ratio:.2f} (target <= 1.5: {met})"
    )
    return {"samples": samples, "median": median, "ratio": ratio, "records": numbers}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    parser.add_argument(
        "--vllm-tests", type=Path, help="vLLM's test_gdn_metadata_builder.py: time it beside ours"
    )
    args = parser.parse_args()
    if args.vllm_tests:
        result = side_by_side(args.vllm_tests, args.repeat)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return
    modules = sorted(str(p) for p in (ROOT / "generated_tests").glob("test_*.py"))
    timed_suite()  # warm the file cache and vLLM's own caches once
    samples = {"import_vllm": [], "import_and_builders": [], "suite": []}
    for index in range(args.repeat):
        samples["import_vllm"].append(timed_python(IMPORT_ONLY))
        samples["import_and_builders"].append(timed_python(IMPORT_AND_BUILD, *modules))
        samples["suite"].append(timed_suite())
        print(f"run {index + 1}/{args.repeat}: suite {samples['suite'][-1]:.1f} s", file=sys.stderr)
    median = {name: statistics.median(values) for name, values in samples.items()}
    builders = median["import_and_builders"] - median["import_vllm"]
    rest = median["suite"] - median["import_and_builders"]
    print(
        f"machine: {os.cpu_count()} cores; {len(modules)} generated module(s); "
        f"median of {args.repeat}"
    )
    print(f"generated suite (pytest, wall)  {median['suite']:7.2f} s   100%")
    importing = median["import_vllm"]
    print(
        f"  importing vLLM                {importing:7.2f} s   {importing / median['suite']:5.1%}"
    )
    print(f"  building builders             {builders:7.2f} s   {builders / median['suite']:5.1%}")
    print(f"  everything else (tests, pytest) {rest:5.2f} s   {rest / median['suite']:5.1%}")
    met = "met" if median["suite"] < 60 else "NOT met"
    print(f"target: under 60 s -> {met} ({median['suite'] / 60:.0%} of it)")
    if args.json:
        args.json.write_text(
            json.dumps({"samples": samples, "median": median, "cores": os.cpu_count()}, indent=2)
        )


if __name__ == "__main__":
    main()
