"""The generated suite and exported modules run directly on an older release (issue 33).

Run with an older release's files first on PYTHONPATH (the release cache), as a
maintainer would run them, with no matrix around them: a claim or case outside its
releases skips with its reason, and nothing fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from gdn_review.common import interrupts, release_imports, release_trees
from tests.conftest import ROOT


def _pytest_on(release: str, *args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    env = release_trees.environment(release_trees.tree(release))
    return interrupts.run_child(
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
# One older release: the matrix's runs (tests/test_history.py, the bundle's dry run) take the
# generated suite across the others; 0.31.0 here as well cost CI 24 s for no new kind of check.
@pytest.mark.parametrize("release, later, exported", [("0.29.0", ">=0.31", True)], ids=["0.29.0"])
def test_the_generated_suite_and_exported_modules_pass_or_skip_on_an_older_release(
    release, later, exported, tmp_path
):
    """One pytest session per release (one vLLM import): the generated suite, and on 0.29.0 also the
    modules exported for 0.33.0 of a contract and of #56960."""
    folders = ["generated_tests"]
    if exported:
        from gdn_review.export.export import export

        # A KB of the two records alone (their files and stored snapshots): the modules exported
        # from it are kb/'s, without loading and checking the KB's other records for each.
        kb = tmp_path / "kb"
        (kb / "snapshots").mkdir(parents=True)
        for record in ("update_block_table", 56960):
            shutil.copy(ROOT / "kb" / f"{record}.yaml", kb)
            snapshots = ROOT / "kb" / "snapshots" / str(record)
            if snapshots.is_dir():
                shutil.copytree(snapshots, kb / "snapshots" / str(record))
        for record in ("update_block_table", 56960):
            export(kb, record, tmp_path / "exported", "0.33.0")
        folders.append(str(tmp_path / "exported"))
    done = _pytest_on(release, *folders, "--gdn-evidence", str(tmp_path / "evidence.json"))
    tail = done.stdout[-4000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    last = done.stdout.splitlines()[-1]
    assert " failed" not in last and " error" not in last, tail
    # What the release lacks is said, not failed: claims of a later release skip, naming it.
    assert f"covers vLLM {later}; loaded {release}" in done.stdout, tail
    if exported:  # an exported module carries its record's ranges: the contract's, #56960's claim's
        skipped = [line for line in done.stdout.splitlines() if "/exported/test_gdn_" in line]
        for module, bound in (("contract_update_block_table", "0.31"), ("pr_56960", "0.32")):
            said = f"test_gdn_{module}.py"
            reason = f"not applicable: claim C1 covers vLLM >={bound}; loaded 0.29.0"
            assert any(said in line and reason in line for line in skipped), tail


def _release_requiring(folder, requirement: str):
    """A release cache entry as far as its requirements go: its dist-info's METADATA."""
    info = folder / "vllm-0.17.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Name: vllm\nVersion: 0.17.0\nRequires-Dist: {requirement}\n"
        'Requires-Dist: vllm-gguf-plugin>=0.0.2; extra == "extra-quant"\n',
        encoding="utf-8",
    )
    return folder


def test_an_old_releases_missing_import_is_named_with_the_one_command_that_installs_it(tmp_path):
    """Offline (fetch off) nothing is installed: the command that works is said, without
    dependencies (numpy in the folder would shadow the environment's)."""
    from importlib.util import find_spec

    if find_spec("gguf") is not None:
        pytest.skip("this environment has gguf: nothing is missing")
    entry = _release_requiring(tmp_path / "0.17.0", "gguf>=0.17.0")
    assert release_imports.wanted(entry) == ["gguf>=0.17.0"]
    said = []
    release_imports.ensure(entry, "0.17.0", fetch=False, say=said.append)
    (line,) = said
    target = entry / release_imports.FOLDER
    assert line.startswith("vLLM 0.17.0 imports gguf>=0.17.0 when it is imported")
    assert f"-m pip install --quiet --no-deps --target {target} 'gguf>=0.17.0'" in line
    assert not target.exists()
    assert str(target) not in release_trees.environment(entry)["PYTHONPATH"]


@pytest.mark.slow
def test_an_old_releases_missing_import_is_installed_without_dependencies(tmp_path):
    """gguf goes into the release's entry alone (not numpy), after the release on a child's
    PYTHONPATH; the child imports gguf from there and numpy from the environment."""
    from importlib.util import find_spec

    if find_spec("gguf") is not None:
        pytest.skip("this environment has gguf: nothing is missing")
    entry = _release_requiring(tmp_path / "0.17.0", "gguf>=0.17.0")
    said = []
    release_imports.ensure(entry, "0.17.0", say=said.append)
    folder = entry / release_imports.FOLDER
    names = {p.name for p in folder.iterdir()}
    assert "gguf" in names and not any(n.startswith(("numpy", "tqdm")) for n in names), said
    assert release_imports.wanted(entry) == []  # once is enough
    env = release_trees.environment(entry)
    assert env["PYTHONPATH"].split(os.pathsep)[:2] == [str(entry), str(folder)]
    done = interrupts.run_child(
        [sys.executable, "-c", "import gguf, numpy; print(gguf.__file__); print(numpy.__file__)"],
        env=env,
        capture_output=True,
        text=True,
    )
    gguf_file, numpy_file = done.stdout.split()
    assert gguf_file.startswith(str(folder)) and not numpy_file.startswith(str(entry)), done.stderr
