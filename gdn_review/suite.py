"""The generated suite under pytest (a fresh process), so the plugin writes evidence: `gdn-review run`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# pytest's exit codes that still mean "tests ran and the evidence is worth reporting".
RAN_EXIT_CODES = {0, 1}
NO_TESTS = 5


def pytest_command(modules: list[Path], evidence: Path, keyword: str | None, extra: tuple[str, ...]) -> list[str]:
    command = [sys.executable, "-m", "pytest", *map(str, modules), "--gdn-evidence", str(evidence), "-p", "no:cacheprovider"]
    if keyword:
        command += ["-k", keyword]
    return command + list(extra)


def run_pytest(command: list[str]) -> int:
    """Run pytest with its output streaming to this terminal (that is the progress)."""
    return subprocess.run(command).returncode
