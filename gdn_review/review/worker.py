"""The review's process on one vLLM tree: vLLM imported once, every run in a forked child.

``python -m gdn_review.review.worker SPEC.json`` (written by ``review.run``).
The parent imports vLLM through the harness and checks that the patched
module imports; then each side (the release as it is, the release with the
change) runs the KB's generated modules under pytest with the evidence
plugin and takes every record's full-metadata snapshots, each in a forked
child with a timeout, so a change whose ``build()`` never returns costs one
killed child. Where the change is one module, the patched side loads it in
memory over the release (``harness.mutation``), as ``mutate`` does with a
mutant; otherwise this process already runs on a patched tree. Last, the
automatic mutants of the change's new lines run in forked children against
the tests that passed with the change. Progress goes to stderr, one line per
step; the result to the JSON file the spec names.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from gdn_review.common import forked, interrupts

PROGRESS = "review:"


def say(line: str) -> None:
    print(f"{PROGRESS} {line}", file=sys.stderr, flush=True)


def _children(bodies: dict, timeout: float, on_result=lambda name, result: None) -> dict[str, dict]:
    """Run every body in its own forked child (``common.forked``), all at once; each one's result,
    or how it ended."""
    from gdn_review.harness import mutation

    results: dict[str, dict] = {}

    def finished(name, result: dict) -> None:
        results[name] = result
        on_result(name, result)

    forked.run(
        list(bodies.items()), len(bodies), timeout, finished, prepare=mutation.single_threaded
    )
    return results


def _load_patch(spec: dict) -> None:
    from gdn_review.harness import mutation

    if spec.get("in_memory"):
        relative, source_file = spec["in_memory"]["path"], spec["in_memory"]["source_file"]
        source = Path(source_file).read_text(encoding="utf-8")
        mutation.load_mutated(relative, mutation.compile_source(relative, source))


def import_check(spec: dict) -> dict:
    """Does the patched module import on this tree? (In a child: the parent stays as it is.)"""
    import importlib

    from gdn_review.harness import mutation

    def body():
        try:
            if spec.get("in_memory"):
                _load_patch(spec)
            for relative in spec["changed_modules"]:
                importlib.import_module(mutation.module_name(relative))
        except Exception as error:
            return {"status": "import_error", "reason": f"{type(error).__name__}: {error}"}
        return {"status": "ok"}

    return _children({"import": body}, spec["timeout"])["import"]


def as_shipped(spec: dict) -> None:
    """The change as it would ship: ranges read as of the release it lands in; claims keep their
    ranges."""
    from gdn_review.harness.release_ranges import (
        CLAIMS_ON_ANY_RELEASE,
        RANGES_AS_RELEASE,
    )

    os.environ[RANGES_AS_RELEASE] = spec["lands_in"]
    os.environ.pop(CLAIMS_ON_ANY_RELEASE, None)
    if spec.get("own"):  # the diff is this record's own PR: its pending claims count as checked
        from gdn_review.run.plugin import CHANGE_APPLIED

        os.environ[CHANGE_APPLIED] = str(spec["own"])


def side_body(spec: dict, side: str):
    """What one side's child does: the suite, then the snapshots."""
    import pytest

    from gdn_review.kb import load_record
    from gdn_review.run import snapshot_files, snapshot_take

    out = Path(spec["out_dir"])

    def body():
        interrupts.hold("review-side")  # the test hook: a side's child is running
        if side == "patched":
            _load_patch(spec)
            as_shipped(spec)
        evidence = out / f"evidence-{side}.json"
        args = [
            *spec["modules"],
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "--gdn-evidence",
            str(evidence),
        ]
        if spec.get("keyword"):
            args += ["-k", spec["keyword"]]
        code = int(pytest.main(args))
        snapshots = {}
        for number, record_path in spec["records"].items():
            record = load_record(Path(record_path))
            target = out / f"snapshot-{side}-{number}.json"
            target.write_text(
                snapshot_files.dumps(
                    snapshot_files.document(record.key, snapshot_take.take(record.case_inputs()))
                ),
                encoding="utf-8",
            )
            snapshots[number] = target.name
        return {
            "status": "ran",
            "pytest_exit": code,
            "evidence": evidence.name if evidence.exists() else None,
            "snapshots": snapshots,
        }

    return body


def run_mutants(spec: dict, patched_evidence: Path) -> list[dict]:
    """Each mutant of the change's new lines against the tests that passed with the change."""
    from gdn_review.harness import mutation
    from gdn_review.mutation import runner
    from gdn_review.run import evidence_file

    tests = evidence_file.tests_of(patched_evidence)
    failing = sorted({t["nodeid"] for t in tests if t["outcome"] in ("failed", "error")})
    # -x: a review needs killed or survived, not every claim's kills; a kill stops the run.
    args = [*spec["modules"], "-x"] + (["-k", spec["keyword"]] if spec.get("keyword") else [])
    for nodeid in failing:  # already failing with the change: they would kill every mutant
        args += ["--deselect", nodeid]

    class Job:
        def __init__(self, entry):
            self.entry = entry
            self.code = mutation.compile_source(
                spec["target"], Path(entry["source_file"]).read_text(encoding="utf-8")
            )

    results: list[dict] = []
    total = len(spec["mutants"])
    as_shipped(spec)  # the children run as the patched side did (this process runs no more sides)

    def finished(job, result):
        results.append({"id": job.entry["id"], **result})
        say(f"mutant {len(results)}/{total} {job.entry['id']}: {result['status']}")

    jobs = []
    for entry in spec["mutants"]:
        try:
            jobs.append(Job(entry))
        except SyntaxError as error:
            results.append(
                {
                    "id": entry["id"],
                    "status": "error",
                    "reason": f"does not compile: line {error.lineno}: {error.msg}",
                }
            )
    runner.run_forked(jobs, spec["target"], args, spec["jobs"], spec["timeout"], finished)
    return results


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    from gdn_review.mutation import runner

    runner.prepare_cpu()
    result: dict = {"sides": {}, "mutants": [], "import_error": None}
    out = Path(spec["out_dir"])
    started = time.monotonic()
    try:
        from gdn_review import harness

        harness.prepare_platform()
        release = str(harness.vllm_release())
    except Exception as error:  # the patched tree does not even let vLLM's builder path import
        result["import_error"] = f"{type(error).__name__}: {error}"
        (out / spec["result"]).write_text(json.dumps(result), encoding="utf-8")
        return 0
    result["release"] = release
    if "patched" in spec["sides"]:
        checked = import_check(spec)
        if checked["status"] != "ok":
            result["import_error"] = checked["reason"]
            (out / spec["result"]).write_text(json.dumps(result), encoding="utf-8")
            return 0
    # In memory, this process holds the release as it is: its builder is safe to make.
    harness.warm_up(construct=bool(spec.get("in_memory")) or "patched" not in spec["sides"])
    import hypothesis  # noqa: F401  (the generated modules' imports, once for every child)
    import pytest  # noqa: F401

    say(f"vLLM {release} imported and warm ({time.monotonic() - started:.0f} s)")
    import gc

    gc.collect()
    gc.freeze()  # children share what is loaded; keep the collector off it

    def finished(side, outcome):
        ran = (
            f", pytest exit {outcome['pytest_exit']}"
            if "pytest_exit" in outcome
            else f": {outcome.get('reason', '')}"
        )
        say(f"{side}: {outcome['status']}{ran} ({outcome.get('duration_s', 0):.0f} s)")

    # The sides run side by side, each in its own child with its own timeout.
    result["sides"] = _children(
        {side: side_body(spec, side) for side in spec["sides"]}, spec["timeout"], finished
    )
    patched = result["sides"].get("patched", {})
    if spec["mutants"] and patched.get("status") == "ran" and patched.get("evidence"):
        result["mutants"] = run_mutants(spec, out / patched["evidence"])
    (out / spec["result"]).write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    from gdn_review.common.fast_exit import exit_now

    exit_now(main(sys.argv[1]))
