"""A skip's kind is data: the harness marks its skip, the evidence plugin writes the mark, and
a skip without one (pytest's own, or one whose words look like the harness's) is a plain skip."""

from __future__ import annotations

import json

import pytest

from gdn_review.common.vocabulary import SkipKind
from gdn_review.run import suite

MODULE = """\
import pytest

from gdn_review.harness.origin import skip

pytestmark = [pytest.mark.record(7)]
V1 = "not applicable: vLLM 0.34.0 has no model runner V1 (removed in 0.34.0)"


@pytest.fixture
def cuda():
    skip("needs CUDA", "needs CUDA: none here")


@pytest.mark.claim("C1")
@pytest.mark.parametrize("kind", ["absent", "refused", "not applicable"])
def test_typed(kind):
    skip(kind, V1)


@pytest.mark.claim("C2")
def test_in_set_up(cuda):
    pass


@pytest.mark.claim("C3")
def test_words_alone():
    pytest.skip(V1)
"""


def test_the_plugin_writes_the_kind_the_harness_marks_and_other_for_a_plain_skip(tmp_path):
    (tmp_path / "test_kinds.py").write_text(MODULE, encoding="utf-8")
    evidence = tmp_path / "evidence.json"
    args = [str(tmp_path), "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    assert suite.run_pytest([*args, "--gdn-evidence", str(evidence)], here=True) == 0
    tests = {t["nodeid"].split("::")[1]: t for t in json.loads(evidence.read_text())["tests"]}
    assert {name: t["skip_kind"] for name, t in tests.items()} == {
        "test_typed[absent]": SkipKind.ABSENT,
        "test_typed[refused]": SkipKind.REFUSED,
        "test_typed[not applicable]": SkipKind.NOT_APPLICABLE,
        "test_in_set_up": SkipKind.NEEDS_CUDA,
        "test_words_alone": SkipKind.OTHER,
    }
    assert {t["outcome"] for t in tests.values()} == {"skipped"}
    # The reason is as pytest.skip gives it, whatever raised the skip.
    assert tests["test_typed[refused]"]["reason"] == tests["test_words_alone"]["reason"]
    assert tests["test_words_alone"]["reason"].startswith("not applicable: vLLM 0.34.0 has no")


def test_the_harness_skip_is_pytests_own():
    from gdn_review.harness.origin import SKIP_KIND, skip

    with pytest.raises(pytest.skip.Exception, match="^needs CUDA: none$") as raised:
        skip(SkipKind.NEEDS_CUDA, "needs CUDA: none")
    assert getattr(raised.value, SKIP_KIND) == SkipKind.NEEDS_CUDA
