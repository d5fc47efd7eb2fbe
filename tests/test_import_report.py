"""`gdn-review import`: review reports (markdown) -> draft records."""

from __future__ import annotations

import stat

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gdn_review.cli import main
from gdn_review.importers import ReportImportError, import_report, write_draft
from gdn_review.kb import is_draft, open_items, parse_record
from tests.conftest import ROOT

# A byte-identical copy of the design's seed report (shared/seeds/pr-52078-review-report.md).
SEED_PATH = ROOT / "tests" / "fixtures" / "pr-52078-review-report.md"
SEED = SEED_PATH.read_text(encoding="utf-8")

TITLE = "[Attention] Avoid redundant mask compute in GDN metadata build"


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def draft_of(text: str, source: str = "report.md"):
    out = import_report(text, source)
    data = yaml.safe_load(out)
    return out, parse_record(out, f"{data['pr']['number']}.yaml")


ENGLISH = """\
# Review of a PR

- Repository: `vllm-project/vllm`
- Title: [Core] Compute the mask once
- Merged: 2026-01-02T03:04:05Z
- Link: [PR](https://github.com/vllm-project/vllm/pull/12345)

## Related
- PR #111 [Misc] older cleanup: same code, cosmetic
- #222 Another one

## Risks and impact
- Risk: the fallback could change.
- Impact: The mask is computed once instead of twice. No behavior change.
- Risk flags: core path, missing tests

## Some unknown section
- Title: not this one
Text that is ignored.

## Key files
- `vllm/v1/attention/backends/gdn_attn.py`: the builder

## Key symbols
- GDNAttentionMetadataBuilder.build

## Code
```python
# vllm/v1/attention/backends/gdn_attn.py
mask = drafts >= 0
```
"""


# ------------------------------------------------------------------- the seed


def test_seed_gives_a_draft_with_the_report_facts():
    text, record = draft_of(SEED, "seeds/pr-52078-review-report.md")
    assert record.key == 52078
    assert record.pr.repo == "vllm-project/vllm"
    assert record.pr.title == TITLE
    assert record.pr.merged_at == "2026-08-20 11:52"
    assert record.pr.url == "http://prhub.com.cn/vllm-project/vllm/pull/52078"
    assert record.pr.source_report == "seeds/pr-52078-review-report.md"
    assert record.target.file == "vllm/v1/attention/backends/gdn_attn.py"
    assert record.target.symbol == "build"
    assert record.target.base_release is None and record.target.head_release is None
    assert is_draft(record)
    assert record.cases == []
    assert text.startswith("# DRAFT record of PR #52078")
    assert "seeds/pr-52078-review-report.md" in text.splitlines()[1]


def test_seed_claims_are_todo_checks_from_motivation_and_impact():
    _, record = draft_of(SEED)
    assert [c.id for c in record.claims] == [f"C{i}" for i in range(1, len(record.claims) + 1)]
    assert all(c.check.kind == "TODO" and c.check.hint for c in record.claims)
    texts = [c.text for c in record.claims]
    assert any("被计算两次" in t and "被计算四次" in t for t in texts)
    assert any("无行为变化" in t and "吞吐量" in t for t in texts)
    sources = {c.source for c in record.claims}
    impact = "在并发场景下吞吐量约有 1% 的提升，且无行为变化，对用户是正向优化。"
    # The ~1% throughput sentence is a latency claim: its source quotes it (the claim a reviewer
    # writes is narrower).
    assert sources == {"功能与动机", "风险与影响 (影响)", f"风险与影响 (影响): '{impact}'"}
    equivalence = next(c for c in record.claims if "无行为变化" in c.text)
    assert equivalence.text == impact
    assert equivalence.check.hint.startswith(
        "latency: a latency claim, measured by `gdn-review bench`"
    )
    assert "equivalence" in equivalence.check.hint and "serving benchmark" in equivalence.check.hint
    # the general speed hint gives way to the latency one
    assert "latency or gpu_sync" not in equivalence.check.hint


def test_seed_risks_related_and_report_notes():
    _, record = draft_of(SEED)
    assert [r.id for r in record.risks] == ["R1", "R2"]
    assert record.risks[0].text.startswith("核心风险在于重构后的条件判断逻辑")
    assert record.risks[1].text.startswith("影响范围局限于 vLLM v1 的 GDN attention 后端")
    assert all(r.cases == [] and r.claims == [] for r in record.risks)
    assert [(r.number, r.title, r.relation) for r in record.related] == [
        (52839, "[refactor] consolidate cp attn ops", "same-area")
    ]
    assert record.related[0].note.startswith("同为 attention 相关改动")
    notes = record.report
    assert notes.summary == "优化 GDN 元数据构建重复 mask 计算"
    assert notes.recommendation.startswith("该 PR 是一个小范围性能优化")
    assert notes.motivation.startswith("在 GDNAttentionMetadataBuilder.build() 中")
    assert len(notes.implementation) == 2 and notes.implementation[0].startswith(
        "**重构 condition 分支**"
    )
    assert [k.path for k in notes.key_files] == ["vllm/v1/attention/backends/gdn_attn.py"]
    assert "核心修改文件" in notes.key_files[0].note and "core-logic" in notes.key_files[0].note
    assert notes.key_symbols == ["build"]
    assert len(notes.code_snippets) == 1
    snippet = notes.code_snippets[0]
    assert snippet.file == "vllm/v1/attention/backends/gdn_attn.py"
    assert snippet.code.startswith("# vllm/v1/attention/backends/gdn_attn.py\n\ndef build(")
    assert "spec_sequence_masks_cpu = num_decode_draft_tokens_cpu >= 0" in snippet.code
    assert notes.discussion.startswith("无实质讨论")
    assert notes.impact == record.risks[1].text
    assert notes.risk_flags == ["核心路径变更", "缺少测试覆盖"]


def test_import_is_deterministic_and_readable():
    first = import_report(SEED, "seed.md")
    assert first == import_report(SEED, "seed.md")
    assert "code: |-\n" in first  # code snippets as literal blocks, not escaped strings
    assert "\\n" not in first


# ------------------------------------------------------------------------ CLI


def test_cli_import_then_validate_lists_exactly_the_todos(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    result = run("import", str(SEED_PATH), "--out", str(kb))
    assert result.exit_code == 0, result.output
    path = kb / "52078.yaml"
    assert result.output.strip() == f"wrote {path} (draft: 7 open TODOs; run gdn-review validate)"
    assert stat.S_IMODE(path.stat().st_mode) & 0o444 == 0o444  # readable, not mkstemp's 0600

    result = run("validate", "--kb", str(kb))
    assert result.exit_code == 1
    incomplete = [line for line in result.output.splitlines() if line.startswith("  incomplete: ")]
    fields = [line.split(": ")[2] for line in incomplete]
    record = parse_record(path.read_text(encoding="utf-8"), "52078.yaml")
    expected = ["target.base_release", "target.head_release"] + [
        f"claims[{i}].check" for i in range(len(record.claims))
    ]
    assert fields == expected
    assert all(str(path) in line for line in incomplete)
    assert len(open_items(record)) == len(expected)
    assert f"{len(expected)} open TODO(s)" in result.output


def test_generate_skips_the_draft_and_writes_nothing(tmp_path):
    kb = tmp_path / "kb"
    write_draft(SEED_PATH, kb / "52078.yaml", force=False)
    out = tmp_path / "generated"
    result = run("generate", "--kb", str(kb), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert f"warning: skipped draft {kb / '52078.yaml'}" in result.output
    assert "0 written, 0 removed, 0 unchanged" in result.output
    assert not out.exists() or not any(out.iterdir())


def test_existing_file_needs_force(tmp_path):
    kb = tmp_path / "kb"
    kb.mkdir()
    target = kb / "52078.yaml"
    target.write_text("keep me\n", encoding="utf-8")
    result = run("import", str(SEED_PATH), "--out", str(kb))
    assert result.exit_code == 2
    assert "exists; use --force" in result.output
    assert target.read_text(encoding="utf-8") == "keep me\n"
    result = run("import", str(SEED_PATH), "--out", str(target), "--force")
    assert result.exit_code == 0, result.output
    assert target.read_text(encoding="utf-8").startswith("# DRAFT record of PR #52078")
    assert sorted(p.name for p in kb.iterdir()) == ["52078.yaml"]  # no temp file left behind


def test_default_out_is_kb_folder_of_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_draft(SEED_PATH)
    assert path == tmp_path.joinpath("kb", "52078.yaml").relative_to(tmp_path)
    assert (tmp_path / "kb" / "52078.yaml").is_file()


def test_out_file_must_be_named_after_the_pr(tmp_path):
    result = run("import", str(SEED_PATH), "--out", str(tmp_path / "draft.yaml"))
    assert result.exit_code == 2 and "must be named 52078.yaml" in result.output
    assert not (tmp_path / "draft.yaml").exists()


def test_cli_bad_report_exits_2_with_the_reason(tmp_path):
    report = tmp_path / "notes.md"
    report.write_text("# Just some notes\n\nNothing about a PR.\n", encoding="utf-8")
    result = run("import", str(report), "--out", str(tmp_path))
    assert result.exit_code == 2
    assert "no PR number found" in result.output
    assert run("import", str(tmp_path / "missing.md")).exit_code == 2


def test_undecodable_report_names_the_file(tmp_path):
    report = tmp_path / "latin1.md"
    report.write_bytes("# PR #5 caf\xe9\n".encode("latin-1"))
    with pytest.raises(ReportImportError, match=r"latin1\.md: not UTF-8 text \(byte 0xe9"):
        write_draft(report, tmp_path, force=False)


def test_import_help_shows_examples():
    result = run("import", "--help")
    assert result.exit_code == 0
    assert "Examples:\n    gdn-review import report.md" in result.output
    assert "--force" in result.output and "--out" in result.output


# -------------------------------------------------------------- other shapes


def test_crlf_and_bom_give_the_same_draft(tmp_path):
    report = tmp_path / "report.md"
    report.write_bytes(b"\xef\xbb\xbf" + SEED.replace("\n", "\r\n").encode("utf-8"))
    path = write_draft(report, tmp_path, force=False)
    assert path.read_text(encoding="utf-8") == import_report(SEED, str(report))


def test_english_headings_reordered_and_missing_sections():
    text, record = draft_of(ENGLISH)
    assert record.key == 12345  # from the link: the title line names no PR
    assert record.pr.repo == "vllm-project/vllm"
    assert record.pr.title == "[Core] Compute the mask once"
    assert record.pr.merged_at == "2026-01-02 03:04:05"
    assert record.pr.url == "https://github.com/vllm-project/vllm/pull/12345"
    assert (record.target.file, record.target.symbol) == (
        "vllm/v1/attention/backends/gdn_attn.py",
        "GDNAttentionMetadataBuilder.build",
    )
    assert [c.text for c in record.claims] == [
        "The mask is computed once instead of twice.",
        "No behavior change.",
    ]
    assert [r.text for r in record.risks] == [
        "the fallback could change.",
        "The mask is computed once instead of twice. No behavior change.",
    ]
    assert [(r.number, r.title, r.note) for r in record.related] == [
        (111, "[Misc] older cleanup", "same code, cosmetic"),
        (222, "Another one", None),
    ]
    assert record.report.risk_flags == ["core path", "missing tests"]
    assert record.report.code_snippets[0].file == "vllm/v1/attention/backends/gdn_attn.py"
    assert record.report.summary is None and record.report.motivation is None
    assert "not this one" not in text and "ignored" not in text


def test_repo_from_the_link_and_odd_dates():
    report = (
        "# PR #9 x\n- 标题：T\n- 合并时间：2026年8月20日 11:52\n- "
        "原文链接：https://github.com/acme/widgets/pull/9\n"
    )
    _, record = draft_of(report)
    assert (record.pr.repo, record.pr.merged_at) == ("acme/widgets", "2026-08-20 11:52")
    assert record.target.file == "TODO" and record.claims[0].text.startswith("TODO:")


def test_merge_time_and_link_may_be_missing():
    text, record = draft_of("# PR #9 x\n- 仓库：a/b\n- 标题：T\n")
    assert "merged_at" not in text and "url" not in text
    assert (record.pr.merged_at, record.pr.url) == (None, "https://github.com/a/b/pull/9")


@pytest.mark.parametrize(
    ("report", "message"),
    [
        ("", "no PR number found"),
        ("# PR #9 x\n- 标题：T\n- 合并时间：2026-08-20\n", "r.md: PR #9: no repository"),
        (
            "# PR #9 x\n- 标题：T\n- 合并时间：2026-08-20\n- 原文链接：ftp://x/y\n",
            "not an http(s) address",
        ),
        (
            "# PR #9 x\n- 标题：T\n- 合并时间：2026-08-20\n- 原文链接：https://example.com/9\n",
            "no repository",
        ),
        (
            "# PR #9 x\n- 仓库：a b\n- 标题：T\n- 合并时间：2026-08-20\n- 原文链接：https://example.com/9\n",
            "r.md:2: repository 'a b'",
        ),
        (
            "# PR #9 x\n- 仓库：a/b\n- 合并时间：2026-08-20\n- 原文链接：https://example.com/9\n",
            "no title",
        ),
        (
            "# PR #9 x\n- 仓库：a/b\n- 标题：T\n- 合并时间：yesterday\n- 原文链接：https://example.com/9\n",
            "r.md:4: merge time 'yesterday' is not a date",
        ),
        (
            "# PR #9 x\n- 仓库：a/b\n- 标题：T\n- 合并时间：2026-13-40\n- 原文链接：https://example.com/9\n",
            "is not a date",
        ),
    ],
)
def test_reports_that_cannot_give_a_draft(report, message):
    with pytest.raises(ReportImportError, match=message.replace("(", r"\(").replace(")", r"\)")):
        import_report(report, "r.md")


def test_a_100k_character_line():
    long = "计算两次。" * 20_000  # 100k characters, 20k sentences
    report = SEED.replace(
        "PR 目的在于消除这些冗余计算，提升性能。", "PR 目的在于消除冗余计算" + "x" * 100_000 + "。"
    )
    report = report.replace("- 暂无高价值评论线程", "- " + long)
    _, record = draft_of(report)
    assert any(len(c.text) > 100_000 for c in record.claims)
    assert long in record.report.discussion


def test_code_in_the_report_is_only_a_string():
    evil = SEED.replace(
        "```python\n",
        "```python\n__import__('os').system('echo "
        "pwned')\n!!python/object/apply:os.system ['echo pwned']\n",
    )
    _, record = draft_of(evil)  # parse_record loads with the safe loader only
    code = record.report.code_snippets[0].code
    assert (
        "__import__('os').system('echo pwned')\n!!python/object/apply:os.system ['echo pwned']"
        in code
    )


# ------------------------------------------------------------------ Hypothesis


def _import_or_refuse(text: str) -> None:
    try:
        out = import_report(text, "fuzz.md")
    except ReportImportError as error:
        assert str(error)
        return
    number = yaml.safe_load(out)["pr"]["number"]
    assert is_draft(parse_record(out, f"{number}.yaml"))


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_arbitrary_text_gives_a_draft_or_a_clear_refusal(text):
    _import_or_refuse(text)


@settings(max_examples=200, deadline=None)
@given(
    st.text(
        alphabet=st.sampled_from(
            list(
                "#-*`:：。.!?()（）[]/ \n\t\r1234567890PRabc"
                "风险影响标题仓库合并时间原文链接\ufeff\x85\u2028"
            )
        )
    )
)
def test_markdown_shaped_noise(text):
    _import_or_refuse(text)


_SEED_LINES = SEED.splitlines()


@st.composite
def mutated_seed(draw):
    lines = list(_SEED_LINES)
    for _ in range(draw(st.integers(0, 6))):
        action = draw(st.sampled_from(["delete", "duplicate", "insert", "swap", "shuffle"]))
        if not lines:
            lines.append(draw(st.text(max_size=40)))
            continue
        index = draw(st.integers(0, len(lines) - 1))
        if action == "delete":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, lines[index])
        elif action == "insert":
            lines.insert(index, draw(st.text(max_size=80)))
        elif action == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
        else:
            lines = draw(st.permutations(lines))
    return draw(st.sampled_from(["\n", "\r\n"])).join(lines)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_seed())
def test_mutated_seed_gives_a_draft_or_a_clear_refusal(text):
    _import_or_refuse(text)
