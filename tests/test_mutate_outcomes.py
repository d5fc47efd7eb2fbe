"""mutate's outcomes (issue 54): a mutant that makes the builder raise is killed; a baseline
whose set-up could not run says so, with vLLM's message, and runs no mutant (exit 3).

Both on the installed vLLM, CPU, C1 of #52078 on one case (a second of tests). The set-up that
could not run is an environment a user can have: ``VLLM_CPU_KVCACHE_SPACE`` set to a word,
which vLLM's CPU platform reads with ``int()`` while the harness makes its ``VllmConfig``.
"""

from __future__ import annotations

import ast
import os

import pytest

from gdn_review.common import interrupts
from gdn_review.common.release import loaded as loaded_release
from gdn_review.mutation import runner
from gdn_review.run import suite
from tests.conftest import ROOT, vllm_files_digest
from tests.test_mutate import GDN, TARGET

pytestmark = pytest.mark.slow
SELECTION = "C1 and pure_spec_decode"


def test_a_mutant_that_makes_build_raise_is_killed():
    _, root = loaded_release()
    source = (root / TARGET).read_text(encoding="utf-8")
    (cls,) = [
        n
        for n in ast.parse(source).body
        if isinstance(n, ast.ClassDef) and n.name == "GDNAttentionMetadataBuilder"
    ]
    (build,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "build"]
    first = build.body[0]
    lines = source.splitlines(True)
    lines.insert(first.lineno - 1, " " * first.col_offset + "raise RuntimeError('mutant')\n")
    tests = suite.test_args([ROOT / "generated_tests" / "test_pr_52078.py"], SELECTION)
    result = runner.run_fresh_process(TARGET, "".join(lines), tests, cwd=ROOT)
    assert result["status"] == "killed", result
    assert "C1" in result["killed_by"]
    assert any("RuntimeError: mutant" in m for m in result["messages"].values()), result


def test_a_baseline_that_could_not_run_says_so_and_runs_no_mutant(tmp_path):
    before = vllm_files_digest()
    done = interrupts.run_child(
        [
            *GDN,
            "mutate",
            "--record",
            "52078",
            "--mutant",
            "ge_to_gt",
            "-k",
            SELECTION,
            "--jobs",
            "1",
            "--evidence",
            str(tmp_path / "evidence.json"),
            "--reports",
            str(tmp_path / "reports"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "GDN_REVIEW_NO_RELEASE_ADAPTATIONS": "1",
            "VLLM_CPU_KVCACHE_SPACE": "lots",
        },
    )
    assert done.returncode == 3, done.stdout[-2000:] + done.stderr[-2000:]
    said = " ".join(done.stderr.split())
    assert "the generated suite measured nothing without mutants" in said, said[-2000:]
    assert "test(s) could not run (fix the set-up or the release's platform" in said
    assert "VllmConfig raised" in said
    assert "does not pass" not in said and "fail" not in said.split("[1/3]")[-1]
    assert "[2/3]" not in said  # no mutant ran
    assert not (tmp_path / "evidence.json").exists()
    assert vllm_files_digest() == before


def test_a_round_of_node_ids_makes_items_of_the_functions_it_names_only(tmp_path):
    """A mutant's round that names tests by node id makes items of their functions only (the
    others' parametrized items are never made); a round that names a file makes all of them.
    The selection, and so the verdict, is the same either way."""
    import sys

    module = tmp_path / "test_round_functions.py"
    module.write_text(
        "import pytest\n\nMADE = []\n\n\n"
        "def pytest_generate_tests(metafunc):\n    MADE.append(metafunc.function.__name__)\n\n\n"
        "@pytest.mark.parametrize('n', range(50))\n"
        "def test_many(n):\n    assert n >= 0\n\n\n"
        "@pytest.mark.parametrize('n', [1, 2])\n"
        "def test_named(n):\n    assert n != 2\n",
        encoding="utf-8",
    )
    named = [f"{module}::test_named[1]", f"{module}::test_named[2]", "-x"]
    for tests, made in (
        (named, ["test_named"]),
        ([str(module), "-x"], ["test_many", "test_named"]),
    ):
        collector = runner.KillCollector(tests)
        code = suite.run_pytest(
            [*tests, "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)],
            here=True,
            plugins=(collector,),
        )
        assert sys.modules["test_round_functions"].MADE == made, tests
        sys.modules["test_round_functions"].MADE.clear()
        result = collector.result(code)
        assert result["status"] == "killed"
        assert result["killed_by"] == {"named": ["test_round_functions.py::test_named[2]"]}
