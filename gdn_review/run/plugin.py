"""pytest plugin: claim / risk / case markers and measured values -> evidence JSON.

Registered through the ``pytest11`` entry point: any pytest run here that executes a
generated test writes evidence: per test its outcome, the reason, the ``measured`` /
``expected`` values it recorded with ``record_property`` (of a failed test, the ``batch``
that failed: ``failing_batch``); per claim and per risk the tests that address it; the
environment (vLLM version and where it was loaded from, torch, device, Python, git
revision of kb/). Runs without any generated test write nothing.

It also provides the fixtures generated modules share: ``device`` (one parameter per
entry of the module's ``DEVICES``, module-scoped; the ``cuda`` one carries the ``cuda``
mark) and ``cuda_device``; both make the builders of the module's ``CASES`` once. vLLM
is imported (through the harness) only when one of them is set up.
"""

from __future__ import annotations

import datetime
import os
import re
from pathlib import Path

import pytest

from gdn_review.common import interrupts
from gdn_review.common.vocabulary import Outcome, SkipKind
from gdn_review.run import evidence_file
from gdn_review.run.seeded_draws import draws_from_the_seed_alone

# The invariant checks live in the harness, not in the generated module: let pytest
# rewrite their asserts too, so a failing property shows the values it compared.
pytest.register_assert_rewrite("gdn_review.harness.properties")


MARKERS = [
    "claim(id): the record claim a generated test checks",
    "risk(*ids): the record risks a generated test addresses",
    "case(id): the named batch (case) a generated test runs",
    "record(number): the PR number of the record a generated module comes from",
    "cuda: needs a CUDA device; skipped with the reason on CPU",
]


def pytest_addoption(parser):
    group = parser.getgroup("gdn-review", "gdn-review evidence")
    group.addoption(
        "--gdn-evidence",
        default=None,
        metavar="PATH",
        help="write the evidence JSON here (default: "
        f"{evidence_file.DEFAULT_PATH}, only when a generated test ran)",
    )
    group.addoption("--gdn-no-evidence", action="store_true", help="write no evidence file")


def pytest_configure(config):
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    draws_from_the_seed_alone()
    if config.getoption("gdn_no_evidence") or hasattr(config, "workerinput"):
        return
    config.pluginmanager.register(EvidenceCollector(config), "gdn-review-evidence")


# Record numbers (comma list) whose PR's change is applied to the loaded vLLM (the
# review's patched side): their pending claims' failures count as failures in pytest too.
CHANGE_APPLIED = "GDN_REVIEW_CHANGE_APPLIED"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Where a generated test's exception came from (``origin``: the evidence's outcome), and a
    pending claim's measured failure as an xfail to pytest.

    A pending claim is an open PR's improvement, on a release without its change;
    the generated module lists such claims in PENDING. Only a failure that measured
    what the claim states (an assertion on measured values) is pending: pytest (CI,
    ``mutate``'s baseline and its kills) sees an xfail; the evidence keeps the
    failure and its reason, so the report says **pending** and, where the PR's diff
    is applied, **fails**. A pending claim that passes is a plain pass; one that
    could not run, or whose check raised, stays a failure everywhere.
    """
    outcome = yield
    report = outcome.get_result()
    if report.skipped and call.excinfo is not None:
        report.gdn_skip_kind = getattr(call.excinfo.value, _SKIP_KIND, None) or SkipKind.OTHER
    if not report.failed or call.excinfo is None or item.get_closest_marker("claim") is None:
        return
    found, report.gdn_failure, report.gdn_reason = origin(call.excinfo.value, call.when)
    report.gdn_outcome = found.value  # a plain str: xdist sends reports through execnet
    pending = getattr(getattr(item, "module", None), "PENDING", None)
    if not pending or report.when != "call" or report.gdn_failure != evidence_file.MEASURED:
        return
    claim = _marker_arg(item, "claim")
    record = _marker_arg(item, "record")
    if claim not in pending or str(record) in os.environ.get(CHANGE_APPLIED, "").split(","):
        return
    report.gdn_pending_failure = _reason(report)
    report.outcome = Outcome.SKIPPED.value
    report.wasxfail = f"pending: {pending[claim]}"


# The attribute harness.origin.under_test sets on what vLLM's code under test raised, the
# class harness.origin.setting_up raises, and the attribute harness.origin.skip sets on its
# skip: read by name, so that classifying a failure never imports the harness (nor vLLM).
_UNDER_TEST = "gdn_review_under_test"
_COULD_NOT_RUN = "CouldNotRun"
_SKIP_KIND = "gdn_review_skip_kind"
# Where an assertion measures (the checks' own code); one raised in our other code is ours.
_CHECKS = ("__init__", "properties", "pytest_checks", "sync_proxy")
_MEASURING = tuple(f"gdn_review/harness/{name}.py" for name in _CHECKS)
# The order in which one test's several exceptions (a Hypothesis group) decide its outcome.
_PRECEDENCE = (Outcome.CHECK_ERROR, Outcome.COULD_NOT_RUN, Outcome.FAILED)


def origin(error: BaseException, when: str) -> tuple[str, str | None, str]:
    """(outcome, failure, reason) of a generated test that raised ``error`` in phase ``when``.

    - vLLM's code under test raised it (``harness.origin.under_test``): ``failed``, the
      failure is what raised it (behaviour: it counts against the claim);
    - set-up raised it (``harness.origin.CouldNotRun``, or anything while a fixture was
      set up: platform, VllmConfig, imports): ``could not run``;
    - a failed assertion on measured values (``assert``, ``pytest.fail``): ``failed``,
      ``measured``;
    - anything else raised in the test's call or teardown is gdn-review's own code:
      ``error in the check``, with the frame it came from.
    """
    group = getattr(error, "exceptions", None)  # an exception group: Hypothesis found several
    if isinstance(group, tuple) and group:
        found = [origin(each, when) for each in group]
        return min(found, key=lambda one: _PRECEDENCE.index(one[0]))
    chain = _chain(error)
    cannot = next((e for e in chain if type(e).__name__ == _COULD_NOT_RUN), None)
    if cannot is not None:
        return Outcome.COULD_NOT_RUN, None, str(cannot)
    under_test = getattr(error, _UNDER_TEST, None)
    words = f"{type(error).__name__}: {_first_line(error)}"
    if under_test is not None:
        return Outcome.FAILED, f"raised by {under_test}", words
    if when == "setup":
        return (
            Outcome.COULD_NOT_RUN,
            None,
            f"could not run: set-up raised {words} (at {_last_frame(error)})",
        )
    where = _last_frame(error)
    if isinstance(error, (AssertionError, pytest.fail.Exception)) and (
        not where.startswith("gdn_review/") or where.startswith(_MEASURING)
    ):
        return Outcome.FAILED, evidence_file.MEASURED, words
    return (
        Outcome.CHECK_ERROR,
        None,
        f"error in the check (gdn-review's own code raised {words} at {where})",
    )


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the exceptions it was raised from or while handling."""
    chain, seen = [], set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else ""


def _last_frame(error: BaseException) -> str:
    """``path:line in function`` of the innermost frame, the path from its package folder."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "(no traceback)"
    frame = frames[-1]
    parts = frame.filename.replace(os.sep, "/").split("/")
    start = next(
        (i for i in range(len(parts) - 1, -1, -1) if parts[i] in ("gdn_review", "vllm", "torch")),
        len(parts) - 1,
    )
    return f"{'/'.join(parts[start:])}:{frame.lineno} in {frame.name}"


def _generated_module(metafunc) -> bool:
    """A module gdn-review generated: it carries the record mark and lists its DEVICES."""
    return (
        hasattr(metafunc.module, "DEVICES")
        and metafunc.definition.get_closest_marker("record") is not None
    )


def pytest_generate_tests(metafunc):
    """Parametrize a generated module's ``device`` fixture by its DEVICES (ids are the device
    names)."""
    if "device" not in metafunc.fixturenames or not _generated_module(metafunc):
        return
    params = [
        pytest.param(device, id=device, marks=[pytest.mark.cuda] if device == "cuda" else [])
        for device in metafunc.module.DEVICES
    ]
    metafunc.parametrize("device", params, indirect=True, scope="module")


@pytest.fixture(scope="module")
def device(request):
    """The device build() runs on; its builders are made once here and reused by every test."""
    if not hasattr(request, "param"):
        pytest.fail(
            "gdn-review's `device` fixture serves generated modules only "
            "(a `record` mark and a module-level DEVICES list)",
            pytrace=False,
        )
    from gdn_review import harness

    return harness.prepare_device(request.param, request.module.CASES.values())


@pytest.fixture(scope="module")
def cuda_device(request):
    """CUDA, for checks that only mean something there (gpu_sync); skipped without it."""
    from gdn_review import harness

    return harness.prepare_device("cuda", request.module.CASES.values())


@pytest.fixture(scope="module")
def cpu_device(request):
    """The CPU, for CPU proxies of CUDA-only checks (gpu_sync's device-origin reads)."""
    from gdn_review import harness

    return harness.prepare_device("cpu", request.module.CASES.values())


def _marker_arg(item, name):
    marker = item.get_closest_marker(name)
    return marker.args[0] if marker and marker.args else None


def _test_entry(item) -> dict | None:
    record = _marker_arg(item, "record")
    claim = _marker_arg(item, "claim")
    if record is None or claim is None:
        return None
    risks = sorted({risk for marker in item.iter_markers("risk") for risk in marker.args})
    params = getattr(getattr(item, "callspec", None), "params", {})
    device = params.get("device") or ("cuda" if item.get_closest_marker("cuda") else None)
    if device is None and "cpu_device" in getattr(item, "fixturenames", ()):
        device = "cpu"
    return {
        "nodeid": item.nodeid,
        "record": record,
        "claim": claim,
        "risks": risks,
        "case": _marker_arg(item, "case") or params.get("case_id"),
        "property": params.get("prop"),
        # An invariant's boundary batch, by name (harness.boundary_batches); None elsewhere.
        "boundary": params.get("boundary"),
        "device": device,
        "outcome": Outcome.NOT_RUN,
        "reason": None,
        "measured": None,
        "expected": None,
        "duration_s": 0.0,
    }


def _failed(entry: dict, report) -> None:
    """A failed phase's outcome, failure and reason (``origin``'s, made where the test ran)."""
    outcome = getattr(report, "gdn_outcome", None)
    if outcome is None:  # raised outside anything origin() saw: not a measurement
        outcome = Outcome.COULD_NOT_RUN if report.when == "setup" else Outcome.CHECK_ERROR
        entry["outcome"], entry["reason"] = outcome, f"{outcome}: {_reason(report)}"
        return
    entry["outcome"] = outcome
    entry["reason"] = _reason(report) if outcome == Outcome.FAILED else report.gdn_reason
    if outcome == Outcome.FAILED:
        entry["failure"] = report.gdn_failure


def _reason(report) -> str:
    """The one line a person needs: skip reason, xfail reason or the failure's message."""
    if getattr(report, "wasxfail", None):
        return report.wasxfail
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.strip().splitlines()[0] if crash.message.strip() else "failed"
    text = str(longrepr or "").strip()
    return text.splitlines()[-1] if text else ""


def _falsifying_example(report) -> str | None:
    """The smallest failing batch Hypothesis found (its "Falsifying example" note, or the failing
    explicit example), as it printed it."""
    lines = [re.sub(r"^E {0,7}", "", line) for line in str(report.longrepr or "").splitlines()]
    start = next(
        (
            i
            for i, line in enumerate(lines)
            if re.match(r"(Falsifying|Failing explicit) example: ", line)
        ),
        None,
    )
    if start is None:
        return None
    taken = []
    for line in lines[start:]:
        taken.append(line)
        if line.startswith(")"):  # Hypothesis closes the call it prints at the start of a line
            break
    return "\n".join(taken)[:4000]


def _failing_batch(report) -> dict | None:
    """The batch a failed invariant test failed on: the last ``failed_batch`` it recorded
    (``harness.check_invariant`` records one each time a batch fails; Hypothesis replays its
    shrunk example last). Kept as plain JSON data; the report stage turns it into rows and a
    case (``report.failing_batch``)."""
    import json

    failed = [v for key, v in report.user_properties if key == "failed_batch"]
    if not failed or not isinstance(failed[-1], dict):
        return None
    try:
        return json.loads(json.dumps(failed[-1], sort_keys=True, default=str))
    except (TypeError, ValueError):
        return None


def _record_file(module, root: Path) -> Path | None:
    """The record a generated module was rendered from (``kb/N.yaml``), or None where it cannot be
    found.

    The module names its record's file (SOURCE: ``<kb folder>/<file>``) and its
    snapshots folder relative to itself (SNAPSHOTS: ``<kb>/snapshots/N``), so the
    record lies two folders above that; else SOURCE from the rootdir.
    """
    source, snapshots, file = (
        getattr(module, "SOURCE", None),
        getattr(module, "SNAPSHOTS", None),
        getattr(module, "__file__", None),
    )
    if not isinstance(source, str):
        return None
    candidates = []
    if isinstance(snapshots, str) and file:
        kb = Path(os.path.normpath(Path(file).parent / snapshots)).parent.parent
        candidates.append(kb / Path(source).name)
    candidates.append(Path(root) / source)
    return next((path for path in candidates if path.is_file()), None)


class EvidenceCollector:
    def __init__(self, config):
        self.config = config
        self.tests: dict[str, dict] = {}
        # record -> sha256 of its file when the tests were collected
        self.record_hashes: dict[str, str] = {}
        self.started = datetime.datetime.now(datetime.timezone.utc)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        for item in items:
            entry = _test_entry(item)
            if entry is not None:
                self.tests[item.nodeid] = entry
                self._hash_record(item, entry["record"])

    def _hash_record(self, item, record) -> None:
        """The sha256 of the record the item's module came from, once per record (unknown: none
        kept)."""
        key = str(record)
        if key in self.record_hashes:
            return
        path = _record_file(getattr(item, "module", None), self.config.rootpath)
        digest = evidence_file.record_sha256(path) if path is not None else None
        if digest is not None:
            self.record_hashes[key] = digest

    def pytest_deselected(self, items):
        for item in items:
            entry = _test_entry(item)
            if entry is not None:
                entry["outcome"] = Outcome.DESELECTED
                entry["reason"] = "not run: deselected"
                self.tests[item.nodeid] = entry

    def pytest_runtest_logreport(self, report):
        entry = self.tests.get(report.nodeid)
        if entry is None:
            return
        properties = dict(report.user_properties)
        for name in ("measured", "expected"):
            if name in properties:
                entry[name] = properties[name]
        if report.when == "call":
            entry["duration_s"] = round(report.duration, 4)
        if report.when == "setup":
            if report.skipped:
                entry["outcome"], entry["reason"] = Outcome.SKIPPED, _reason(report)
                entry["skip_kind"] = getattr(report, "gdn_skip_kind", SkipKind.OTHER)
            elif report.failed:
                _failed(entry, report)
        elif report.when == "call":
            if getattr(report, "gdn_pending_failure", None) is not None:
                # Failed as the open PR says it should (pytest saw an xfail): evidence keeps it.
                entry["outcome"], entry["reason"] = Outcome.FAILED, report.gdn_pending_failure
                entry["failure"] = evidence_file.MEASURED
            elif getattr(report, "wasxfail", None) is not None:
                entry["outcome"] = Outcome.XFAILED if report.skipped else Outcome.XPASSED
                entry["reason"] = report.wasxfail
            elif report.skipped:
                entry["outcome"], entry["reason"] = Outcome.SKIPPED, _reason(report)
                entry["skip_kind"] = getattr(report, "gdn_skip_kind", SkipKind.OTHER)
            elif report.failed:
                _failed(entry, report)
            else:
                entry["outcome"], entry["reason"] = report.outcome, None
            if entry["outcome"] == Outcome.FAILED:  # a pending claim's failure too
                smallest, failing = _falsifying_example(report), _failing_batch(report)
                if smallest:
                    entry["smallest_batch"] = smallest
                if failing:
                    entry["failing_batch"] = failing
        elif report.when == "teardown" and report.failed and entry["outcome"] != Outcome.FAILED:
            _failed(entry, report)

    def pytest_sessionfinish(self, session, exitstatus):
        if not self.tests:
            return
        path = Path(
            self.config.getoption("gdn_evidence")
            or self.config.rootpath / evidence_file.DEFAULT_PATH
        )
        document = {
            "started_at": self.started.isoformat(timespec="seconds"),
            "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"
            ),
            "pytest_exit_status": int(exitstatus),
            "arguments": list(self.config.invocation_params.args),
            "environment": _environment(self.config.rootpath),
            "tests": [self.tests[nodeid] for nodeid in sorted(self.tests)],
            "claims": _index(self.tests.values(), lambda t: [t["claim"]]),
            "risks": _index(self.tests.values(), lambda t: t["risks"]),
            "record_sha256": dict(sorted(self.record_hashes.items())),
        }
        # mutants and the diff side of earlier commands (same release: kept)
        kept = evidence_file.take_parts(path)
        evidence_file.write(path, document)
        kept_lines = evidence_file.carry_over(path, kept)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("-", f"gdn-review evidence: {path} ({len(self.tests)} tests)")
            for line in kept_lines:
                reporter.write_line(line)


def _index(tests, keys) -> dict:
    """record:id -> the tests that address it and how they ended."""
    index: dict[str, dict] = {}
    for test in tests:
        for key in keys(test):
            slot = index.setdefault(f"{test['record']}:{key}", {"tests": [], "outcomes": {}})
            slot["tests"].append(test["nodeid"])
            slot["outcomes"][test["outcome"]] = slot["outcomes"].get(test["outcome"], 0) + 1
    for slot in index.values():
        slot["tests"].sort()
    return dict(sorted(index.items()))


def _git(root: Path, *args: str) -> str | None:
    import subprocess

    try:
        out = interrupts.run_child(
            ["git", *args], cwd=root, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _environment(root: Path) -> dict:
    from gdn_review import harness  # vLLM is already imported by the tests that ran

    environment = harness.environment()
    revision = _git(root, "rev-parse", "HEAD")
    dirty = _git(root, "status", "--porcelain", "--", "kb")
    environment["kb_revision"] = revision
    environment["kb_dirty"] = bool(dirty) if dirty is not None else None
    return environment
