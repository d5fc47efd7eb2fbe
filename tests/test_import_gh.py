"""`gdn-review import` of gh's JSON of a PR (and `--diff`): a draft record, or exit 2 with the
reason."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common.unified_diff import read_diff
from gdn_review.importers.diff_target import diff_target
from gdn_review.kb import is_draft, load_record
from tests.conftest import GH_FIXTURES, GH_PR, GH_PR_DIFF, GH_PR_JSON, ROOT

# Real PR #55404 in gh's shape; tests/fixtures/gh/README.md says what the thread gave.
FIXTURES = GH_FIXTURES
PR_JSON, PR_DIFF, PR = GH_PR_JSON, GH_PR_DIFF, GH_PR


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def variant(tmp_path, name="pr.json", **changes) -> str:
    """The fixture with some fields changed (test inputs, not PR data), written to tmp_path/name."""
    path = tmp_path / name
    path.write_text(json.dumps({**PR, **changes}, indent=2), encoding="utf-8")
    return path


def imported(tmp_path, *args):
    out = tmp_path / "kb"
    out.mkdir(exist_ok=True)
    result = run("import", *args, "--out", out)
    assert result.exit_code == 0, result.output
    return out, load_record(out / "55404.yaml")


# ------------------------------------------------------------------ the draft


def test_json_and_diff_give_a_draft_that_validates_as_a_draft(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    result = run("import", PR_JSON, "--diff", PR_DIFF, "--out", kb)
    assert result.exit_code == 0, result.output
    path = kb / "55404.yaml"
    assert result.output.strip() == f"wrote {path} (draft: 5 open TODOs; run gdn-review validate)"
    result = run("validate", "--kb", kb)
    assert result.exit_code == 1, result.output  # a draft: open TODOs, not a bad record
    assert f"draft  {path}  PR #55404: 3 claims, 0 cases, 1 risks" in result.output
    assert "5 open TODO(s)" in result.output
    assert "error" not in result.output.lower()


def test_pr_fields_claims_risks_and_notes(tmp_path):
    _, record = imported(tmp_path, PR_JSON, "--diff", PR_DIFF)
    assert is_draft(record)
    pr = record.pr
    assert (pr.number, pr.repo, pr.title) == (55404, "vllm-project/vllm", PR["title"])
    assert pr.url == "https://github.com/vllm-project/vllm/pull/55404"
    assert pr.merged_at is None and pr.state == "merged"  # mergedAt left out: unknown, not "open"
    assert pr.source_report == str(PR_JSON)
    claims = [(c.text, c.source) for c in record.claims]
    assert claims[0] == ("Build cudagraph-capture metadata without a device sync", "PR title")
    assert {source for _, source in claims} == {"PR title", "PR body"}
    assert all(c.check.kind == "TODO" and c.check.hint for c in record.claims)
    assert any(
        text.startswith("`build_for_cudagraph_capture` derived the host-side draft counts")
        for text, _ in claims
    )
    assert "gpu_sync" in record.claims[0].check.hint
    assert [r.text for r in record.risks] == [
        "_🗄️ Data Integrity & Integration_ | _🟠 Major_ | _🏗️ Heavy lift_ "
        "(review by coderabbitai[bot])"
    ]
    assert record.related == []  # the thread references no other PR
    notes = record.report
    assert notes.motivation.startswith("`build_for_cudagraph_capture` derived")
    assert [k.path for k in notes.key_files] == [f["path"] for f in PR["files"]]
    assert notes.discussion.startswith("- review by coderabbitai[bot]: ")
    assert notes.code_snippets[-1].file == "vllm/v1/attention/backends/gdn_attn.py"
    assert (
        "+        assert num_decode_draft_tokens_cpu.shape == num_accepted_tokens.shape"
        in notes.code_snippets[-1].code
    )


def test_target_file_and_symbol_from_the_diff(tmp_path):
    out, record = imported(tmp_path, PR_JSON, "--diff", PR_DIFF)
    assert record.target.file == "vllm/v1/attention/backends/gdn_attn.py"
    # the hunk header's context; no class in the diff
    assert record.target.symbol == "build_for_cudagraph_capture"
    assert record.report.key_symbols == ["build_for_cudagraph_capture"]
    header = (out / "55404.yaml").read_text(encoding="utf-8").split("schema_version:")[0]
    assert "qualify a method: Class.build_for_cudagraph_capture" in header
    assert "a check needs a case with `entry: capture`" in header


def test_without_a_diff_the_file_comes_from_files_and_the_symbol_is_todo(tmp_path):
    _, record = imported(tmp_path, PR_JSON)
    assert record.target.file == "vllm/v1/attention/backends/gdn_attn.py"
    assert record.target.symbol == "TODO"


def test_the_class_qualifies_a_method_when_the_diff_shows_it():
    # A test input: the class line of vLLM 0.29.0's gdn_attn.py in a hunk before the method's.
    text = (
        PR_DIFF.read_text(encoding="utf-8")
        .replace(
            "@@ -542,6 +542,7 @@",
            "@@ -82,2 +82,2 @@\n"
            " class GDNAttentionMetadataBuilder(AttentionMetadataBuilder[GDNAttentionMetadata]):\n"
            "-    reorder_batch_threshold: int = 1\n"
            "+    reorder_batch_threshold: int = 2\n"
            "@@ -542,6 +542,7 @@",
        )
        .replace("@@ -82,2 +82,2 @@", "@@ -82,2 +82,2 @@ class GDNAttentionMetadata:")
    )
    target = diff_target(read_diff(text, "t.diff"))
    assert target.symbols == [
        "GDNAttentionMetadataBuilder",
        "GDNAttentionMetadataBuilder.build_for_cudagraph_capture",
    ]


def test_a_def_line_in_the_hunk_names_the_symbol():
    text = (
        "--- a/vllm/x.py\n+++ b/vllm/x.py\n@@ -1,3 +1,3 @@\n"
        " class Builder:\n     def build(self):\n-        return 1\n+        return 2\n"
    )
    assert diff_target(read_diff(text, "t.diff")).symbols == ["Builder.build"]


def test_json_detected_by_content_not_only_by_name(tmp_path):
    path = tmp_path / "pr-55404.txt"
    path.write_text(PR_JSON.read_text(encoding="utf-8"), encoding="utf-8")
    _, record = imported(tmp_path, path)
    assert record.key == 55404


def test_merged_at_from_iso_and_null_means_open(tmp_path):
    # mergedAt values here are test inputs: the thread gives no merge time.
    _, record = imported(tmp_path, variant(tmp_path, mergedAt="2026-09-04T18:02:11Z"))
    assert record.pr.merged_at == "2026-09-04 18:02:11" and record.pr.state == "merged"
    kb = tmp_path / "open"
    kb.mkdir()
    assert run("import", variant(tmp_path, mergedAt=None), "--out", kb).exit_code == 0
    assert load_record(kb / "55404.yaml").pr.state == "open"
    result = run("validate", "--kb", kb)
    assert result.exit_code == 1 and "head_release" not in result.output


def test_references_become_related_prs(tmp_path):
    # A test input comment (not in the thread) that references another PR and the PR itself.
    comment = {"author": {"login": "reviewer"}, "body": "Same area as #52078; see also #55404."}
    _, record = imported(tmp_path, variant(tmp_path, comments=[comment]))
    assert [(r.number, r.relation, r.note) for r in record.related] == [
        (
            52078,
            "same-area",
            "referenced in the comment by reviewer: Same area as #52078; see also #55404.",
        )
    ]


def test_a_review_that_requests_changes_is_a_risk(tmp_path):
    review = {
        "author": {"login": "reviewer"},
        "body": "Please add a test.",
        "state": "CHANGES_REQUESTED",
    }
    _, record = imported(tmp_path, variant(tmp_path, reviews=[review]))
    assert [r.text for r in record.risks] == [
        "Please add a test. (review by reviewer, CHANGES_REQUESTED)"
    ]


# ------------------------------------------------------------------ refusals


def test_bad_json_exits_2_naming_file_line_col_and_writes_nothing(tmp_path):
    text = PR_JSON.read_text(encoding="utf-8")
    bad = tmp_path / "pr.json"
    # a missing comma
    bad.write_text(text.replace('"number": 55404,', '"number": 55404'), encoding="utf-8")
    with pytest.raises(json.JSONDecodeError) as error:
        json.loads(bad.read_text(encoding="utf-8"))
    out = tmp_path / "kb"
    out.mkdir()
    result = run("import", bad, "--out", out)
    assert result.exit_code == 2
    assert (
        f"{bad}:{error.value.lineno}:{error.value.colno}: not valid JSON: Expecting ',' delimiter"
        in result.output
    )
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"number": "55404"}, "pr.json: number: expected an integer"),
        ({"title": None}, "pr.json: title: expected a string"),
        (
            {"reviews": [{"author": {"login": 7}, "body": "x"}]},
            "pr.json: reviews[0].author.login: expected a string",
        ),
        ({"files": {"path": "a.py"}}, "pr.json: files: expected a list"),
        (
            {"url": "https://github.com/vllm-project/vllm/pull/1"},
            "pr.json: url: names PR #1, but number is 55404",
        ),
        ({"url": None}, "pr.json: url: missing"),
        ({"mergedAt": "yesterday"}, "pr.json: mergedAt: 'yesterday' is not an ISO 8601 time"),
    ],
)
def test_wrong_shape_exits_2_naming_the_field(tmp_path, monkeypatch, changes, message):
    monkeypatch.chdir(tmp_path)
    variant(tmp_path, **changes)
    result = run("import", "pr.json", "--out", tmp_path)
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "55404.yaml").exists()


def test_a_json_list_is_refused(tmp_path):
    path = tmp_path / "pr.json"
    path.write_text("[]", encoding="utf-8")
    result = run("import", path, "--out", tmp_path)
    assert result.exit_code == 2 and "expected a JSON object" in result.output


def test_bad_diff_exits_2_naming_file_and_line_and_writes_nothing(tmp_path):
    bad = tmp_path / "pr.diff"
    # cut short
    bad.write_text(
        "\n".join(PR_DIFF.read_text(encoding="utf-8").splitlines()[:-3]) + "\n", encoding="utf-8"
    )
    out = tmp_path / "kb"
    out.mkdir()
    result = run("import", PR_JSON, "--diff", bad, "--out", out)
    assert result.exit_code == 2
    assert f"{bad}:9: vllm/v1/attention/backends/gdn_attn.py hunk 1" in result.output
    assert list(out.iterdir()) == []


def test_diff_goes_with_gh_json_only(tmp_path):
    report = ROOT / "tests" / "fixtures" / "pr-52078-review-report.md"
    result = run("import", report, "--diff", PR_DIFF, "--out", tmp_path)
    assert result.exit_code == 2 and "--diff goes with gh's JSON" in result.output
    assert list(tmp_path.iterdir()) == []


def test_existing_output_needs_force(tmp_path):
    out, _ = imported(tmp_path, PR_JSON)
    target = out / "55404.yaml"
    target.write_text("# kept\n", encoding="utf-8")
    result = run("import", PR_JSON, "--diff", PR_DIFF, "--out", out)
    assert result.exit_code == 2 and "exists; use --force" in result.output
    assert target.read_text(encoding="utf-8") == "# kept\n"
    assert run("import", PR_JSON, "--diff", PR_DIFF, "--out", out, "--force").exit_code == 0
    assert (
        yaml.safe_load(target.read_text(encoding="utf-8"))["target"]["symbol"]
        == "build_for_cudagraph_capture"
    )


def test_import_help_shows_gh_examples():
    result = run("import", "--help")
    assert result.exit_code == 0
    assert (
        "gh pr view 55404 --json number,title,body,mergedAt,url,files,reviews,comments"
        in result.output
    )
    assert "gdn-review import pr.json --diff pr.diff" in result.output and "--diff" in result.output


def test_out_may_name_a_folder_that_does_not_exist_yet(tmp_path):
    folder = tmp_path / "drafts" / "new"
    assert run("import", PR_JSON, "--out", folder).exit_code == 0
    assert is_draft(load_record(folder / "55404.yaml"))
    wrong = run("import", PR_JSON, "--out", tmp_path / "other.yaml")
    assert wrong.exit_code == 2 and "must be named 55404.yaml" in wrong.output


def test_a_pr_gh_calls_closed_and_unmerged_is_said_so_in_the_draft(tmp_path):
    path = variant(tmp_path, mergedAt=None, state="CLOSED")
    out, record = imported(tmp_path, path)
    assert record.pr.state == "open"
    assert "gh says CLOSED, not merged" in (out / "55404.yaml").read_text(encoding="utf-8")


# --- Drafting from the thread: the PR's own claims, failures first, related PRs, the TODO count ---


def _header_todos(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("#   - ")]


def test_53542s_draft_claims_its_own_change_not_what_its_description_says_of_other_prs(tmp_path):
    """pr-53542.json: the PR's public description (README.md says what the thread gave)."""
    out = tmp_path / "kb"
    result = run("import", FIXTURES / "pr-53542.json", "--out", out)
    assert result.exit_code == 0, result.output
    record = load_record(out / "53542.yaml")
    texts = [claim.text for claim in record.claims]
    assert any(
        text.startswith(
            "This change derives the active speculative width from the CPU query lengths"
        )
        for text in texts
    )
    # sentences about other PRs are not its claims
    assert not any("#53426" in text or "#52559" in text for text in texts)
    notes = {r.number: r.note for r in record.related}
    assert set(notes) == {52559, 53426} and "only skips the draft sync forward" in notes[53426]
    assert record.state == "open"
    # The count printed, the header's list and validate's items are the same.
    count = int(result.output.split("draft: ")[1].split(" open")[0])
    assert len(_header_todos((out / "53542.yaml").read_text(encoding="utf-8"))) == count
    done = run("validate", "--kb", out)
    assert done.output.count("incomplete: ") == count and f"{count} open TODO(s)" in done.output, (
        done.output
    )


def test_a_comment_that_carries_a_failure_is_the_first_risk(tmp_path):
    """pr-48475.json: brasrox's comment reports a reproducible IMA (a crash): it leads the risks."""
    out = tmp_path / "kb"
    assert run("import", FIXTURES / "pr-48475.json", "--out", out).exit_code == 0
    record = load_record(out / "48475.yaml")
    assert "reproducible IMA" in record.risks[0].text and record.risks[0].text.endswith(
        "(comment by brasrox)"
    )
    assert any(
        "For `num_accepted_tokens >= 1` the computation is unchanged" in claim.text
        for claim in record.claims
    )
    assert 41190 in {r.number for r in record.related}


def test_a_traceback_in_a_review_is_a_risk_before_plain_concerns(tmp_path):
    # Test input (not PR data): a plain concern first, then a review whose code block holds an
    # error.
    reviews = [
        {
            "author": {"login": "a"},
            "state": "COMMENTED",
            "body": "I am a bit worried this could regress the eager path.",
        },
        {
            "author": {"login": "b"},
            "state": "COMMENTED",
            "body": "With FULL graphs and K3 it dies at capture:\n\n```\nTraceback "
            '(most recent call last):\n  File "x.py", line 1\nRuntimeError: '
            "spec_state_indices_tensor must be contiguous\n```\n",
        },
    ]
    _, record = imported(tmp_path, variant(tmp_path, reviews=reviews))
    texts = [risk.text for risk in record.risks]
    assert (
        texts[0].startswith("With FULL graphs and K3 it dies at capture")
        or "RuntimeError: spec_state_indices_tensor must be contiguous" in texts[0]
    )
    assert any(
        text.startswith("`RuntimeError: spec_state_indices_tensor must be contiguous`")
        for text in texts[:2]
    )
    assert texts[-1].startswith("I am a bit worried")


# --- PR #52297: a timing becomes a latency claim; what moves and what stays are claims of their own
# ---

PR_52297 = FIXTURES / "pr-52297.json"
_STAYS_SENTENCE = "Only the block_table dependent state index gathers stay per-group in build()."
_ONCE_PER_STEP = (
    "Compute the batch level GDN spec decode metadata once per step "
    "in `compute_spec_metadata` and store it on "
    "model_specific_attn_metadata, instead of recomputing it inside each GDN group's build()."
)
_PROFILING = (
    "Main: GDNAttentionMetadataBuilder.build() takes ~900µs PR: "
    "GDNAttentionMetadataBuilder.build() takes ~300µs"
)


def _imported_52297(tmp_path):
    out = tmp_path / "kb"
    result = run("import", PR_52297, "--out", out)
    assert result.exit_code == 0, result.output
    return out, result, load_record(out / "52297.yaml")


def test_52297s_profiling_figures_are_a_latency_claim(tmp_path):
    """pr-52297.json: the ~900µs -> ~300µs of its Profiling section is drafted as a latency claim,
    not left as prose."""
    _, _, record = _imported_52297(tmp_path)
    claim = next(c for c in record.claims if "~300µs" in (c.source or ""))
    assert claim.text == _PROFILING
    assert claim.source == f"PR body: '{_PROFILING}'"
    assert claim.check.kind == "TODO"
    assert claim.check.hint.startswith(
        "latency: a latency claim, measured by `gdn-review bench` (build() timed A/B"
    )
    assert "an end-to-end throughput figure needs a serving benchmark" in claim.check.hint
    # a percentage of throughput: latency too
    e2e = next(c for c in record.claims if "improves 61%" in c.text)
    assert e2e.check.hint.startswith("latency: ") and "serving benchmark" in e2e.check.hint
    assert e2e.source == f"PR body: '{e2e.text}'"


def test_52297s_what_moves_and_what_stays_are_claims_of_their_own(tmp_path):
    _, _, record = _imported_52297(tmp_path)
    by_text = {c.text: c for c in record.claims}
    stays = by_text[_STAYS_SENTENCE]
    assert stays.source == f"PR body: '{_STAYS_SENTENCE}'"
    assert (
        stays.check.hint == "equivalence: what stays: each group's metadata equals today's "
        "build() (equivalence on named cases)"
    )
    once = by_text[_ONCE_PER_STEP]
    assert once.source == f"PR body: '{_ONCE_PER_STEP}'"
    assert once.check.hint.startswith(
        "op_budget: what moves: the computation it names is counted once "
        "per step (an op budget per step)"
    )
    moved = by_text["This compute can be moved one level up out of each group build()."]
    assert moved.check.hint == once.check.hint
    assert (
        by_text["Move GDN common metadata compute out of per-group build"].source
        == "PR title: 'Move GDN common metadata compute out of per-group build'"
    )


def test_52297s_sentences_are_drafted_once_each(tmp_path):
    _, _, record = _imported_52297(tmp_path)
    texts = [c.text for c in record.claims]
    assert len(texts) == len(set(texts))
    # the bullet holds two sentences: two claims, one each
    for sentence in (_STAYS_SENTENCE, _ONCE_PER_STEP, _PROFILING):
        assert sum(sentence in text for text in texts) == 1
    assert [c.id for c in record.claims] == [f"C{i}" for i in range(1, len(texts) + 1)]
    # title, two Purpose sentences, the bullet's two, the e2e bullet, Profiling
    assert len(texts) == 7
    assert not any(text.startswith(("pytest -s -v", "Unit test passed")) for text in texts)


def test_52297s_draft_validates_as_a_draft(tmp_path):
    out, result, record = _imported_52297(tmp_path)
    path = out / "52297.yaml"
    # target.file, target.symbol (no files, no diff), target.base_release (open), one check per
    # claim
    assert result.output.strip() == f"wrote {path} (draft: 10 open TODOs; run gdn-review validate)"
    assert (
        record.pr.state == "open"
        and record.pr.title == json.loads(PR_52297.read_text(encoding="utf-8"))["title"]
    )
    done = run("validate", "--kb", out)
    assert done.exit_code == 1, done.output  # open TODOs, not a bad record
    assert f"draft  {path}  PR #52297: 7 claims, 0 cases, 0 risks" in done.output
    assert "10 open TODO(s)" in done.output and "error" not in done.output.lower()
    count = int(result.output.split("draft: ")[1].split(" open")[0])
    assert len(_header_todos(path.read_text(encoding="utf-8"))) == count
