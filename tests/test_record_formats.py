"""Records keep their meaning across the tool's format changes (issue 56).

The KB's records as they stood at two commits of this repository's history
(tests/fixtures/history/<commit>/, copied with `git show <commit>:kb/<file>`):

- bdd4333: format 1 before the dtype rule (2b4122d): no expect states a dtype;
- 795160d: format 1 after the dtype rule, before the builder family (522c681): the mixed
  batches' token indices state ``{dtype: int64, ...}``, the other tensors their values.

Each is generated and run on the installed vLLM (0.33.0) by the current tool, in this process
(one pytest session for every module, the equivalence checks: the claims that read a record's
expects), and each claim's verdict must be what the commit's own code gave on 0.33.0 (measured by
running `gdn-review run` in a clone of each commit with this environment, which has the same
lock: constraints.txt and pyproject.toml did not change since; both commits gave these verdicts
to their equivalence claims). Then `gdn-review migrate` brings three of bdd4333's records to the
current format (the dtypes measured), with the same verdicts.
"""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner

from gdn_review import generate
from gdn_review.cli import main
from gdn_review.common import record_format
from gdn_review.kb import load_kb, load_record
from gdn_review.report.report_contents import report_data
from gdn_review.run import evidence_file, migrate
from tests.conftest import MINIMAL, ROOT, in_process_pytest

HISTORY = ROOT / "tests" / "fixtures" / "history"
COMMITS = ("bdd4333", "795160d")
# The records whose equivalence claim the dtype rule turned to "fails" (issue 56): migrated.
MIGRATED = ("52078", "53542", "56531")

# Each equivalence claim's verdict at bdd4333 (and at 795160d), by that commit's own code on
# vLLM 0.33.0 (CPU); the current tool gave #52078 C3, #53542 C3 and #56531 C1 "fails".
VERDICTS_AT_BDD4333 = {
    "34871": {"C1": "holds", "C2": "holds"},
    "40738": {"C1": "pending", "C2": "holds", "C3": "holds"},
    "44700": {"C1": "holds", "C2": "holds", "C3": "holds"},
    "45100": {"C1": "holds", "C4": "holds"},
    "51508": {"C2": "holds", "C3": "holds"},
    "51565": {"C1": "holds", "C2": "holds", "C3": "holds", "C4": "holds"},
    "52078": {"C3": "known deviation"},
    "52297": {"C2": "holds", "C3": "holds"},
    "52839": {"C1": "holds"},
    "53542": {"C1": "pending", "C2": "pending", "C3": "holds", "C4": "holds", "C5": "holds"},
    "55404": {"C2": "known deviation"},
    "55504": {"C1": "pending", "C2": "pending", "C3": "pending"},
    "56531": {"C1": "holds", "C3": "holds"},
    "56960": {"C1": "holds", "C2": "holds", "C4": "holds"},
    "57560": {"C1": "holds", "C2": "holds", "C4": "holds"},
    "flashinfer_checkpoint_plan": {"C1": "holds", "C2": "holds", "C3": "holds", "C4": "holds"},
    "full_graph_staging": {"C1": "holds", "C2": "holds", "C3": "holds", "C4": "holds"},
    "runner_inputs": {"C1": "holds", "C2": "holds", "C3": "holds", "C4": "holds"},
    "update_block_table": {claim: "holds" for claim in ("C2", "C3", "C4", "C5", "C6", "C7", "C8")},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The fixtures' KBs (each commit's, and bdd4333's migrated records), generated and run in
    one pytest session: folder name -> (records, evidence, migrations)."""
    work = tmp_path_factory.mktemp("formats")
    kbs = {}
    for commit in COMMITS:
        shutil.copytree(HISTORY / commit, work / commit / "kb")
        kbs[commit] = work / commit / "kb"
    migrated = work / "migrated" / "kb"
    migrated.mkdir(parents=True)
    for key in MIGRATED:
        shutil.copy(HISTORY / "bdd4333" / f"{key}.yaml", migrated)
    migrations = migrate.migrate(migrated, say=lambda line: None)
    kbs["migrated"] = migrated
    folders = []
    for name, kb in kbs.items():
        generate.apply(generate.plan(kb, kb.parent / "generated"))
        folders.append(str(kb.parent / "generated"))
    evidence_path = work / "evidence.json"
    code, printed = in_process_pytest(
        *folders, "-q", "-k", "equivalence", "--gdn-evidence", str(evidence_path)
    )
    assert code in (0, 1), printed[-3000:]  # pending claims fail as the PR says they should
    evidence = evidence_file.load([evidence_path])
    return {name: load_kb(kb) for name, kb in kbs.items()}, evidence, migrations, printed


def _equivalence_verdicts(records, evidence) -> dict[str, dict[str, str]]:
    verdicts = {}
    for record in records.values():
        kinds = {claim.id: claim.check.kind for claim in record.claims}
        rows = report_data(record, evidence)["claims"]
        mine = {row["id"]: row["verdict"] for row in rows if kinds[row["id"]] == "equivalence"}
        if mine:
            verdicts[str(record.key)] = mine
    return verdicts


@pytest.mark.slow
@pytest.mark.xdist_group("record_formats")
@pytest.mark.parametrize("commit", COMMITS)
def test_old_records_give_the_verdicts_they_gave_when_written(runs, commit):
    records, evidence, _, printed = runs
    assert {record.schema_version for record in records[commit].values()} == {1}
    assert _equivalence_verdicts(records[commit], evidence) == VERDICTS_AT_BDD4333, printed[-3000:]
    # No claim of these records fails, so nothing advises "Fix the code" (issue 56's
    # #52078 C3, #53542 C3 and #56531 C1 read "fails" on the mixed batches' int64 indices),
    # and no test of theirs names a dtype the records never stated.
    keys = {record.key for record in records[commit].values()}
    folder = f"/{commit}/generated/"
    said = [
        test["reason"]
        for test in evidence.tests
        if test["record"] in keys and folder in test.get("nodeid", folder) and test.get("reason")
    ]
    assert not [reason for reason in said if "dtype" in reason], said


@pytest.mark.slow
@pytest.mark.xdist_group("record_formats")
def test_migrate_states_the_measured_dtypes_keeps_comments_and_verdicts(runs):
    records, evidence, migrations, printed = runs
    assert [m.path.stem for m in migrations] == list(MIGRATED)
    for migration in migrations:
        assert migration.changed_verdicts == [] and migration.release
        # A diff of the lines it changed: schema_version and the tensors' dtypes.
        assert "-schema_version: 1\n+schema_version: 2\n" in migration.diff
        new = migration.path.read_text(encoding="utf-8")
        old = (HISTORY / "bdd4333" / migration.path.name).read_text(encoding="utf-8")
        comments = [line for line in old.splitlines() if line.lstrip().startswith("#")]
        assert comments == [line for line in new.splitlines() if line.lstrip().startswith("#")]
        assert len(old.splitlines()) == len(new.splitlines())
    record = records["migrated"][next(p for p in records["migrated"] if p.stem == "52078")]
    assert record.schema_version == record_format.CURRENT
    mixed = record.case("spec_decode_and_prefill").expect
    assert mixed["spec_token_indx"] == {"dtype": "int64", "values": [0, 1, 2, 3]}
    # A spec-only batch's indices are int32, stated (no usual dtype: the batch decides it).
    assert record.case("pure_spec_decode").expect["spec_token_indx"]["dtype"] == "int32"
    # num_accepted_tokens has its usual dtype (int32): its values, as before.
    assert isinstance(mixed["num_accepted_tokens"], list)
    verdicts = _equivalence_verdicts(records["migrated"], evidence)
    assert verdicts == {key: VERDICTS_AT_BDD4333[key] for key in MIGRATED}, printed[-3000:]


def test_migrate_check_names_each_record_behind_and_validate_says_its_format(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    (kb / "7.yaml").write_text(MINIMAL, encoding="utf-8")
    (kb / "8.yaml").write_text(
        MINIMAL.replace("schema_version: 1", "schema_version: 2").replace("number: 7", "number: 8"),
        encoding="utf-8",
    )
    result = CliRunner().invoke(main, ["migrate", "--kb", str(kb), "--check"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines() == [
        f"behind  {kb / '7.yaml'}: format 1, current 2: run `gdn-review migrate`"
    ]
    result = CliRunner().invoke(main, ["validate", "--kb", str(kb)])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("ok")]
    assert lines[0].endswith(
        "; format 1, read as written (the current format adds 2: each expected tensor's "
        "dtype; `gdn-review migrate` measures and states it)"
    )
    assert lines[1].endswith("; format 2 (current)")
    (kb / "7.yaml").unlink()
    result = CliRunner().invoke(main, ["migrate", "--kb", str(kb), "--check"])
    assert result.exit_code == 0 and "every record is in the current format (2)" in result.output


def test_a_record_names_a_format_the_tool_knows():
    text = MINIMAL.replace("schema_version: 1", "schema_version: 3")
    from gdn_review.kb import RecordErrors, parse_record

    with pytest.raises(RecordErrors) as failure:
        parse_record(text, "7.yaml")
    (error,) = failure.value.errors
    assert str(error).startswith("7.yaml:1:17: schema_version: ")


def test_each_format_reads_an_expect_without_a_dtype_as_it_did():
    """Format 1: a tensor written as its values compares its values; format 2: it has its
    field's usual dtype, and a field whose dtype depends on the batch has none to guess."""
    from gdn_review import harness
    from gdn_review.harness.values import Tensor

    measured = {
        "num_accepted_tokens": Tensor([2, 1], "int64", [2]),
        "spec_token_indx": Tensor([0, 1], "int64", [2]),
    }
    written = {"num_accepted_tokens": [2, 1], "spec_token_indx": [0, 1]}
    assert harness.expect_differences(measured, written, 1) == {}
    found = harness.expect_differences(measured, written, 2)
    assert list(found) == ["num_accepted_tokens"]
    assert harness.describe_differences(found) == "num_accepted_tokens: dtype int64, expected int32"
    # {values}: a tensor whose dtype was never measured (a case no release runs yet).
    accepted = {"num_accepted_tokens": measured["num_accepted_tokens"]}
    unmeasured = {"num_accepted_tokens": {"values": [2, 1]}}
    assert harness.expect_differences(accepted, unmeasured, 2) == {}
    other = {"num_accepted_tokens": {"values": [2, 2]}}
    assert harness.describe_differences(harness.expect_differences(accepted, other, 2)) == (
        "num_accepted_tokens: [2, 1], expected {'values': [2, 2]}"
    )


def test_the_kbs_own_records_are_in_the_current_format():
    records = load_kb(ROOT / "kb")
    assert {record.schema_version for record in records.values()} == {record_format.CURRENT}
    record = load_record(ROOT / "kb" / "52078.yaml")
    assert record.case("spec_decode_and_prefill").expect["non_spec_token_indx"]["dtype"] == "int64"


def test_snapshots_taken_with_different_tables_compare_by_what_they_mean():
    """A snapshot taken when the token indices had a usual dtype (int32, written as values) and
    one taken after (every dtype stated) hold the same tensor: no drift; a dtype that moved is
    still named."""
    from gdn_review.common import snapshots

    before = {"case": {"spec_token_indx": [0, 1], "num_decodes": 0}}
    usual_before = {"spec_token_indx": "int32"}
    same = {"case": {"spec_token_indx": {"dtype": "int32", "values": [0, 1]}, "num_decodes": 0}}
    assert snapshots.differences(before, same, usual_before, {}) == []
    moved = {"case": {"spec_token_indx": {"dtype": "int64", "values": [0, 1]}, "num_decodes": 0}}
    (row,) = snapshots.differences(before, moved, usual_before, {})
    assert (row["field"], row["change"]) == ("spec_token_indx", "dtype int32 → int64")
