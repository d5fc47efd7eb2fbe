"""``gdn-review releases``: the KB's releases against the package index's (pip's answer is
monkeypatched here; ``tests/test_published.py`` asks the real index once, marked slow)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gdn_review.cli.main import main
from gdn_review.common import published
from gdn_review.common.release import ReleaseError
from tests.test_coverage import _kb


def _index(monkeypatch, versions):
    monkeypatch.setattr(published, "_index_versions", lambda timeout: versions)


def _run(*args: str):
    return CliRunner().invoke(main, ["releases", *args])


def test_a_new_published_release_is_said_with_the_command_that_covers_it(monkeypatch, write_record):
    kb = _kb(write_record)
    _index(monkeypatch, ["0.35.0rc1", "0.35.0", "0.34.0", "0.33.0"])
    result = _run("--kb", str(kb), "--since", "0.33.0")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "| release | published | covered | records without its snapshot |"
    assert "| 0.33.0 | yes | yes |  |" in lines
    assert "| 0.35.0 | yes | **no** | all 2 records |" in lines
    assert not any("rc1" in line for line in lines)  # pre-releases are not releases users run
    assert (
        "vLLM 0.35.0 is published and the KB does not cover it: run "
        "gdn-review release-step --to 0.35.0"
    ) in lines
    assert "also newer than the KB and not covered: 0.34.0" in lines
    checked = _run("--kb", str(kb), "--since", "0.33.0", "--check")
    assert checked.exit_code == 1 and "release-step --to 0.35.0" in checked.output


def test_check_passes_when_the_kb_covers_the_newest_published(monkeypatch, write_record):
    kb = _kb(write_record)
    _index(monkeypatch, ["0.33.0", "0.32.0"])
    result = _run("--kb", str(kb), "--check", "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert (data["newest_published"], data["newest_covered"]) == ("0.33.0", "0.33.0")
    assert data["uncovered_newer"] == [] and data["next"] is None
    assert data["source"] == "package index" and data["since"] == "0.28.0"
    by_release = {row["release"]: row for row in data["rows"]}
    assert by_release["0.32.0"] == {
        "release": "0.32.0",
        "published": True,
        "covered": False,
        "records": 2,
        "missing": ["#7", "promise"],
    }


def test_offline_compares_with_the_releases_at_hand_and_never_asks_the_index(
    monkeypatch, write_record
):
    kb = _kb(write_record)

    def asked(timeout):
        raise AssertionError("--offline asked the package index")

    monkeypatch.setattr(published, "_index_versions", asked)
    monkeypatch.setattr(published, "local_releases", lambda: ["0.33.0", "0.34.0"])
    result = _run("--kb", str(kb), "--offline", "--since", "0.33.0", "--check")
    assert result.exit_code == 1, result.output
    assert "| release | at hand | covered | records without its snapshot |" in result.output
    assert "offline: the releases at hand" in result.output
    assert "vLLM 0.34.0 is at hand and the KB does not cover it" in result.output


def test_an_unreadable_index_or_a_bad_release_is_bad_input(monkeypatch, write_record):
    kb = _kb(write_record)

    def unreadable(timeout):
        raise ReleaseError("the package index could not say which vLLM releases it serves")

    monkeypatch.setattr(published, "_index_versions", unreadable)
    result = _run("--kb", str(kb))
    assert result.exit_code == 2
    assert "could not say" in result.output and "--offline" in result.output
    _index(monkeypatch, ["0.33.0"])
    bad = _run("--kb", str(kb), "--since", "banana")
    assert bad.exit_code == 2 and "--since: 'banana' is not a release number" in bad.output


def test_help_has_examples():
    result = _run("--help")
    assert result.exit_code == 0 and "gdn-review releases --check" in result.output
