"""Input from a PR (its diff, gh's JSON, its title and file names) is a stranger's: hostile forms.

Each test feeds one hostile form and checks the outcome: a clear refusal
(exit 2, naming the file and hunk, nothing written, nothing run, a sentinel
outside the tree byte-identical), or the text shown as text in markdown.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import socket
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import interrupts, patched_tree, unified_diff
from gdn_review.report import markdown
from gdn_review.review import render, review_files
from gdn_review.review.onto_release import Onto
from tests.conftest import ROOT

TARGET = "vllm/v1/attention/backends/gdn_attn.py"
SOURCE = "def f(mask):\n    return ~mask\n"
SENTINEL_TEXT = "# the sentinel: must stay byte-identical\n"


class Done:
    """A command's outcome, as a test reads it (exit code, stdout, stderr)."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def gdn(*args):
    """The command line in this process: every refusal here comes before vLLM is imported."""
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    return Done(result.exit_code, result.stdout, result.stderr)


def gdn_process(*args):
    """The real command line in a fresh process (as CI and a reviewer run it)."""
    return interrupts.run_child(
        [sys.executable, "-m", "gdn_review.cli", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def hunk_diff(path_a: str, path_b: str, old: str, new: str) -> str:
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), path_a, path_b))


@pytest.fixture
def vllm_src(tmp_path) -> Path:
    """A vLLM source folder (--vllm-src) with the builder's file as 0.33.0 ships it in spirit: a
    real change applies to it."""
    src = tmp_path / "src"
    (src / "vllm" / "v1" / "attention" / "backends").mkdir(parents=True)
    (src / "vllm" / "__init__.py").write_text("", encoding="utf-8")
    (src / "vllm" / "_version.py").write_text(
        '__version__ = version = "0.33.0"\n', encoding="utf-8"
    )
    (src / TARGET).write_text(SOURCE, encoding="utf-8")
    return src


@pytest.fixture
def sentinel(tmp_path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "victim.py"
    path.write_text(SENTINEL_TEXT, encoding="utf-8")
    return path


def real_change() -> str:
    return hunk_diff(f"a/{TARGET}", f"b/{TARGET}", SOURCE, SOURCE.replace("~mask", "mask"))


def escape_to(sentinel: Path, src: Path) -> str:
    """``vllm/../../…/victim.py``: a name inside vllm/ that climbs to ``sentinel``."""
    climbs = "/".join([".."] * (len(src.resolve().parts) + 1))
    return f"vllm/{climbs}{sentinel.resolve()}"


def assert_refused(done, sentinel: Path, out: Path, *words: str) -> None:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert sentinel.read_text(encoding="utf-8") == SENTINEL_TEXT
    assert not out.exists(), "a refused diff wrote its report"
    assert "running" not in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


# ------------------------------------------------------------ paths (the hole of issue #26)


@pytest.mark.parametrize(
    "beside_a_real_change", [True, False], ids=["beside-a-real-change", "alone"]
)
def test_a_name_that_climbs_out_of_vllm_is_refused(
    tmp_path, vllm_src, sentinel, beside_a_real_change
):
    name = escape_to(sentinel, vllm_src)
    diff = tmp_path / "climb.diff"
    diff.write_text(
        (real_change() if beside_a_real_change else "")
        + hunk_diff(f"a/{name}", f"b/{name}", SENTINEL_TEXT, "pwned = True\n"),
        encoding="utf-8",
    )
    done = gdn("review", diff, "--vllm-src", vllm_src, "--out", tmp_path / "out")
    assert_refused(
        done, sentinel, tmp_path / "out", "refused: a '..' part", "hunk 1 (@@ -1 +1 @@)", f"{diff}:"
    )


def test_a_name_that_climbs_out_of_the_installed_release_is_refused(tmp_path, sentinel):
    name = "vllm/" + "/".join([".."] * 40) + str(sentinel.resolve())
    diff = tmp_path / "climb.diff"
    diff.write_text(
        real_change() + hunk_diff(f"a/{name}", f"b/{name}", SENTINEL_TEXT, "pwned = True\n"),
        encoding="utf-8",
    )
    done = gdn_process(
        "review", diff, "--out", tmp_path / "out"
    )  # onto the installed vLLM, as the run did
    assert_refused(done, sentinel, tmp_path / "out", "refused: a '..' part")


@pytest.mark.parametrize(
    "beside_a_real_change", [True, False], ids=["beside-a-real-change", "alone"]
)
def test_an_absolute_name_is_refused(tmp_path, vllm_src, sentinel, beside_a_real_change):
    name = str(sentinel.resolve())
    diff = tmp_path / "absolute.diff"
    # git writes a/ and b/ before names; a hand-made diff may not: "--- /tmp/x" is absolute.
    diff.write_text(
        (real_change() if beside_a_real_change else "")
        + hunk_diff(name, name, SENTINEL_TEXT, "pwned = True\n"),
        encoding="utf-8",
    )
    done = gdn("review", diff, "--vllm-src", vllm_src, "--out", tmp_path / "out")
    assert_refused(done, sentinel, tmp_path / "out", "refused: an absolute path")


@pytest.mark.parametrize(
    "beside_a_real_change", [True, False], ids=["beside-a-real-change", "alone"]
)
def test_a_symlink_out_of_the_tree_is_refused(tmp_path, vllm_src, sentinel, beside_a_real_change):
    (vllm_src / "vllm" / "plugins").symlink_to(sentinel.parent, target_is_directory=True)
    name = "vllm/plugins/victim.py"
    diff = tmp_path / "link.diff"
    diff.write_text(
        (real_change() if beside_a_real_change else "")
        + hunk_diff(f"a/{name}", f"b/{name}", SENTINEL_TEXT, "pwned = True\n"),
        encoding="utf-8",
    )
    done = gdn("review", diff, "--vllm-src", vllm_src, "--out", tmp_path / "out")
    assert_refused(
        done,
        sentinel,
        tmp_path / "out",
        "vllm/plugins is a symbolic link out of the tree",
        "'vllm/plugins/victim.py'",
    )


def test_a_symlinked_file_out_of_the_tree_is_refused(tmp_path, vllm_src, sentinel):
    (vllm_src / "vllm" / "victim.py").symlink_to(sentinel)
    diff = tmp_path / "link.diff"
    diff.write_text(
        real_change()
        + hunk_diff("a/vllm/victim.py", "b/vllm/victim.py", SENTINEL_TEXT, "pwned = True\n"),
        encoding="utf-8",
    )
    done = gdn("review", diff, "--vllm-src", vllm_src, "--out", tmp_path / "out")
    assert_refused(done, sentinel, tmp_path / "out", "symbolic link out of the tree")


@pytest.mark.parametrize("kind", ["fifo", "socket", "folder"])
def test_a_name_that_is_not_a_regular_file_of_the_release_is_refused(
    tmp_path, vllm_src, sentinel, kind
):
    special = vllm_src / "vllm" / "special"
    if kind == "fifo":
        os.mkfifo(special)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(special))
    else:
        special.mkdir()
    diff = tmp_path / "special.diff"
    diff.write_text(
        real_change() + hunk_diff("a/vllm/special", "b/vllm/special", "x\n", "y\n"),
        encoding="utf-8",
    )
    done = gdn("review", diff, "--vllm-src", vllm_src, "--out", tmp_path / "out")
    assert_refused(done, sentinel, tmp_path / "out", "not a regular file of the tree")


def test_work_inside_the_sources_is_refused(tmp_path, vllm_src, sentinel):
    diff = tmp_path / "change.diff"
    diff.write_text(real_change(), encoding="utf-8")
    done = gdn(
        "review",
        diff,
        "--vllm-src",
        vllm_src,
        "--work",
        vllm_src / "vllm" / "work",
        "--out",
        tmp_path / "out",
    )
    assert_refused(
        done, sentinel, tmp_path / "out", "--work", "inside (or holding) the vLLM sources"
    )
    assert not (vllm_src / "vllm" / "work").exists()


def test_the_overlay_itself_writes_nothing_outside_its_folder(tmp_path, vllm_src, sentinel):
    """Defence in depth: even called directly with a climbing name, the tree of links refuses it."""
    name = escape_to(sentinel, tmp_path / "overlay")
    with pytest.raises(unified_diff.PatchError, match="a '..' part"):
        patched_tree.overlay(
            vllm_src, {TARGET: "x = 1\n", name: "pwned = True\n"}, tmp_path / "overlay"
        )
    assert sentinel.read_text(encoding="utf-8") == SENTINEL_TEXT


def test_reading_the_release_through_a_climbing_name_is_refused(vllm_src, sentinel):
    onto = Onto("0.33.0", vllm_src.resolve(), vllm_src.resolve(), "test")
    with pytest.raises(unified_diff.PatchError, match="a '..' part"):
        onto.read(escape_to(sentinel, vllm_src))


# ------------------------------------------------------------ diff headers


def parsed_or_refused(text: str):
    try:
        return unified_diff.read_diff(text, "hostile.diff")
    except unified_diff.PatchError as error:
        return str(error)


@pytest.mark.parametrize(
    "text, reason",
    [
        (
            "diff --git a/vllm/x.py b/vllm/y.py\nsimilarity index "
            "100%\nrename from vllm/x.py\nrename to vllm/../../etc/passwd\n",
            "a '..' part",
        ),
        (
            "diff --git a/vllm/x.py b/vllm/y.py\nsimilarity index 90%\ncopy "
            "from /etc/passwd\ncopy to vllm/y.py\n",
            "an absolute path",
        ),
        (
            'diff --git "a/vllm/\\056\\056/x.py" '
            '"b/vllm/\\056\\056/x.py"\n--- "a/vllm/\\056\\056/x.py"\n+++ '
            '"b/vllm/\\056\\056/x.py"\n@@ -1 +1 @@\n-a\n+b\n',
            "a '..' part",
        ),
        (
            '--- "a/vllm/x\\ty.py"\n+++ "b/vllm/x\\ty.py"\n@@ -1 +1 @@\n-a\n+b\n',
            "a control character",
        ),
        ("--- a/vllm\\..\\x.py\n+++ b/vllm\\..\\x.py\n@@ -1 +1 @@\n-a\n+b\n", "a backslash"),
        ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", "names no file on either side"),
        ("--- a/vllm//x.py\n+++ b/vllm//x.py\n@@ -1 +1 @@\n-a\n+b\n", "an empty or '.' part"),
        (
            f"--- a/vllm/{'x' * 2000}.py\n+++ b/vllm/{'x' * 2000}.py\n@@ -1 +1 @@\n-a\n+b\n",
            "characters (at most 1024)",
        ),
    ],
    ids=[
        "rename-climbs",
        "copy-from-absolute",
        "git-quoted-dots",
        "control-character",
        "backslash",
        "dev-null-both",
        "empty-part",
        "huge-name",
    ],
)
def test_hostile_headers_are_refused_naming_the_file(text, reason):
    refused = parsed_or_refused(text)
    assert isinstance(refused, str), f"accepted: {refused}"
    assert reason in refused and refused.startswith("hostile.diff:")


def test_rename_and_copy_headers_apply_inside_the_tree():
    rename = (
        "diff --git a/vllm/x.py b/vllm/y.py\nsimilarity index "
        "100%\nrename from vllm/x.py\nrename to vllm/y.py\n"
    )
    copy = (
        "diff --git a/vllm/x.py b/vllm/z.py\nsimilarity index 100%\ncopy "
        "from vllm/x.py\ncopy to vllm/z.py\n"
    )
    assert unified_diff.apply(unified_diff.read_diff(rename), {"vllm/x.py": SOURCE}.get) == {
        "vllm/y.py": SOURCE,
        "vllm/x.py": None,
    }
    assert unified_diff.apply(unified_diff.read_diff(copy), {"vllm/x.py": SOURCE}.get) == {
        "vllm/z.py": SOURCE
    }


def test_a_crlf_diff_applies_as_its_lf_twin():
    lf = real_change()
    crlf = lf.replace("\n", "\r\n")
    assert unified_diff.apply(
        unified_diff.read_diff(crlf), {TARGET: SOURCE}.get
    ) == unified_diff.apply(unified_diff.read_diff(lf), {TARGET: SOURCE}.get)


def test_a_binary_patch_in_vllm_is_refused(tmp_path, vllm_src, sentinel):
    binary = (
        f"diff --git a/{TARGET} b/{TARGET}\nindex 1..2 100644\nGIT binary "
        "patch\nliteral 5\nMcmZ?d00001\n\nliteral 0\nHcmV?d00001\n\n"
    )
    diff = tmp_path / "binary.diff"
    diff.write_text(binary, encoding="utf-8")
    done = gdn("review", diff, "--vllm-src", vllm_src, "--out", tmp_path / "out")
    assert_refused(done, sentinel, tmp_path / "out", "a binary change cannot be applied")


def test_a_diff_of_hundreds_of_megabytes_is_refused_unread(tmp_path, vllm_src, sentinel):
    diff = tmp_path / "huge.diff"
    with open(diff, "wb") as stream:
        stream.truncate(300 * 2**20)  # sparse: costs no disk
    done = gdn("review", diff, "--vllm-src", vllm_src, "--out", tmp_path / "out")
    assert_refused(done, sentinel, tmp_path / "out", "300 MiB, larger than a diff gdn-review reads")


def test_a_diff_that_is_a_fifo_is_refused_without_blocking(tmp_path, vllm_src, sentinel):
    diff = tmp_path / "pipe.diff"
    os.mkfifo(diff)
    with pytest.raises(unified_diff.PatchError, match="not a regular file"):
        unified_diff.read_diff_file(diff)


# ------------------------------------------------------------ gh's JSON


HOSTILE = (
    "x\n  pr: {number: 1}\n- evil: &a [*a]\n<img src=x "
    "onerror=alert(1)> | [click](https://evil.example) @maintainers "
    "``` </details> {{ 7*7 }} \x1b[31m"
)


def test_every_string_field_of_gh_json_stays_data(tmp_path):
    from tests.conftest import GH_PR, GH_PR_DIFF

    hostile = dict(GH_PR)
    hostile["title"] = "[Perf] " + HOSTILE
    hostile["body"] = HOSTILE + "\n\nThis keeps the same output. " + HOSTILE
    hostile["url"] = "https://github.com/vllm-project/vllm/pull/55404"
    hostile["files"] = [{"path": "vllm/../../" + HOSTILE, "additions": 1, "deletions": 0}]
    hostile["reviews"] = [{"author": {"login": HOSTILE}, "body": HOSTILE, "state": HOSTILE}]
    hostile["comments"] = [{"author": {"login": HOSTILE}, "body": "This may crash: " + HOSTILE}]
    path = tmp_path / "pr.json"
    path.write_text(json.dumps(hostile), encoding="utf-8")
    out = tmp_path / "kb"
    result = CliRunner().invoke(
        main,
        ["import", str(path), "--diff", str(GH_PR_DIFF), "--out", str(out)],
        catch_exceptions=False,
    )
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:  # a refusal is fine when it says why
        assert "pr.json" in result.output and not out.exists()
        return
    (draft,) = out.glob("*.yaml")
    data = yaml.safe_load(draft.read_text(encoding="utf-8"))
    assert set(data) >= {"pr", "claims", "risks"}  # nothing in the strings became a key
    assert data["pr"]["number"] == 55404
    assert HOSTILE.split("\n")[0] in data["pr"]["title"]
    # Every comment line of the draft is one line: a newline in a string cannot end a comment and
    # start YAML.
    for line in draft.read_text(encoding="utf-8").splitlines():
        assert "\x1b" not in line or not line.lstrip().startswith("#")


def test_a_gh_diff_with_a_climbing_name_is_refused_on_import(tmp_path):
    from tests.conftest import GH_PR_JSON

    diff = tmp_path / "pr.diff"
    diff.write_text(
        hunk_diff("a/vllm/../../x.py", "b/vllm/../../x.py", "a\n", "b\n"), encoding="utf-8"
    )
    result = CliRunner().invoke(
        main,
        ["import", str(GH_PR_JSON), "--diff", str(diff), "--out", str(tmp_path / "kb")],
        catch_exceptions=False,
    )
    assert result.exit_code == 2 and "a '..' part" in result.output
    assert not list((tmp_path / "kb").glob("*.yaml")) if (tmp_path / "kb").exists() else True


# ------------------------------------------------------------ markdown and the PR comment

# What must never appear raw in markdown shown to people: HTML, a link, a mention, a broken table.
# Inside code spans and fences markdown shows text as it is, so only the rest is searched.
_RAW = re.compile(
    r"<(img|details|script|a)\b|\]\(https?:|(?<![\\])\bhttps?:|(?<!\u200b)@maintainers"
)


class RAW:
    @staticmethod
    def search(text: str):
        return _RAW.search(outside_code(text))


def outside_code(text: str) -> str:
    """``text`` without its fenced blocks and code spans (CommonMark: a span closes on a run of as
    many backticks)."""
    kept, fence = [], None
    for line in text.splitlines():
        run = re.match(r"^(`{3,})", line)
        if fence:
            if run and line.strip() == fence:
                fence = None
            continue
        if run:
            fence = run.group(1)
            continue
        kept.append(re.sub(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", " ", line))
    return "\n".join(kept)


def table_rows(text: str, header: str) -> list[list[str]]:
    lines = text.splitlines()
    start = lines.index(header)
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(re.split(r"(?<!\\)\|", line.strip())[1:-1])
    return rows


def hostile_review() -> dict:
    name = "vllm/" + HOSTILE.replace("\n", " ") + ".py"
    return {
        "format": review_files.REVIEW_FORMAT,
        "name": "pr-1",
        "diff_sha256": "0" * 64,
        "onto": "0.33.0",
        "source": "vLLM 0.33.0 " + HOSTILE,
        "lands_in": "0.34.0",
        "shard": None,
        "run": {},
        "mutants_left_out": 0,
        "files": [{"path": name, "status": "outside the KB (applied)"}],
        "impact": [
            {
                "number": 1,
                "record": "kb/1.yaml",
                "target": TARGET,
                "symbols": [HOSTILE],
                "reaches_target": [],
                "risks": [],
            }
        ],
        "carried": [{"number": 2, "title": HOSTILE, "release": "0.34.0", "record": False}],
        "records": [
            {
                "key": 1,
                "title": HOSTILE,
                "sides": {"patched": HOSTILE},
                "carries_pr": False,
                "claims": [
                    {
                        "id": "C1",
                        "changed": True,
                        "broke": True,
                        "expected": HOSTILE,
                        "check": "x",
                        "before": "holds",
                        "after": "fails",
                        "measured_before": HOSTILE,
                        "measured_after": None,
                    }
                ],
                "moved": [
                    {"case": HOSTILE, "fields": [HOSTILE], "changes": [HOSTILE], "explained_by": []}
                ],
                "unexplained": [],
                "fields_added_or_removed": [],
                "deviations_appeared": [],
                "deviations_vanished": [],
            }
        ],
        "mutants": [
            {
                "id": "m1",
                "status": "survived",
                "line": 3,
                "diff": "```\n" + HOSTILE + "\n```",
                "operator": "x",
            }
        ],
    }


def test_the_pr_comment_shows_hostile_names_and_titles_as_text():
    text = render.markdown(hostile_review())
    assert not RAW.search(text), RAW.search(text)
    assert "{{ 7*7 }}" not in text or "49" not in text
    assert all(len(row) == 2 for row in table_rows(text, "| file | |")), (
        "a file name broke the files table"
    )
    assert all(
        len(row) == 6
        for row in table_rows(
            text, "| claim | expected | before | after | measured before | measured after |"
        )
    )
    assert all(
        len(row) == 4
        for row in table_rows(text, "| case | fields | before → after | explained by |")
    )
    fence_open = next(
        line for line in text.splitlines() if line.startswith("```") and line.endswith("diff")
    )
    assert len(fence_open) - len("diff") > 3, "the diff's own ``` would close the fence"


def test_review_merge_checks_a_shard_before_using_it(tmp_path):
    good = hostile_review()
    cases = {
        "wrong-type": {**good, "records": "not a list"},
        "bad-name": {**good, "name": "../../etc/cron.d/x"},
        "bad-release": {**good, "onto": "0.33.0; rm -rf /"},
        "missing-field": {k: v for k, v in good.items() if k != "mutants"},
        "record-without-claims": {**good, "records": [{"number": 1}]},
    }
    for label, data in cases.items():
        shard = tmp_path / f"{label}.json"
        shard.write_text(json.dumps(data), encoding="utf-8")
        result = CliRunner().invoke(
            main,
            ["review-merge", str(shard), "--out", str(tmp_path / "out")],
            catch_exceptions=False,
        )
        assert result.exit_code == 2, (label, result.output)
        assert str(shard) in result.output, (label, result.output)
    assert not (tmp_path / "out").exists()
    shard = tmp_path / "good.json"
    shard.write_text(json.dumps(good), encoding="utf-8")
    result = CliRunner().invoke(
        main,
        ["review-merge", str(shard), "--out", str(tmp_path / "out"), "--fail-on", ""],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert not RAW.search((tmp_path / "out" / "pr-1.md").read_text(encoding="utf-8"))


def test_a_report_name_that_would_leave_its_folder_is_refused(tmp_path):
    result = CliRunner().invoke(
        main,
        [
            "review-merge",
            str(_shard(tmp_path)),
            "--name",
            "../../x",
            "--out",
            str(tmp_path / "out"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 2 and "report name" in result.output
    assert not (tmp_path / "x.md").exists() and not (tmp_path / "out").exists()


def _shard(tmp_path) -> Path:
    shard = tmp_path / "shard.json"
    shard.write_text(json.dumps(hostile_review()), encoding="utf-8")
    return shard


def test_record_titles_in_reports_are_text(tmp_path):
    from gdn_review.report.report import render_index

    text = render_index(
        [
            {
                "key": 1,
                "title": HOSTILE,
                "verdict_counts": {},
                "coverage_counts": {},
                "finished_at": "",
                "upstream_tests": [],
            }
        ]
    )
    assert not RAW.search(text)
    (row,) = table_rows(text, "| record | title | claims | risks | report |")[2:]
    assert len(row) == 5


def test_markdown_helpers_escape_each_construct():
    assert markdown.text("<img src=x>") == "&lt;img src=x>"
    assert markdown.text("[a](https://x)") == "\\[a\\](https\\://x)"
    assert markdown.text("@team") == "@\u200bteam"
    assert markdown.text("a|b") == "a\\|b"
    assert markdown.code("a`b|c") == "``a`b\\|c``"
    assert markdown.cell("`a|b` <b>x</b>\ny") == "`a\\|b` &lt;b>x&lt;/b><br>y"
    assert markdown.fence("```\nx")[0] == "````"


# ------------------------------------------------------------ the workflow


def test_the_job_that_reads_the_diff_has_no_write_token():
    workflow = yaml.safe_load(
        (ROOT / "examples" / "github-actions" / "gdn-review-vllm-pr.yml").read_text(
            encoding="utf-8"
        )
    )
    assert all(v == "read" for v in workflow["permissions"].values())
    review, report = workflow["jobs"]["review"], workflow["jobs"]["report"]
    assert review["permissions"] and all(
        v in ("read", "none") for v in review["permissions"].values()
    )
    assert "pull_request_target" not in json.dumps(workflow, default=str), (
        "pull_request_target runs a fork's diff with a write token"
    )
    merge = next(step["run"] for step in report["steps"] if "review-merge" in step.get("run", ""))
    assert "=~ ^[0-9]+" in merge, "the report job must check the shard names it uses"
    steps = [step.get("name", "") for step in report["steps"]]
    assert steps.index("Merge the shards into one report") < steps.index(
        "Comment on the pull request"
    )


def test_the_prs_own_claims_and_their_failing_cases_show_hostile_text_as_text():
    data = hostile_review()
    data["records"][0]["own"] = True
    data["records"][0]["claims"][0]["failing_after"] = [
        {
            "case": HOSTILE,
            "device": HOSTILE,
            "reason": HOSTILE,
            "smallest": "```\n" + HOSTILE + "\n```",
        },
    ]
    text = render.markdown(data)
    assert not RAW.search(text), RAW.search(text)
    assert text.splitlines()[2].startswith(
        "**The PR's own claims** (#1, with its diff onto 0.33.0): 0 hold, 0 pending, 1 fail"
    )
    fence_open = next(
        line for line in text.splitlines() if line.startswith("```") and line.endswith("python")
    )
    assert len(fence_open) - len("python") > 3, "the example's own ``` would close the fence"
    bad = {
        **data,
        "records": [
            {
                **data["records"][0],
                "claims": [{**data["records"][0]["claims"][0], "failing_after": [{"case": 1}]}],
            }
        ],
    }
    with pytest.raises(review_files.ReviewError):
        review_files.check_shape(bad, Path("shard.json"))


def test_thread_text_drafted_into_risks_and_related_notes_shows_as_text_in_the_report(tmp_path):
    """An error line from a review's code block (a risk) and a sentence naming another PR (a related
    note) come from strangers."""
    from gdn_review.kb import load_record
    from gdn_review.report.report import render_markdown
    from gdn_review.report.report_contents import report_data
    from gdn_review.run.evidence_file import Evidence
    from tests.test_import_gh import PR

    flat = HOSTILE.replace("\n", " ")
    hostile = {
        **PR,
        "mergedAt": None,
        "body": f"#52078 is where it {flat} started.",
        "reviews": [
            {
                "author": {"login": "r"},
                "body": f"It dies:\n\n```\nRuntimeError: `{flat}` | x\n```\n",
            }
        ],
    }
    path = tmp_path / "pr.json"
    path.write_text(json.dumps(hostile), encoding="utf-8")
    out = tmp_path / "kb"
    assert (
        CliRunner()
        .invoke(main, ["import", str(path), "--out", str(out)], catch_exceptions=False)
        .exit_code
        == 0
    )
    record = load_record(out / "55404.yaml")
    assert record.risks[0].text.startswith("`RuntimeError:")  # the failure leads, as drafted
    assert "#52078 is where it" in record.related[0].note
    text = render_markdown(report_data(record, Evidence([], [], [])))
    body = text.split("**Evidence:**", 1)[1]  # the header's own link to the PR is the template's
    assert not RAW.search(body), RAW.search(body)
    assert all(
        len(row) == 7
        for row in table_rows(
            text, "| risk | text | cases | covering tests | outcomes | coverage | missing |"
        )
    )
    assert all(
        len(row) == 6
        for row in table_rows(text, "| PR | title | relation | from release | affects | note |")
    )
