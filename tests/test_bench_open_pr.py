"""`gdn-review bench` on an open PR: its base release against the same release with its diff
(kb/N.diff).

Without a stored diff, a named record is bad input said in one line, and the
reports never advise a bench that cannot run.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import sys

import pytest

from gdn_review.common import interrupts
from gdn_review.kb import load_record
from gdn_review.report import report
from gdn_review.run import bench, evidence_file
from tests.conftest import ROOT

TARGET = "vllm/v1/attention/backends/gdn_attn.py"

OPEN_RECORD = """\
schema_version: 1
pr:
  number: 7
  repo: vllm-project/vllm
  title: A small open PR
  state: open
target:
  file: vllm/v1/attention/backends/gdn_attn.py
  symbol: GDNAttentionMetadataBuilder.build
  base_release: {base}
claims:
  - id: C1
    text: build() takes less time.
    before: fails
    check:
      kind: latency
      cases: [spec]
cases:
  - id: spec
    text: Two spec decodes.
    speculative_tokens: 2
    rows:
      - {{seq_len: 10, query_len: 3, drafted: 2}}
      - {{seq_len: 12, query_len: 3, drafted: 2}}
risks: []
"""


def _tiny_diff(text: str) -> str:
    """A comment added below the first line of ``text`` (the target file), as `gh pr diff` writes a
    diff."""
    lines = text.splitlines(keepends=True)
    changed = lines[:1] + ["# a comment the bench's test adds\n"] + lines[1:]
    return f"diff --git a/{TARGET} b/{TARGET}\n" + "".join(
        difflib.unified_diff(lines, changed, f"a/{TARGET}", f"b/{TARGET}")
    )


@pytest.fixture
def open_kb(write_record):
    return write_record(OPEN_RECORD.format(base="0.33.0"))


def _bench(kb, *args):
    return interrupts.run_child(
        [sys.executable, "-m", "gdn_review.cli", "bench", "--kb", str(kb), "--record", "7", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_bench_of_an_open_pr_without_its_diff_says_in_one_line_where_the_diff_goes(
    open_kb, tmp_path
):
    evidence = tmp_path / "bench.json"
    done = _bench(open_kb, "--evidence", str(evidence))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    diff = open_kb / "7.diff"
    assert f"gh pr diff 7 > {diff}" in lines[0] and "open" in lines[0]
    assert "has no base and head release" not in lines[0]
    assert not evidence.exists()


def test_an_open_pr_is_timed_against_its_base_release_plus_its_diff(open_kb):
    path = open_kb / "7.yaml"
    record = load_record(path)
    with pytest.raises(bench.DiffNeeded):
        bench.sides(path, record, None)
    (open_kb / "7.diff").write_text(_tiny_diff("line 1\nline 2\n"), encoding="utf-8")
    assert bench.sides(path, record, None) == ("0.33.0", "0.33.0+diff", open_kb / "7.diff")
    # --releases still names the two releases, diff or not.
    assert bench.sides(path, record, "0.29.0, 0.33.0") == ("0.29.0", "0.33.0", None)


def test_every_record_run_skips_an_open_pr_without_its_diff_and_says_so(open_kb, tmp_path):
    from gdn_review.run.selection import load_records

    said = []
    with pytest.raises(bench.BenchError, match="no record to time"):
        bench.bench_records(
            load_records(open_kb),
            False,
            None,
            (),
            tmp_path / "bench.json",
            bench.BenchOptions(max_seconds=1),
            say=said.append,
        )
    assert len(said) == 1 and said[0].startswith("skipped: ") and "gh pr diff 7" in said[0]


def test_the_report_of_an_open_pr_without_its_diff_never_advises_a_bench_that_cannot_run(open_kb):
    path = open_kb / "7.yaml"
    record = load_record(path)
    data = report.report_data(record, evidence_file.Evidence([], [], []), path=path)
    claim = data["claims"][0]
    assert claim["verdict"] == "unverified"
    advice = [claim["reason"], *data["next_steps"]]
    assert not any("run `gdn-review bench" in line for line in advice), advice
    assert (
        f"gh pr diff 7 > {open_kb / '7.diff'}" in claim["reason"]
        and "or the change is released" in claim["reason"]
    )
    # With the diff stored, the bench can run: the report says so.
    (open_kb / "7.diff").write_text(_tiny_diff("line 1\nline 2\n"), encoding="utf-8")
    data = report.report_data(record, evidence_file.Evidence([], [], []), path=path)
    assert "run `gdn-review bench --record 7`" in data["claims"][0]["reason"]
    assert any("run `gdn-review bench --record 7`" in step for step in data["next_steps"])


@pytest.mark.slow
def test_bench_times_an_open_pr_with_its_stored_diff(open_kb, tmp_path):
    from gdn_review.common.release import loaded as loaded_release

    release, root = loaded_release()
    (open_kb / "7.yaml").write_text(OPEN_RECORD.format(base=release), encoding="utf-8")
    (open_kb / "7.diff").write_text(
        _tiny_diff((root / TARGET).read_text(encoding="utf-8")), encoding="utf-8"
    )
    evidence = tmp_path / "bench.json"
    done = _bench(open_kb, "--max-seconds", "1", "--evidence", str(evidence))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert f"vLLM {release} (base) vs {release}+diff (head)" in done.stderr
    result = json.loads(evidence.read_text(encoding="utf-8"))["bench"]["7"]
    assert (result["base"], result["head"], result["diff"]) == (
        release,
        f"{release}+diff",
        str(open_kb / "7.diff"),
    )
    assert result["cases"][0]["case"] == "spec" and result["cases"][0]["base_median_us"] > 0
    # Both sides load the same copy of the release's files, the head side with the diff applied.
    assert {env["vllm_version"] for env in result["environments"].values()} == {release}
    # The record as it was when it was timed (a report names the bench stale once it is edited).
    assert result["record_sha256"] == hashlib.sha256((open_kb / "7.yaml").read_bytes()).hexdigest()


def test_a_hostile_diff_beside_an_open_record_is_refused_before_anything_runs(open_kb, tmp_path):
    escape = tmp_path / "escaped.py"
    name = f"vllm/../../../../../../..{escape}"
    (open_kb / "7.diff").write_text(
        f"diff --git a/{name} b/{name}\n--- /dev/null\n+++ b/{name}\n@@ "
        "-0,0 +1 @@\n+print('owned')\n",
        encoding="utf-8",
    )
    evidence = tmp_path / "bench.json"
    done = _bench(open_kb, "--evidence", str(evidence))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "refused" in done.stderr, done.stderr
    assert not escape.exists() and not evidence.exists()
