"""Releases and release ranges: each one type, parsed once (a release ordered, with its next
minor; a range asked with contains()); which release is loaded, and which installed; and a
record's latency sides, resolved once."""

from __future__ import annotations

import os
import re
import sys

import pytest

from gdn_review.common import interrupts, preloaded, release
from gdn_review.common.release import Release, ReleaseError
from gdn_review.common.release_range import ReleaseRange, contains
from gdn_review.kb import parse_record
from tests.conftest import MINIMAL


@pytest.mark.parametrize(
    "text, release, expected",
    [
        (None, "0.17.0", True),
        ("", "0.33.0", True),
        (">=0.29,<0.32", "0.29.0", True),
        (">=0.29,<0.32", "0.31.2", True),
        (">=0.29,<0.32", "0.32.0", False),
        (">=0.29,<0.32", "0.28.0", False),
        ("==0.33.0", "0.33.0", True),
        ("!=0.30.0", "0.30.0", False),
    ],
)
def test_a_range_contains_the_releases_it_states(text, release, expected):
    assert ReleaseRange.of(text).contains(release) is expected
    assert contains(text, release) is expected


def test_a_range_that_does_not_parse_says_so_and_names_an_example():
    with pytest.raises(ValueError, match=r"'>=0\.29,,<' is not a release range \(for example"):
        ReleaseRange.of(">=0.29,,<")
    with pytest.raises(ValueError, match="not a release number"):
        ReleaseRange.of(">=0.29").contains("banana")


@pytest.mark.parametrize(
    "text, message",
    [
        ("latest", "'latest' is not a release number (for example 0.29.0)"),
        ("0.29.0+cu130", "'0.29.0+cu130': give a plain release number, for example 0.29.0"),
        ("v0.29.0", "'v0.29.0': give a plain release number, for example 0.29.0"),
        ("0.29.0; rm -rf /", "is not a release number"),
    ],
)
def test_a_release_that_does_not_parse_names_the_text(text, message):
    with pytest.raises(ReleaseError, match=re.escape(message)):
        Release(text)
    with pytest.raises(ValueError):  # a record's field reports it as its own error
        Release(text)


def test_a_release_is_its_text_ordered_as_releases_with_its_next_minor():
    assert Release(" 0.29.3 ") == "0.29.3" and f"{Release('0.30.0rc1')}" == "0.30.0rc1"
    assert sorted(map(Release, ["0.10.0", "0.9.1", "0.9.0"])) == ["0.9.0", "0.9.1", "0.10.0"]
    assert Release("0.9.0") < "0.10.0" and "0.10.0" > Release("0.9.0")
    assert Release("0.30.0rc1") < "0.30.0" <= Release("0.30.0")
    assert Release("0.29.3").minor == "0.29.0" and Release("0.29.3").next_minor() == "0.30.0"
    assert Release("0.29.3").minors_until("0.32.1") == ["0.30.0", "0.31.0", "0.32.0"]
    assert Release("0.29.0").minors_until("0.29.5") == [] == Release("0.9.0").minors_until("1.2")


def test_the_loaded_release_is_the_one_first_on_the_path_and_the_installed_one_is_pips(
    tmp_path, monkeypatch
):
    """An unpacked tree first on PYTHONPATH is what an import loads; pip's install stays what
    is installed. A source tree without dist-info says its release in vllm/_version.py."""
    installed = release.installed()
    assert installed is not None and release.loaded() == (installed, release.loaded()[1])
    tree = tmp_path / "tree"
    (tree / "vllm").mkdir(parents=True)
    (tree / "vllm" / "__init__.py").write_text("", encoding="utf-8")
    (tree / "vllm" / "_version.py").write_text("__version__ = version = '0.17.1.dev3+g1'\n")
    assert release.of_tree(tree) == "0.17.1"
    (tree / "vllm-0.17.0.dist-info").mkdir()
    assert release.of_tree(tree) == "0.17.0" and release.of_tree(tmp_path) is None
    monkeypatch.setenv(preloaded.SWITCH, "0")  # one bare child: no preload server for it
    ask = "from gdn_review.common import release; print(release.loaded()[0], release.installed())"
    done = interrupts.run_child(
        [sys.executable, "-c", ask],
        env=dict(os.environ, PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["0.17.0", installed]


def test_the_first_release_a_range_names():
    assert str(ReleaseRange.of(">=0.31,<0.34").first()) == "0.31"
    assert ReleaseRange.of("<0.34").first() is None and ReleaseRange.of(None).first() is None


def test_a_records_latency_sides_come_from_its_check_else_its_target():
    latency = (
        "  - id: C2\n    text: Faster.\n    check:\n      kind: latency\n      cases: [spec]\n"
    )
    record = parse_record(
        MINIMAL.replace(
            "cases:\n  - id: spec", latency.replace("C2", "C2") + "cases:\n  - id: spec", 1
        ),
        "7.yaml",
    )
    assert record.latency_check is not None and record.latency_releases() == ("0.28.0", "0.29.0")
    own = parse_record(
        MINIMAL.replace(
            "cases:\n  - id: spec",
            latency.replace(
                "cases: [spec]", "cases: [spec]\n      base: 0.27.0\n      head: 0.33.0"
            )
            + "cases:\n  - id: spec",
            1,
        ),
        "7.yaml",
    )
    assert own.latency_releases() == ("0.27.0", "0.33.0")
    plain = parse_record(MINIMAL, "7.yaml")
    assert plain.latency_check is None and plain.latency_releases() == ("0.28.0", "0.29.0")
