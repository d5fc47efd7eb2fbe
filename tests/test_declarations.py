"""Class-level declarations as call targets and the speculation method, on real releases (#55).

tests/fixtures/declarations/kb/53929.yaml is a record of #53929's three changes, written as
docs/records.md shows. Each release runs its cases in a child on that release's files
(0.33.0, 0.34.0 and 0.30.0, each from the release cache), or in this process where it is the
installed release (the generated module's run below shares its vLLM import), measured by the
harness as a generated test measures them: a target a release inherits reads the inherited
value, one it lacks "not applicable".
"""

from __future__ import annotations

import json
import sys

import pytest

from gdn_review.common import interrupts, release_trees
from gdn_review.common.release import loaded
from tests.conftest import ROOT, in_process_pytest

RECORD = ROOT / "tests" / "fixtures" / "declarations" / "kb" / "53929.yaml"

# Each case (and two more: a class attribute, the reorder threshold per method) measured
# as build_case measures it; a skip as "skipped: <reason>".
# A child runs it as a script; this process calls its measure() (on the installed release).
CHILD = """
import json, sys
import pytest
from gdn_review.harness.environment import prepare_platform
prepare_platform()
from gdn_review.harness.case_build import build_case
from gdn_review.kb import load_record


def measure(path):
    cases = load_record(path).case_inputs()
    attribute = "GDNAttentionMetadataBuilder._cudagraph_support"
    cases["cudagraph_support"] = {"call": {"attribute": attribute}}
    for method in ("ngram", "draft_model", "mtp"):
        cases[f"reorder_{method}"] = {
            "speculative_tokens": 2,
            "speculative_method": method,
            "builder_fields": ["reorder_batch_threshold"],
            "rows": [{"seq_len": 10, "query_len": 3, "drafted": 2}],
        }
    cases["varlen_mtp"] = {**cases["varlen_ngram"], "speculative_method": "mtp"}
    measured = {}
    for case_id, case in sorted(cases.items()):
        try:
            data = build_case("cpu", case, count_ops=False).metadata
        except pytest.skip.Exception as skip:
            measured[case_id] = "skipped: " + str(skip.msg)
            continue
        if case_id == "adaptive_uniform_spec":
            data = data.get("uniform_spec_sequence_length", "no such field")
        elif case_id.startswith("reorder_"):
            data = data["reorder_batch_threshold"]
        measured[case_id] = data
    return measured


if __name__ == "__main__":
    print("MEASURED " + json.dumps(measure(sys.argv[1]), sort_keys=True))
"""


def _installed(version: str) -> bool:
    """Whether ``version`` is the release this process loads (and a child without a release
    tree on its PYTHONPATH): then it runs here, with no vLLM import of its own."""
    return loaded()[0] == version


def _measure(release: str | None) -> dict:
    if release is not None and _installed(release):
        here: dict = {"__name__": "in_this_process"}
        exec(compile(CHILD, "<declarations CHILD>", "exec"), here)
        # What the child prints, through JSON: the same types the assertions compare.
        return json.loads(json.dumps(here["measure"](str(RECORD)), sort_keys=True))
    env = None if release is None else release_trees.environment(release_trees.tree(release))
    done = interrupts.run_child(
        [sys.executable, "-c", CHILD, str(RECORD)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("MEASURED ")]
    assert done.returncode == 0 and lines, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("MEASURED "))


def _returned(value) -> dict:
    return {"returned": value, "raised": None}


VARLEN = "GDNAttentionMetadataBuilder.get_varlen_cudagraph_max_query_len"


@pytest.mark.slow
@pytest.mark.parametrize(
    "release, expected",
    [
        (
            "0.33.0",  # from the release cache: the base class's declarations, inherited
            {
                "adaptive_uniform_spec": 3,
                "backend_allows_mismatch": _returned(False),
                "varlen_ngram": _returned(None),
                "varlen_draft_model": _returned(None),
                "varlen_mtp": _returned(None),
                "reorder_ngram": 3,
                "reorder_draft_model": 3,
                "reorder_mtp": 3,
            },
        ),
        pytest.param(
            "0.34.0",  # #53929's own
            {
                "adaptive_uniform_spec": None,
                "backend_allows_mismatch": _returned(True),
                "varlen_ngram": _returned(3),
                "varlen_draft_model": _returned(4),
                "varlen_mtp": _returned(3),
                "reorder_ngram": 3,
                "reorder_draft_model": 4,
                "reorder_mtp": 3,
            },
            # With the next test on one worker: where 0.34.0 is installed, one vLLM import.
            marks=pytest.mark.xdist_group("declarations-0.34.0"),
        ),
        (
            "0.30.0",  # no get_varlen_cudagraph_max_query_len anywhere: not applicable
            {
                "backend_allows_mismatch": _returned(False),
                "varlen_ngram": f"skipped: not applicable: vLLM 0.30.0 has no {VARLEN}",
                "varlen_draft_model": f"skipped: not applicable: vLLM 0.30.0 has no {VARLEN}",
            },
        ),
    ],
    ids=["0.33.0", "0.34.0", "0.30.0"],
)
def test_declarations_and_methods_read_per_release(release, expected):
    measured = _measure(release)
    assert {key: measured[key] for key in expected} == expected
    # A class attribute, read from the class (inherited or its own).
    assert measured["cudagraph_support"] == _returned("UNIFORM_BATCH")


@pytest.mark.slow
@pytest.mark.xdist_group("declarations-0.34.0")
def test_the_record_generates_and_passes_on_the_release_with_the_change(tmp_path):
    """The generated module of the fixture record on 0.34.0: every CPU test passes (in this
    process where 0.34.0 is the installed release, else in a child on its files)."""
    from gdn_review import generate

    out = tmp_path / "generated"
    generate.apply(generate.plan(RECORD.parent, out))
    evidence = ["--gdn-evidence", str(tmp_path / "evidence.json"), str(out)]
    if _installed("0.34.0"):
        code, printed = in_process_pytest("-q", *evidence)
    else:
        done = interrupts.run_child(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"]
            + evidence,
            cwd=tmp_path,
            env=release_trees.environment(release_trees.tree("0.34.0")),
            capture_output=True,
            text=True,
            timeout=600,
        )
        code, printed = done.returncode, done.stdout
    last = printed.strip().splitlines()[-1]
    assert code == 0 and "4 passed" in last, printed[-3000:]


# --- Where an exception of a call case comes from (harness/origin.py's rule) ---------------------

CALL_CASE = {
    "id": "backend_declares_mismatch",
    "call": {"function": "GDNAttentionBackend.supports_device_cpu_query_lens_mismatch"},
}


def _settings():
    from gdn_review.harness.case_build import settings_for

    return settings_for(CALL_CASE, "cpu")


def test_a_call_that_raises_is_what_the_case_measures(monkeypatch):
    from gdn_review.harness import declarations

    def refuses(*_):
        raise ValueError("vLLM refuses")

    monkeypatch.setattr(declarations, "declaration", lambda target, builder: (None, refuses))
    measured = declarations.call_declaration(CALL_CASE, _settings())
    assert measured["returned"] is None and "vLLM refuses" in str(measured["raised"])


def test_a_server_set_up_that_raises_could_not_run_and_our_reading_is_our_own_error(monkeypatch):
    import contextlib

    from gdn_review.harness import declarations
    from gdn_review.harness.origin import CouldNotRun

    @contextlib.contextmanager
    def no_resolver(settings):
        raise AttributeError("module has no _resolve_gdn_prefill_backend")
        yield

    monkeypatch.setattr(declarations, "as_on_server", no_resolver)
    with pytest.raises(CouldNotRun, match="_resolve_gdn_prefill_backend"):
        declarations.call_declaration(CALL_CASE, _settings())
    monkeypatch.undo()

    def our_bug(value):
        raise KeyError("a bug in measured_value")

    monkeypatch.setattr(declarations, "measured_value", our_bug)
    with pytest.raises(KeyError, match="a bug in measured_value"):  # not a measured "raised"
        declarations.call_declaration(CALL_CASE, _settings())
