"""Which releases the KB covers (every record that applies has its snapshot) and how they stand
against the releases the package index serves (``kb/coverage.py``)."""

from __future__ import annotations

from pathlib import Path

from gdn_review.common import snapshots
from gdn_review.kb import coverage
from tests.conftest import MINIMAL

CONTRACT = """\
schema_version: 1
contract:
  id: promise
  title: A promise
  releases: ">=0.31"
target:
  file: vllm/v1/attention/backends/gdn_attn.py
  symbol: GDNAttentionMetadataBuilder.build
claims:
  - id: C1
    text: One ge per build.
    check:
      kind: op_budget
      budget: {aten.ge: 1}
      cases: [spec]
cases:
  - id: spec
    text: Two spec decodes.
    speculative_tokens: 2
    rows:
      - {seq_len: 10, query_len: 3, drafted: 2}
"""


def _snapshot(kb: Path, key, release: str) -> None:
    path = snapshots.snapshot_path(kb, key, release)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}\n", encoding="utf-8")


def _kb(write_record) -> Path:
    """PR 7 (base 0.28.0) and a contract of >=0.31: snapshots of 0.28.0 (7 only; the contract does
    not apply), 0.31.0 (7 only) and 0.33.0 (both)."""
    kb = write_record(MINIMAL)
    write_record(CONTRACT, "promise.yaml")
    for key, release in [(7, "0.28.0"), (7, "0.31.0"), (7, "0.33.0"), ("promise", "0.33.0")]:
        _snapshot(kb, key, release)
    return kb


def test_a_release_is_covered_when_every_record_that_applies_has_its_snapshot(write_record):
    kb = _kb(write_record)
    rows = {r.release: r for r in coverage.against_kb(kb, ["0.27.0", "0.31.0", "0.34.0"])}
    assert list(rows) == ["0.27.0", "0.28.0", "0.31.0", "0.33.0", "0.34.0"]
    # 0.27.0 is older than PR 7's base release and the contract's range: no record applies
    assert rows["0.27.0"].applicable == () and not rows["0.27.0"].covered
    assert rows["0.28.0"].covered and rows["0.28.0"].applicable == ("#7",)  # not the contract
    assert rows["0.31.0"].missing == ("promise",) and not rows["0.31.0"].covered
    assert rows["0.33.0"].covered and not rows["0.33.0"].published  # the KB's, not the index's
    assert rows["0.34.0"].missing == ("#7", "promise") and rows["0.34.0"].published
    assert coverage.covered(kb) == ["0.28.0", "0.33.0"]
    assert coverage.newest_covered(kb) == "0.33.0"
    assert coverage.uncovered_newer(list(rows.values()), "0.33.0") == ["0.34.0"]


def test_a_draft_applies_nowhere_and_a_stray_file_is_no_release(write_record):
    kb = _kb(write_record)
    draft = MINIMAL.replace("number: 7", "number: 8").replace("  head_release: 0.29.0\n", "")
    write_record(draft, "8.yaml")  # no head release: a draft
    (kb / "snapshots" / "7" / "notes.json").write_text("{}\n", encoding="utf-8")
    assert coverage.newest_covered(kb) == "0.33.0"
    assert coverage.snapshot_releases(kb) == {"0.28.0", "0.31.0", "0.33.0"}


def test_since_leaves_out_older_releases_and_the_data_names_the_next_step(write_record):
    kb = _kb(write_record)
    data = coverage.releases_data(kb, ["0.33.0", "0.33.1", "0.34.0"], since="0.33.0")
    assert [r["release"] for r in data["rows"]] == ["0.33.0", "0.33.1", "0.34.0"]
    assert (data["newest_published"], data["newest_covered"]) == ("0.34.0", "0.33.0")
    assert data["uncovered_newer"] == ["0.33.1", "0.34.0"]
    assert data["next"] == "gdn-review release-step --to 0.34.0"
    lines = coverage.releases_lines(data)
    assert "| 0.34.0 | yes | **no** | all 2 records |" in lines
    assert (
        "vLLM 0.34.0 is published and the KB does not cover it: run "
        "gdn-review release-step --to 0.34.0"
    ) in lines
    assert "also newer than the KB and not covered: 0.33.1" in lines


def test_nothing_to_do_when_the_kb_covers_the_newest_published(write_record):
    kb = _kb(write_record)
    data = coverage.releases_data(kb, ["0.32.0", "0.33.0"])
    assert data["uncovered_newer"] == [] and data["next"] is None
    lines = coverage.releases_lines(data)
    assert lines[-1] == "the KB covers 0.33.0 (newest covered); the newest published is 0.33.0"
    # an older published release the KB does not cover is listed, not something to step to
    assert "| 0.32.0 | yes | **no** | all 2 records |" in lines
