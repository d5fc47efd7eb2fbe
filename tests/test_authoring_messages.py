"""Messages a new user met while writing a record (issue 47), each saying what is true."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from gdn_review.common import release_cache
from gdn_review.kb import load_record
from gdn_review.run import evidence_file
from tests.conftest import ROOT


def _evidence(path: Path, records: list, **parts) -> None:
    tests = [
        {"nodeid": f"m{key}::t", "record": key, "claim": "C1", "outcome": "passed"}
        for key in records
    ]
    environment = {"vllm_version": "0.33.0"}
    data = {"format": evidence_file.FORMAT, "environment": environment, "tests": tests, **parts}
    path.write_text(json.dumps(data), "utf-8")


def test_mutation_results_of_a_record_this_run_has_no_test_of_are_not_said_kept(tmp_path):
    """A record deleted after `mutate`: the next run has no test of it, and says so."""
    path = tmp_path / "evidence.json"
    mutation = {
        "records": {key: {"release": "0.33.0", "notes": []} for key in ("7", "54636")},
        "mutants": [{"record": 54636, "id": "m1", "status": "killed"}],
    }
    _evidence(path, [7, 54636], mutation=mutation)
    kept = evidence_file.take_parts(path)
    _evidence(path, [7])  # kb/54636.yaml is gone: the new run has no test of it
    lines = evidence_file.carry_over(path, kept)
    assert any(line.startswith("evidence: kept the mutation results of 7 ") for line in lines)
    assert not any("kept" in line and "54636" in line for line in lines), lines
    assert (
        "evidence: the mutation results of 54636 stay in the file, but this run has no test of "
        "it: its record is gone from the KB or was not selected"
    ) in lines


@pytest.mark.parametrize("named", [False, True], ids=["no-related", "related-in-step"])
def test_own_hunks_note_says_the_other_blocks_are_other_prs_changes_of_the_step(tmp_path, named):
    """#51565's step 0.30.0 -> 0.31.0 carries other PRs' changes; the note no longer sends the
    reader to kb/history/changes.yaml (which covers only some releases) as if it held them."""
    from gdn_review import mutation

    if any(release_cache.cached(v) is None for v in ("0.30.0", "0.31.0")):
        pytest.skip("vLLM 0.30.0 and 0.31.0 are not in the release cache")
    data = yaml.safe_load((ROOT / "kb" / "51565.yaml").read_text(encoding="utf-8"))
    if named:
        data["related"].append(
            {
                "number": 51000,
                "title": "Another change of the step",
                "relation": "same-area",
                "from_release": "0.31.0",
            }
        )
    path = tmp_path / "51565.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    catalogue = mutation.catalogue_for(path, load_record(path), fetch=False)
    (note,) = [n for n in catalogue.notes if n.startswith("target.own_hunks")]
    assert "changes of other PRs that shipped in the same release, and give none" in note, note
    assert "changes.yaml" not in note
    assert ("(the record names #51000 among them)" in note) == named


def test_mutate_refuses_an_own_hunks_line_the_diff_does_not_change_as_validate_does(tmp_path):
    """Before, validate named the line but mutate ran with the lines that did map."""
    from gdn_review import mutation
    from gdn_review.kb import RecordErrors

    if any(release_cache.cached(v) is None for v in ("0.30.0", "0.31.0")):
        pytest.skip("vLLM 0.30.0 and 0.31.0 are not in the release cache")
    data = yaml.safe_load((ROOT / "kb" / "51565.yaml").read_text(encoding="utf-8"))
    data["target"]["own_hunks"].append("no PR changed this line")
    path = tmp_path / "51565.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    with pytest.raises(RecordErrors) as refused:
        mutation.catalogue_for(path, load_record(path), fetch=False)
    (error,) = refused.value.errors
    assert "target.own_hunks" in str(error) and "'no PR changed this line' is not a line" in str(
        error
    )
    assert str(error).startswith(f"{path}:")
