"""Benchmark: the generated suite against vLLM's own GDN builder tests, side by side (issue #46).

The acceptance item: the generated suite stays within 1.25x the wall time of vLLM's own GDN
builder tests (``tests/v1/attention/test_gdn_metadata_builder.py``), measured side by side in one
run. What is compared is the wall time of one pytest process per side, on CPU, one worker each
(``-n 0``), from start to exit: interpreter, imports (torch, vLLM), collection, every test,
teardown. Not per test: the generated suite runs many more checks (its counts are printed).

- **vLLM's side**: vLLM's test file of the installed release, run as its own pytest session in
  a temporary ``tests/v1/attention/`` tree. The wheel ships no ``tests/v1/attention/utils.py``
  and the file's ``create_vllm_config`` reads a model from the Hugging Face hub, so a **local
  stand-in** (``benchmarks/vllm_utils_standin.py``) takes that module's place: its
  ``create_vllm_config`` builds the harness's tiny Qwen3-Next config. The output names it.
  vLLM's ``tests/conftest.py`` is not loaded (it is not in the wheel either). Tests that the KB
  states in records of open PRs (the installed release lacks their change: #55504's) are
  deselected and named; CUDA-only tests skip by themselves.
- **Our side** (``--selection``): ``family`` (default, the gate): the modules of records with a
  case or a claim's check naming a ``builder:`` subclass (the family's cases and mirror
  claims: the builder's family as this suite states it); ``all``: every module in
  ``generated_tests/``, the suite as CI runs it (22 records' worth, most of them about other
  PRs: 2.05x on a quiet 2-CPU machine, 2026-12-04); ``upstream``: the modules of records that
  state tests of vLLM's file (like for like).

Each side runs once to warm the file cache, then ``--repeat`` rounds, interleaved and in
alternating order. The ratio is median(ours) / median(vLLM's); the spread is the lowest and
highest ratio of one round's pair.

Where vLLM's file comes from, first found: ``--vllm-tests FILE``; the cache
``$GDN_REVIEW_CACHE/vllm-tests/<ref>/`` (default ``~/.cache/gdn-review``); a git directory of
vLLM (``--vllm-git DIR``, ``$GDN_REVIEW_VLLM_GIT``, or a mirror under ``/work/.mirror``:
``git show <ref>:tests/v1/attention/test_gdn_metadata_builder.py``); GitHub over https. The ref
is ``--vllm-ref`` (default ``v<installed version>``). Each fetched copy is cached with a
``SOURCE`` line naming its origin, which the output prints.

Usage: .venv/bin/python benchmarks/family_vs_vllm_tests.py [--repeat 3]
       [--selection all|family|upstream]
       [--vllm-tests FILE | --vllm-ref REF | --vllm-git DIR] [--json OUT]
Exit: 0 within 1.25x; 1 above; 2 no comparison (vLLM's file cannot be had, e.g. no network,
or a side fails).
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

TEST_PATH = "tests/v1/attention/test_gdn_metadata_builder.py"
TARGET = 1.25
PYTEST_ARGS = ["-q", "-n", "0", "-p", "no:randomly", "-p", "no:cacheprovider", "--gdn-no-evidence"]
COUNT = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)")


def cache_dir(ref: str) -> Path:
    base = os.environ.get("GDN_REVIEW_CACHE") or os.path.join(
        os.environ.get("HOME") or os.path.expanduser("~"), ".cache", "gdn-review"
    )
    return Path(base) / "vllm-tests" / ref.replace("/", "_")


def _store(ref: str, text: str, source: str) -> Path:
    folder = cache_dir(ref)
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / Path(TEST_PATH).name
    partial = target.with_suffix(".tmp")
    partial.write_text(text, encoding="utf-8")
    partial.replace(target)
    (folder / "SOURCE").write_text(source + "\n", encoding="utf-8")
    return target


def _from_git(ref: str, git_dirs: list[str]) -> Path | None:
    for git_dir in git_dirs:
        done = subprocess.run(
            ["git", "--git-dir", git_dir, "show", f"{ref}:{TEST_PATH}"],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            commit = subprocess.run(
                ["git", "--git-dir", git_dir, "rev-parse", f"{ref}^{{commit}}"],
                capture_output=True,
                text=True,
            ).stdout.strip()
            return _store(
                ref, done.stdout, f"vllm-project/vllm {ref} ({commit}) {TEST_PATH}, from {git_dir}"
            )
    return None


def _from_github(ref: str) -> tuple[Path | None, str]:
    url = f"https://raw.githubusercontent.com/vllm-project/vllm/{ref}/{TEST_PATH}"
    try:
        with urllib.request.urlopen(url, timeout=20) as response:  # noqa: S310 (a fixed https URL)
            text = response.read().decode("utf-8")
    except OSError as error:
        return None, f"{url}: {error}"
    return _store(ref, text, f"vllm-project/vllm {ref} {TEST_PATH}, from {url}"), url


def vllm_test_file(args) -> tuple[Path, str]:
    """vLLM's test file and a line naming where it came from; exit 2 where it cannot be had."""
    if args.vllm_tests:
        path = args.vllm_tests.resolve()
        if not path.is_file():
            sys.exit(f"no file {path}")
        source = path.parent / "SOURCE"
        return path, source.read_text().strip() if source.is_file() else f"{path} (given)"
    ref = args.vllm_ref or f"v{importlib.metadata.version('vllm')}"
    cached = cache_dir(ref) / Path(TEST_PATH).name
    if cached.is_file():
        source = cached.parent / "SOURCE"
        return cached, (
            source.read_text().strip() if source.is_file() else str(cached)
        ) + " (cached)"
    tried = [f"cache {cached}"]
    git_dirs = [d for d in [args.vllm_git, os.environ.get("GDN_REVIEW_VLLM_GIT")] if d]
    git_dirs += sorted(glob.glob("/work/.mirror/vllm-project+vllm*/*.git")) + sorted(
        glob.glob("/work/.mirror/vllm-project+vllm*")
    )
    found = _from_git(ref, git_dirs)
    if found is not None:
        return found, (found.parent / "SOURCE").read_text().strip()
    tried += [f"git {d}" for d in git_dirs] or ["no vLLM git directory (--vllm-git)"]
    found, note = _from_github(ref)
    if found is not None:
        return found, (found.parent / "SOURCE").read_text().strip()
    tried.append(note)
    print(
        f"vLLM's {TEST_PATH} at {ref} cannot be had here (no network?); no comparison. Tried:\n  "
        + "\n  ".join(tried)
        + "\nGive it with --vllm-tests FILE (a checkout at the release tag) or --vllm-git DIR.",
        file=sys.stderr,
    )
    sys.exit(2)


def kb_selection(selection: str) -> tuple[list[str], list[str]]:
    """Our modules for ``selection``, and vLLM's test ids that open-PR records state."""
    from gdn_review.kb import load_kb
    from gdn_review.kb.errors import RecordErrors

    try:
        records = list(load_kb(ROOT / "kb").values())
    except RecordErrors as errors:
        print(f"the KB does not load, so no selection; no comparison:\n{errors}", file=sys.stderr)
        sys.exit(2)
    name = Path(TEST_PATH).name
    deselect = sorted(
        upstream.test
        for record in records
        if record.is_open
        for upstream in record.upstream_tests
        if Path(upstream.test.split("::")[0]).name == name
    )
    modules = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "generated_tests").glob("test_*.py"))
    if selection == "all":
        return modules, deselect

    def module_of(record) -> str:
        if record.pr is not None:
            return f"generated_tests/test_pr_{record.pr.number}.py"
        return f"generated_tests/test_contract_{record.contract.id}.py"

    if selection == "upstream":
        chosen = [
            r
            for r in records
            if any(Path(u.test.split("::")[0]).name == name for u in r.upstream_tests)
        ]
    else:  # family
        chosen = [
            r
            for r in records
            if any(getattr(c, "builder", None) for c in r.cases)
            or any(getattr(c.check, "builder", None) for c in r.claims)
        ]
    picked = sorted({module_of(r) for r in chosen} & set(modules))
    if not picked:
        sys.exit(f"no generated module for --selection {selection}")
    return picked, deselect


def vllm_tree(test_file: Path) -> Path:
    """A temporary vLLM-like tests/ tree: vLLM's file; the stand-in as tests.v1.attention.utils."""
    top = Path(tempfile.mkdtemp(prefix="gdn-review-vllm-tests-"))
    attention = top / "tests" / "v1" / "attention"
    attention.mkdir(parents=True)
    for folder in (top / "tests", top / "tests" / "v1", attention):
        (folder / "__init__.py").write_text("")
    (attention / "utils.py").write_text(
        '"""Stand-in: see benchmarks/vllm_utils_standin.py (not vLLM\'s utils.py)."""\n'
        "from vllm_utils_standin import (  # noqa: F401\n"
        "    BatchSpec, create_common_attn_metadata, create_vllm_config,\n"
        ")\n"
    )
    shutil.copyfile(test_file, attention / Path(TEST_PATH).name)
    (top / "pytest.ini").write_text("[pytest]\n")
    return top


def run_pytest(argv: list[str], cwd: Path, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *argv, *PYTEST_ARGS],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    return time.perf_counter() - start, done


def counts(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stdout.strip().splitlines() if COUNT.search(line)]
    return (
        ", ".join(f"{n} {word}" for n, word in COUNT.findall(lines[-1])) if lines else "no summary"
    )


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="timed rounds per side (after one warm-up)"
    )
    parser.add_argument("--selection", choices=["all", "family", "upstream"], default="family")
    parser.add_argument(
        "--vllm-tests", type=Path, help="vLLM's test_gdn_metadata_builder.py, as a file"
    )
    parser.add_argument(
        "--vllm-ref", help="the git ref to fetch it at (default: v<installed vLLM>)"
    )
    parser.add_argument("--vllm-git", help="a git directory of vLLM to read it from")
    parser.add_argument("--json", type=Path, help="also write the measurements here")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return args


def _measure(sides: dict, repeat: int) -> tuple[dict, dict[str, list[float]]]:
    """(each side's test counts, from a warm-up run: file cache, vLLM's caches; each side's
    seconds in ``repeat`` rounds, the sides' order alternating)."""
    summary = {}
    for name, run in sides.items():
        _, done = run()
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
            sys.exit(f"{name} side fails (exit {done.returncode}); no comparison:\n{tail}")
        summary[name] = counts(done)
    samples: dict[str, list[float]] = {"vllm": [], "generated": []}
    for index in range(repeat):
        order = ["vllm", "generated"] if index % 2 == 0 else ["generated", "vllm"]
        for name in order:
            seconds, done = sides[name]()
            if done.returncode != 0:
                sys.exit(
                    f"{name} side failed in round {index + 1} (exit {done.returncode}); "
                    "no comparison"
                )
            samples[name].append(seconds)
        print(
            f"round {index + 1}/{repeat}: vLLM's {samples['vllm'][-1]:.1f} s, "
            f"generated {samples['generated'][-1]:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    return summary, samples


def main() -> None:
    args = _arguments()
    test_file, source = vllm_test_file(args)
    ours, deselect = kb_selection(args.selection)
    from vllm_utils_standin import STANDIN_NAME  # noqa: E402  (imports the harness: after the look-ups)

    tree = vllm_tree(test_file)
    # Only benchmarks/ (the stand-in) on the path: gdn_review is installed, and the project's own
    # tests/ must not shadow the tree's tests package.
    theirs_env = dict(os.environ, PYTHONPATH=str(HERE))
    theirs_argv = [TEST_PATH, "--rootdir", str(tree), "-c", str(tree / "pytest.ini")]
    theirs_argv += [arg for test in deselect for arg in ("--deselect", test)]
    sides = {
        "vllm": lambda: run_pytest(theirs_argv, tree, theirs_env),
        "generated": lambda: run_pytest(ours, ROOT, dict(os.environ)),
    }
    try:
        summary, samples = _measure(sides, args.repeat)
    finally:
        shutil.rmtree(tree, ignore_errors=True)

    median = {name: statistics.median(values) for name, values in samples.items()}
    ratio = median["generated"] / median["vllm"]
    pairs = [g / v for g, v in zip(samples["generated"], samples["vllm"])]
    verdict = "met" if ratio <= TARGET else "NOT met"
    print(
        f"vLLM {importlib.metadata.version('vllm')} on CPU, {os.cpu_count()} cores; "
        "one pytest process per side, -n 0; "
        f"{args.repeat} interleaved rounds after a warm-up"
    )
    print(f"vLLM's own tests: {source}")
    print(f"  with {STANDIN_NAME}")
    print(
        f"  ran: {summary['vllm']}"
        + (
            " (the deselected: tests stated by open-PR records, whose change "
            "the installed release lacks)"
            if deselect
            else ""
        )
    )
    print(f"generated ({args.selection}): {len(ours)} module(s); ran: {summary['generated']}")
    print(
        f"ratio generated / vLLM's (per-process wall time, median of each side): {ratio:.2f} "
        f"(per round {min(pairs):.2f}-{max(pairs):.2f}); target <= {TARGET}: {verdict}"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "vllm_tests": source,
                    "standin": STANDIN_NAME,
                    "deselected": deselect,
                    "selection": args.selection,
                    "modules": ours,
                    "counts": summary,
                    "samples": samples,
                    "median": median,
                    "ratio": ratio,
                    "round_ratios": pairs,
                    "target": TARGET,
                },
                indent=2,
            )
        )
    sys.exit(0 if ratio <= TARGET else 1)


if __name__ == "__main__":
    main()
