"""The release finder (`gdn-review find-release`): which releases have a line of a vLLM file."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.common import release, release_trees
from gdn_review.matrix.release_finder import (
    FinderError,
    Finding,
    Seen,
    find_release,
    finding_lines,
    matches,
    releases_between,
)

TEXT = "def f():\n    x = a >= 0\n\n    if x:\n        return 1\n    x = a >= 0  # again\n"


def test_a_line_matches_whole_and_stripped_a_fixed_string_anywhere():
    assert matches(TEXT, "x = a >= 0", False) == (2,)
    assert matches(TEXT, "   x = a >= 0   ", False) == (2,)
    assert matches(TEXT, "a >= 0", False) == ()  # part of a line: not a line
    assert matches(TEXT, "a >= 0", True) == (2, 6)
    # Several lines: consecutive non-blank lines, each stripped.
    assert matches(TEXT, "x = a >= 0\nif x:\n  return 1", False) == (2,)
    assert matches(TEXT, "x = a >= 0\nreturn 1", False) == ()


def test_the_default_range_is_every_minor_release_plus_the_cached_ones_in_it():
    assert releases_between("0.28.0", "0.31.0", ["0.17.0", "0.29.1", "0.33.0"]) == [
        "0.28.0",
        "0.29.0",
        "0.29.1",
        "0.30.0",
        "0.31.0",
    ]
    assert releases_between("0.29.1", "0.29.1", []) == ["0.29.1"]
    with pytest.raises(FinderError, match="later than"):
        releases_between("0.33.0", "0.28.0", [])
    with pytest.raises(FinderError, match="not a release number"):
        releases_between("zero", "0.28.0", [])


def test_the_summary_names_first_last_a_gap_and_the_target_lines():
    seen = [
        Seen("0.28.0"),
        Seen("0.29.0", (10,)),
        Seen("0.30.0"),
        Seen("0.31.0", (12, 40)),
        Seen("0.32.0"),
    ]
    lines = finding_lines(Finding("x = 1", "f.py", False, seen, {}))
    assert "first: 0.29.0, last: 0.31.0 (gone from 0.32.0)" in lines
    assert "it disappears and reappears: present in 0.29.0, 0.31.0" in lines
    assert lines[-3:] == ["target:", "  base_release: 0.28.0", "  head_release: 0.29.0"]
    assert "  0.31.0     present (lines 12, 40)" in lines
    # Present in the oldest release checked: no base to suggest.
    lines = finding_lines(
        Finding("x = 1", "f.py", False, [Seen("0.28.0", (3,))], {"0.29.0": "offline"})
    )
    assert lines[-1].startswith("it is already in 0.28.0, the oldest release checked")
    assert "  0.29.0     not checked: offline" in lines


def test_bad_input_is_said():
    with pytest.raises(FinderError, match="empty"):
        find_release("   ", offline=True)
    with pytest.raises(FinderError, match="inside vLLM"):
        find_release("x", file="../etc/passwd", offline=True)


def test_the_command_exits_1_when_no_release_has_it_and_2_on_bad_input():
    runner = CliRunner()
    installed = release.installed()
    missing = runner.invoke(
        main,
        [
            "find-release",
            "this line is in no release of vLLM",
            "--offline",
            "--from",
            installed,
            "--to",
            installed,
        ],
    )
    assert missing.exit_code == 1, missing.output
    assert "not found in any of the 1 releases checked" in missing.output
    upside_down = runner.invoke(
        main, ["find-release", "x", "--from", "0.33.0", "--to", "0.28.0", "--offline"]
    )
    assert upside_down.exit_code == 2 and "later than" in upside_down.output
    no_file = runner.invoke(
        main,
        ["find-release", "x", "--file", "vllm/no_such_file.py", "--offline", "--from", "0.33.0"],
    )
    assert no_file.exit_code == 2 and "no release checked has this file" in no_file.output


def test_the_range_ends_at_the_newest_published_release_not_the_installed_one(
    monkeypatch, tmp_path
):
    from gdn_review.common import published, release_cache
    from gdn_review.matrix import release_finder

    file = "vllm/v1/attention/backends/gdn_attn.py"
    installed_root = tmp_path / "installed"
    (installed_root / file).parent.mkdir(parents=True)
    (installed_root / file).write_text("OLD = 1\n", encoding="utf-8")
    monkeypatch.setattr(published, "_index_versions", lambda timeout: ["0.35.0rc1", "0.35.0"])
    monkeypatch.setattr(release, "loaded", lambda: (release.Release("0.33.0"), installed_root))
    monkeypatch.setattr(release_cache, "cached_versions", lambda root=None: [])
    fetched = []

    def entry(version, fetch=True, say=None, root=None):
        fetched.append((version, fetch))
        return release_cache.Entry(version, installed_root, "w.whl", "0")

    monkeypatch.setattr(release_finder.release_trees, "entry", entry)
    monkeypatch.setattr(
        release_finder.release_trees,
        "source",
        lambda version, path, fetch=True, say=None, root=None: f"NEW = {version}\nNEW = 1\n",
    )
    finding = find_release("NEW = 1", start="0.33.0", say=lambda _: None)
    assert [(s.release, s.where, s.lines) for s in finding.seen] == [
        ("0.33.0", "installed", ()),
        ("0.34.0", "release cache", (2,)),
        ("0.35.0", "release cache", (2,)),
    ]
    assert fetched == [("0.34.0", True), ("0.35.0", True)]  # into the release cache
    assert (finding.first, finding.last, finding.still_present) == ("0.34.0", "0.35.0", True)


def test_lines_from_stdin_are_found_in_the_installed_release():
    installed = release.installed()
    lines = (
        "if num_spec_decodes == 0:\n    num_spec_decodes = 0\n"  # two consecutive lines of 0.33.0
    )
    result = CliRunner().invoke(
        main, ["find-release", "-", "--offline", "--from", installed], input=lines
    )
    assert result.exit_code == 0, result.output
    assert f"first: {installed}, last: {installed} (still present)" in result.output
    assert f"it is already in {installed}, the oldest release checked" in result.output


@pytest.mark.slow  # may fetch 0.28.0 and 0.29.0 into the release cache (about 0.5 GB each, once)
def test_a_line_of_52078_first_ships_in_0_29_0_and_is_still_in_the_installed_release():
    for version in ("0.28.0", "0.29.0"):
        release_trees.entry(version)
    installed = release.installed()
    # kb/52078.yaml, R2 mutant drop_non_spec_invert; added by the PR
    line = "non_spec_sequence_masks_cpu = ~spec_sequence_masks_cpu"
    finding = find_release(line, offline=True, say=lambda _: None)
    assert finding.first == "0.29.0" and finding.base == "0.28.0"
    assert finding.last == installed and finding.still_present
    # A line the PR removed: in 0.28.0 only.
    gone = find_release("if num_spec_decodes == 0:", end="0.29.0", offline=True, say=lambda _: None)
    assert [s.release for s in gone.seen if s.present] == ["0.28.0"] and not gone.still_present

    result = CliRunner().invoke(main, ["find-release", line, "--offline"])
    assert result.exit_code == 0, result.output
    assert f"first: 0.29.0, last: {installed} (still present)" in result.output
    assert "  base_release: 0.28.0\n  head_release: 0.29.0" in result.output
