"""Release ranges: one type, parsed once, asked with contains(); and a record's latency sides,
resolved once."""

from __future__ import annotations

import pytest

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
