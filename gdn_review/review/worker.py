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
    from gdn_review.common import snapshots
    from gdn_review.kb import load_record
    from gdn_review.run import snapshot_take, suite

    out = Path(spec["out_dir"])

    def body():
        interrupts.hold("review-side")  # the test hook: a side's child is running
        if side == "patched":
            _load_patch(spec)
            as_shipped(spec)
        evidence = out / f"evidence-{side}.json"
        tests = suite.test_args(spec["modules"], spec.get("keyword"))
        code = suite.run_pytest(suite.pytest_args(tests, evidence), here=True)
        written = {}
        for number, record_path in spec["records"].items():
            record = load_record(Path(record_path), checked=False)  # the review checked it
            target = out / f"snapshot-{side}-{number}.json"
            # A case that could not run (or whose snapshot raised in our own code) is stored as
            # not taken (snapshot_take.NOT_TAKEN): compare reads no drift from it.
            target.write_text(
                snapshots.dumps(
                    snapshots.document(record.key, snapshot_take.take(record.case_inputs()))
                ),
                encoding="utf-8",
            )
            written[number] = target.name
        return {
            "status": "ran",
            "pytest_exit": code,
            "evidence": evidence.name if evidence.exists() else None,
            "snapshots": written,
        }

    return body


def run_mutants(spec: dict, patched_evidence: Path) -> list[dict]:
    """Each mutant of the change's new lines against the tests that passed with the change."""
    import types

    from gdn_review.common.vocabulary import FAILING, NOT_MEASURED, Outcome
    from gdn_review.mutation import runner
    from gdn_review.run import evidence_file, suite

    tests = evidence_file.tests_of(patched_evidence)
    # A test that could not run (or whose check raised) would "fail" under every mutant too.
    not_passing = {*FAILING, *NOT_MEASURED}
    failing = sorted({t["nodeid"] for t in tests if t["outcome"] in not_passing})
    if not any(t["outcome"] == Outcome.PASSED for t in tests):
        # Nothing measured with the change: a mutant's run would measure nothing either.
        unmeasured = next((t for t in tests if t["outcome"] in NOT_MEASURED), None)
        why = (
            f"no test passed with the change ({unmeasured['reason']})"
            if unmeasured
            else "no test passed with the change"
        )
        say(f"mutants not run: {why}")
        return [
            {"id": entry["id"], "status": Outcome.NOT_RUN, "reason": why}
            for entry in spec["mutants"]
        ]
    # -x: a review needs killed or survived, not every claim's kills; a kill stops the run.
    # Tests already failing with the change are left out: they would kill every mutant.
    selected = [*suite.test_args(spec["modules"], spec.get("keyword")), "-x"]
    selected += [option for nodeid in failing for option in ("--deselect", nodeid)]
    mutants = [
        types.SimpleNamespace(id=entry["id"], source=Path(entry["source_file"]).read_text("utf-8"))
        for entry in spec["mutants"]
    ]
    results: list[dict] = []
    as_shipped(spec)  # the children run as the patched side did (this process runs no more sides)

    def finished(mutant, result):
        results.append({"id": mutant.id, **result})
        say(f"mutant {len(results)}/{len(mutants)} {mutant.id}: {result['status']}")

    runner.run_mutants(mutants, spec["target"], selected, spec["jobs"], spec["timeout"], finished)
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
    except Exception as error:  # vLLM's builder path does not import on this tree
        words = f"{type(error).__name__}: {error}"
        if spec.get("in_memory") or "patched" not in spec["sides"]:
            result["could_not_run"] = words  # the release as it is: not the change's doing
        else:
            result["import_error"] = words  # the patched tree
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
    try:
        harness.warm_up(construct=bool(spec.get("in_memory")) or "patched" not in spec["sides"])
    except Exception as error:  # noqa: BLE001  (each test and case says so itself: could not run)
        say(f"warm-up could not run: {type(error).__name__}: {str(error)[:300]}")
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
