"""Which releases the package index serves: finals only, newest found, offline at hand."""

from __future__ import annotations

import pytest

from gdn_review.common import published
from gdn_review.common.release import ReleaseError


def test_is_final_only_for_plain_releases():
    assert published.is_final("0.34.0") and published.is_final("0.27.1")
    assert not any(
        published.is_final(v) for v in ("0.35.0rc1", "0.34.0.post1", "0.35.0.dev3", "nightly")
    )


def test_newest_published_skips_pre_releases(monkeypatch):
    monkeypatch.setattr(
        published, "_index_versions", lambda timeout: ["0.35.0rc1", "0.34.0", "0.9.2", "0.33.0"]
    )
    assert published.published_releases() == ["0.9.2", "0.33.0", "0.34.0"]
    assert published.newest_published() == "0.34.0"


def test_an_unreadable_index_falls_back_to_what_is_at_hand_and_says_so(monkeypatch):
    def unreadable(timeout):
        raise ReleaseError("the package index could not say which vLLM releases it serves")

    monkeypatch.setattr(published, "_index_versions", unreadable)
    monkeypatch.setattr(published, "newest_local", lambda: "0.33.0")
    said = []
    assert published.default_newest(said.append) == "0.33.0"
    assert said and "stands in" in said[0] and "could not say" in said[0]


def test_offline_never_asks_the_index(monkeypatch):
    def asked(timeout):
        raise AssertionError("offline asked the index")

    monkeypatch.setattr(published, "_index_versions", asked)
    monkeypatch.setattr(published, "newest_local", lambda: "0.34.0")
    assert published.default_newest(offline=True) == "0.34.0"


@pytest.mark.slow
def test_the_real_index_serves_the_pinned_release():
    """The index this machine uses (pip's), asked for real: the pin is among its releases."""
    from gdn_review.common import release

    releases = published.published_releases()
    assert release.installed() in releases
    assert published.newest_published() == releases[-1]
