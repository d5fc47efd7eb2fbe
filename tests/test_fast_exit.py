"""Ending a process without the interpreter's teardown keeps what a normal exit gives."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest

from gdn_review.common import fast_exit
from tests.conftest import ROOT


def test_exit_now_keeps_the_code_runs_atexit_and_flushes():
    code = (
        "import atexit, sys\n"
        "from gdn_review.common.fast_exit import exit_now\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "sys.stdout.write('unflushed, ')\n"
        "exit_now(3)\n"
    )
    buffered = {
        k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"
    }  # so a missing flush shows
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=buffered,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert (done.returncode, done.stdout) == (3, "unflushed, atexit ran\n")


@pytest.mark.parametrize(("body", "expected"), [("assert True", 0), ("assert False", 1), (None, 5)])
def test_the_pytest_snippet_returns_pytests_exit_code(tmp_path, body, expected):
    if body is not None:
        (tmp_path / "test_one.py").write_text(f"def test_one():\n    {body}\n", encoding="utf-8")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            fast_exit.PYTEST,
            str(tmp_path),
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == expected, done.stdout[-1000:]
    assert "passed" in done.stdout or "failed" in done.stdout or "no tests ran" in done.stdout


def test_run_click_without_vllm_exits_as_click_would(monkeypatch):
    @click.command()
    def command():
        raise SystemExit(2)

    monkeypatch.setattr(sys, "argv", ["command"])
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    with pytest.raises(SystemExit) as done:
        fast_exit.run_click(command)
    assert done.value.code == 2
