"""What gdn-review's own tests share: a small record, records and evidence a matrix test writes,
gh's fixtures of a real PR, the dev extra's tools, and pytest settings."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import io
import json
import os
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from gdn_review.common import interrupts, preloaded, snapshots

# No test may depend on the machine's speed: Hypothesis' per-example deadline and its
# "too slow" health check are timing, so neither is used (a loaded CI runner is slow).
settings.register_profile("gdn-review", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("gdn-review")

# The golden output folder holds generated modules: compared as files, never collected.
collect_ignore_glob = ["golden/*"]

ROOT = Path(__file__).resolve().parent.parent

# A small valid record; tests break it in one place at a time.
MINIMAL = textwrap.dedent(
    """\
    schema_version: 1
    pr:
      number: 7
      repo: vllm-project/vllm
      title: A small PR
      merged_at: "2026-01-02 03:04"
      url: https://example.invalid/pr/7
    target:
      file: vllm/v1/attention/backends/gdn_attn.py
      symbol: GDNAttentionMetadataBuilder.build
      base_release: 0.28.0
      head_release: 0.29.0
    claims:
      - id: C1
        text: One ge per build.
        check:
          kind: op_budget
          budget: {aten.ge: 1}
          cases: [spec]
    cases:
      - id: spec
        text: Two spec decodes.
        speculative_tokens: 2
        rows:
          - {seq_len: 10, query_len: 3, drafted: 2}
          - {seq_len: 12, query_len: 3, drafted: 2}
    risks:
      - id: R1
        text: Something could break.
        cases: [spec]
        claims: [C1]
    """
)


@pytest.fixture
def write_record(tmp_path):
    """Write record text as <tmp>/kb/<name> and return the kb folder."""

    def write(text: str, name: str = "7.yaml") -> Path:
        kb = tmp_path / "kb"
        kb.mkdir(exist_ok=True)
        (kb / name).write_text(text, encoding="utf-8")
        return kb

    return write


def pytest_configure(config):
    """One preload server for the session, started here (the xdist controller, or the only
    process): every worker inherits it, and so do the commands the tests run and their children
    (common/preloaded.py)."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    if getattr(config.option, "numprocesses", None):
        # A process per CPU (-n auto): torch's own pool of a thread per CPU in each of them
        # oversubscribed the CPUs (two generated suites side by side took 37.5 s each, 29.5 s
        # with a thread each). Set before the workers and the preload server start.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "not slow" in config.option.markexpr:
        # Its few Python children do not repay a server's imports: none at all, not even a
        # worker's own on a signature's second ask (a `not slow` run took 63 s with them, 52 s
        # without). A GDN_REVIEW_PRELOAD of the user's wins.
        os.environ.setdefault(preloaded.SWITCH, "0")
        return
    interrupts.preload_server(os.environ, os.getcwd(), now=True)


def pytest_addoption(parser):
    parser.addoption(
        "--guard-json",
        type=Path,
        default=None,
        help="the whole-file guard's reports/guard.json, written by `.ci/run`'s gate step: runs "
        "the tests marked guard_result on it (deselected without it)",
    )


@pytest.fixture
def guard_json(request) -> Path:
    path = request.config.getoption("guard_json")
    if not path.is_file():
        pytest.fail(f"--guard-json {path}: no such file (run the gate step first)", pytrace=False)
    return path


def pytest_collection_modifyitems(config, items):
    """Slow end-to-end tests first (stable order otherwise): under `-n auto` the workers
    start on the long runs side by side and the many quick tests fill in at the end,
    so a run does not end waiting on one long test."""
    if config.getoption("guard_json") is None:
        # What the gate's own run shows is read where the gate ran (.ci/run), never faked here.
        waiting = [item for item in items if item.get_closest_marker("guard_result")]
        if waiting:
            config.hook.pytest_deselected(items=waiting)
            items[:] = [item for item in items if not item.get_closest_marker("guard_result")]
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    _group_for_xdist(items)


def _group_for_xdist(items) -> None:
    """Give each xdist worker's items the ``@group`` suffix that `--dist loadgroup` schedules by.

    pytest-xdist 3.8 sets ``item._nodeid``, which pytest 9.2 no longer reads (a node's
    id is its structured ``_id``): every grouped test then went to any worker, and a
    shared costly fixture ran once per worker. The suffix is harmless under other
    --dist modes.
    """
    import os

    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    for item in items:
        names = sorted(
            {
                str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                for mark in item.iter_markers("xdist_group")
            }
        )
        if names and item.nodeid.rfind("@") <= item.nodeid.rfind("]"):
            grouped = f"{item.nodeid}@{'_'.join(names)}"
            if hasattr(item, "_id"):  # pytest 9.2 keeps a structured id; nodeid is its text
                from _pytest.nodes import NodeId

                item._id = NodeId.parse(grouped)
            else:
                item._nodeid = grouped


def vllm_files_digest() -> str:
    """One hash over every .py file of the loaded vLLM's attention backends and the target."""
    from gdn_review.common import release

    _, root = release.loaded()
    digest = hashlib.sha256()
    for path in sorted((root / "vllm" / "v1" / "attention").rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def in_process_pytest(*args: str) -> tuple[int, str]:
    """pytest on ``args`` in this process: its exit code and what it printed.

    For generated modules on the installed vLLM, which this worker has loaded already (a fresh
    process would import it again, about 10 s). Not for a release tree, a mutated builder or
    anything read at import: those need a fresh process.
    """
    printed = io.StringIO()
    # pytest's importlib mode hands back a module already in sys.modules under the same name, so
    # a worker that ran generated_tests/test_pr_N.py would test that module, not the one asked
    # for: the worker's test modules step aside for the inner run and come back after it.
    aside = {name: sys.modules.pop(name) for name in list(sys.modules) if _is_test_module(name)}
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            code = pytest.main(
                ["-p", "no:cacheprovider", "-p", "no:randomly", "--import-mode=importlib", *args]
            )
    finally:
        for name in [name for name in sys.modules if _is_test_module(name)]:
            del sys.modules[name]
        sys.modules.update(aside)
    return int(code), printed.getvalue()


def _is_test_module(name: str) -> bool:
    leaf = name.rpartition(".")[2]
    return leaf.startswith("test_")


# gh's output for a real PR (#55404): what `gh pr view --json ...` and `gh pr diff` write.
GH_FIXTURES = ROOT / "tests" / "fixtures" / "gh"
GH_PR_JSON = GH_FIXTURES / "pr-55404.json"
GH_PR_DIFF = GH_FIXTURES / "pr-55404.diff"
GH_PR = json.loads(GH_PR_JSON.read_text(encoding="utf-8"))


def dev_tool(command: str, distribution: str) -> str:
    """The dev extra's binary; a missing one fails the test (it never skips or passes)."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    for file in (dist.files or []) if dist else []:
        if file.name == command and file.parent.name == "bin":
            path = Path(dist.locate_file(file)).resolve()
            if path.is_file():
                return str(path)
    found = shutil.which(command)
    if found:
        return found
    pytest.fail(
        f"{command} is not installed: it is in gdn-review's dev extra ({distribution}, pinned "
        "in constraints.txt); run scripts/bootstrap",
        pytrace=False,
    )


# A record whose C1 fails before the PR, with a second case and a related PR that changes it
# (the matrix and history tests run it across releases).
MATRIX_RECORD = MINIMAL.replace(
    "    text: One ge per build.\n", "    text: One ge per build.\n    before: fails\n"
).replace(
    "risks:\n",
    "  - id: plain\n    text: A decode.\n    rows:\n      - {seq_len: 5, query_len: 1}\n"
    "related:\n"
    "  - number: 9\n    title: Later change\n    relation: "
    "changes-claim\n    from_release: 0.31.0\n"
    "    changes:\n      - cases: [spec]\n        fields: [num_decodes]\n"
    "risks:\n",
)
assert "before: fails" in MATRIX_RECORD and "related:" in MATRIX_RECORD


def write_matrix_evidence(folder: Path, version: str, outcome: str, ge: int) -> str:
    tests = [
        {
            "nodeid": "m::test_C1[cpu-spec]",
            "record": 7,
            "claim": "C1",
            "risks": ["R1"],
            "case": "spec",
            "device": "cpu",
            "outcome": outcome,
            "reason": None if outcome == "passed" else "over budget",
            "measured": {"aten.ge": ge},
            "expected": {"aten.ge": "<= 1"},
        },
        {
            "nodeid": "m::test_C1[cuda-spec]",
            "record": 7,
            "claim": "C1",
            "risks": ["R1"],
            "case": "spec",
            "device": "cuda",
            "outcome": "skipped",
            "reason": "needs CUDA: none here",
        },
    ]
    data = {
        "format": "gdn-review-evidence/1",
        "finished_at": "2026-11-29T00:00:00+00:00",
        "tests": tests,
        "environment": {
            "vllm_version": version,
            "vllm_source": "unpacked on PYTHONPATH (not the installed distribution)",
        },
    }
    name = f"evidence-{version}.json"
    (folder / name).write_text(json.dumps(data), encoding="utf-8")
    return name


def write_matrix_snapshot(folder: Path, version: str, spec: dict, plain: dict) -> str:
    name = f"snapshot-{version}.json"
    doc = snapshots.document(
        7, {"release": version, "device": "cpu", "cases": {"spec": spec, "plain": plain}}
    )
    (folder / name).write_text(snapshots.dumps(doc), encoding="utf-8")
    return name
