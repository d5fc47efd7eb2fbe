"""The generated suite and exported modules run directly on an older release (issue 33).

Run with an older release's files first on PYTHONPATH (the release cache), as a
maintainer would run them, with no matrix around them: a claim or case outside its
releases skips with its reason, and nothing fails.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from gdn_review.common import release_trees
from tests.conftest import ROOT


def _pytest_on(release: str, *args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    env = release_trees.environment(release_trees.tree(release))
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *args,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.slow
@pytest.mark.parametrize("release, later", [("0.29.0", ">=0.31"), ("0.31.0", ">=0.32")])
def test_the_generated_suite_passes_or_skips_run_directly_on_an_older_release(
    release, later, tmp_path
):
    done = _pytest_on(release, "generated_tests", "--gdn-evidence", str(tmp_path / "evidence.json"))
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert (
        " failed" not in done.stdout.splitlines()[-1]
        and " error" not in done.stdout.splitlines()[-1]
    ), tail
    # What the release lacks is said, not failed: claims of a later release skip, naming it.
    assert f"covers vLLM {later}; loaded {release}" in done.stdout, tail


@pytest.mark.slow
def test_an_exported_module_skips_the_claims_and_cases_outside_their_releases_on_an_older_release(
    tmp_path,
):
    for record in ("update_block_table", "56960"):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "gdn_review.cli",
                "export",
                "--record",
                record,
                "--out",
                str(tmp_path),
                "--vllm-release",
                "0.33.0",
            ],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
    done = _pytest_on("0.29.0", str(tmp_path), cwd=tmp_path)
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    assert "not applicable: claim C1 covers vLLM >=0.31; loaded 0.29.0" in done.stdout, (
        tail
    )  # the contract's range
    assert "not applicable: claim C1 covers vLLM >=0.32; loaded 0.29.0" in done.stdout, (
        tail
    )  # #56960's claim range
