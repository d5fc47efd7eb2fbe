"""Full-metadata snapshots: storage format, reading, differences, and (slow) a one-field change
caught on the installed vLLM."""

from __future__ import annotations

import json
import re
import sys

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import interrupts, release, snapshots
from gdn_review.common.snapshots import NO_FIELD
from gdn_review.run import snapshot_take
from tests.conftest import ROOT


def test_stored_format_is_deterministic_one_line_per_case_and_round_trips():
    data = snapshots.document(
        7,
        {
            "release": "0.33.0",
            "device": "cpu",
            "cases": {"b": {"x": [1, 2], "a": None}, "a": {"n": 1}},
        },
    )
    text = snapshots.dumps(data)
    assert json.loads(text) == data
    assert text == snapshots.dumps(json.loads(text))
    lines = text.splitlines()
    assert '  "a": {"n":1},' in lines and '  "b": {"a":null,"x":[1,2]}' in lines
    assert data["made_by"] == "gdn-review snapshot --record 7 --release 0.33.0"


def test_differences_name_every_changed_added_and_removed_field():
    before = {"c": {"num_prefills": 3, "gone": 1, "same": [1]}, "old": {}}
    after = {"c": {"num_prefills": 1, "new": None, "same": [1]}, "fresh": {}}
    found = {
        (d["case"], d["field"]): (d["before"], d["after"])
        for d in snapshots.differences(before, after)
    }
    assert found == {
        ("c", "num_prefills"): (3, 1),
        ("c", "gone"): (1, NO_FIELD),
        ("c", "new"): (NO_FIELD, None),
        ("fresh", "(case)"): ("absent", "present"),
        ("old", "(case)"): ("present", "absent"),
    }
    # A tensor whose values stayed: its dtype (or shape) moved, read with each side's table.
    moved = {"c": {"t": [1, 2]}}, {"c": {"t": {"dtype": "int64", "values": [1, 2]}}}
    (found,) = snapshots.differences(*moved, {"t": "int32"}, {"t": "int32"})
    assert found["change"] == "dtype int32 → int64"


def test_one_reader_finds_names_or_refuses_a_stored_snapshot(tmp_path):
    """The harness and the export read a release's snapshot alike: none stored (why, and the
    command that makes one), a file of another format refused naming it, else its content."""
    key, folder = 7, snapshots.snapshot_dir(tmp_path, 7)
    assert folder == tmp_path / "snapshots" / "7"
    assert snapshots.of_release(None, key, "0.33.0") == snapshots.of_release(folder, key, "0.33.0")
    stored, why = snapshots.of_release(folder, key, "0.33.0")
    assert stored is None and why == (
        "no stored snapshot of vLLM 0.33.0: make one with "
        "`gdn-review snapshot --record 7 --release 0.33.0`"
    )
    path = snapshots.snapshot_path(tmp_path, key, "0.33.0")
    path.parent.mkdir(parents=True)
    path.write_text('{"format": "gdn-review-snapshot/1", "cases": {}}', encoding="utf-8")
    with pytest.raises(snapshots.SnapshotFileError, match=r"7/0\.33\.0\.json: not a stored"):
        snapshots.of_release(folder, key, "0.33.0")
    assert snapshots.load(path) is None and snapshots.stored(tmp_path, key) == {}
    data = snapshots.document(key, {"release": "0.33.0", "device": "cpu", "cases": {}})
    path.write_text(snapshots.dumps(data), encoding="utf-8")
    assert snapshots.of_release(folder, key, "0.33.0") == (data, "")
    assert snapshots.stored(tmp_path, key) == {"0.33.0": data}


def test_every_record_has_a_stored_snapshot_of_the_installed_release_with_every_case():
    from gdn_review.kb import load_kb

    installed, _ = release.loaded()
    for record in load_kb(ROOT / "kb").values():
        stored = snapshots.stored(ROOT / "kb", record.key)
        assert installed in stored, f"run gdn-review snapshot --record {record.key}"
        assert set(stored[installed]["cases"]) == {c.id for c in record.cases}


def test_every_field_asks_the_harness_for_every_optional_part_and_a_call_case_has_metadata():
    cases = {"a": {"rows": [{"seq_len": 4, "query_len": 4}]}, "b": {"rows": [], "layout": True}}
    flagged = snapshot_take.every_field(cases)
    assert all(
        flagged[c][flag] is True
        for c in cases
        for flag in ("layout", "builder_fields", "server_fields")
    )
    assert "layout" not in cases["a"]  # the record's inputs are not changed
    assert snapshot_take.no_metadata({"raised": "ValueError: x"}) == "ValueError: x"
    assert snapshot_take.no_metadata({"not_applicable": "no CUDA"}) == "no CUDA"
    assert (
        snapshot_take.no_metadata({"returned": [1], "raised": None}) is None
    )  # a `call` case's result
    data = {
        "device": "cpu",
        "cases": {"c": {"returned": None, "raised": "ValueError: bad", "path": "spec"}},
    }
    assert snapshot_take.expect_lines(data, "c", "0.33.0")[1:] == [
        "expect:",
        "  path: spec",
        "  returned: null",
        "  raised: 'ValueError: bad'",
    ]


def test_snapshot_command_refuses_an_unknown_case():
    result = CliRunner().invoke(
        main,
        [
            "snapshot",
            "--kb",
            str(ROOT / "kb"),
            "--record",
            "52078",
            "--case",
            "nope",
            "--as-expect",
        ],
    )
    assert result.exit_code == 2 and "no case 'nope'" in result.output


RUN_MUTATED = """
import importlib.util, sys
from gdn_review import harness
harness.prepare_platform()
name = "vllm.v1.attention.backends.gdn_attn"
spec = importlib.util.find_spec(name)
source = open(spec.origin, encoding="utf-8").read()
find, replace = sys.argv[1], sys.argv[2]
assert source.count(find) == 1, f"edit does not apply once: {find!r}"
module = importlib.util.module_from_spec(spec)
sys.modules[name] = module
exec(compile(source.replace(find, replace), spec.origin, "exec"), module.__dict__)
import pytest
assert harness.vllm_release() == "0.33.0", harness.vllm_release()
sys.exit(pytest.main([
    "generated_tests/test_pr_52078.py", "-q", "-p", "no:cacheprovider", "--gdn-no-evidence",
    "-k", "cpu", "-rf",
]))
"""


@pytest.mark.slow
def test_a_change_of_one_prefill_field_fails_only_the_snapshot_tests():
    """No case's `expect` names prefill_has_initial_state: only the full snapshots can see it
    change. On 0.33.0 from the release cache, the release the edit is written against."""
    from gdn_review.common import release_trees

    done = interrupts.run_child(
        [
            sys.executable,
            "-c",
            RUN_MUTATED,
            "prefill_has_initial_state=prefill_has_initial_state,",
            "prefill_has_initial_state=None,",
        ],
        check=False,
        cwd=ROOT,
        env=release_trees.environment(release_trees.tree("0.33.0")),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    failed = re.findall(r"^FAILED (\S+)", done.stdout, re.MULTILINE)
    assert failed and all("::test_snapshot[" in nodeid for nodeid in failed), failed
    assert any("spec_decode_and_prefill" in nodeid for nodeid in failed)
    assert "prefill_has_initial_state" in done.stdout
