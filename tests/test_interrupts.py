"""SIGINT and SIGTERM stop each long run within 10 s: no process left, nothing written, exit 130 or
143.

Each command runs for real (``python -m gdn_review.cli``, a small selection).
It is signalled at a known moment, not after a sleep: ``GDN_REVIEW_HOLD`` names the hold point
(``common.interrupts.hold``) in one of its children (the parent for none),
which writes its pid to ``GDN_REVIEW_HOLD_READY`` and waits for ever; the
test waits for that file, then sends the signal to the command alone, as
``kill PID`` does (a terminal's Ctrl-C reaches the same process: the
command's children run in sessions of their own). From the signal to the
exit, one busy process per CPU runs beside it: the bound holds on a loaded
machine. (The load starts at the hold point, not before: during the vLLM
import it only slowed the rest of the suite.)

The command is started with SIGINT ignored, as a script's ``cmd &`` starts
it: the old SIGINT tests passed only where that was not so (Python keeps an
inherited SIG_IGN and never raises KeyboardInterrupt), so ``review`` ran on
for minutes and ``mutate`` finished with exit 0.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gdn_review.common import interrupts, release
from tests.conftest import ROOT, vllm_files_digest

BOUND_S = 10.0  # signal to exit
# safety cap on reaching the hold point (vLLM imports under load); not a timing assumption
READY_S = 900.0
TARGET = "vllm/v1/attention/backends/gdn_attn.py"


def _review_diff(folder: Path) -> Path:
    """A change the review can run: a comment after the installed builder file's last line."""
    _, root = release.loaded()
    before = (root / TARGET).read_text(encoding="utf-8").splitlines(True)
    diff = folder / "comment.diff"
    diff.write_text(
        "".join(
            difflib.unified_diff(
                before, [*before, "# a line to review\n"], f"a/{TARGET}", f"b/{TARGET}"
            )
        ),
        encoding="utf-8",
    )
    return diff


# command -> (its hold point, its arguments given the test's folder; everything it writes goes under
# OUT)
COMMANDS = {
    "mutate": (
        "mutant",
        lambda t: [
            "mutate",
            "--record",
            "52078",
            "--mutant",
            "ge_to_gt",
            "-k",
            "C1 and pure_spec_decode",
            "--jobs",
            "1",
            "--offline",
            "--evidence",
            str(t / "out" / "evidence.json"),
            "--reports",
            str(t / "out" / "reports"),
        ],
    ),
    "matrix": (
        "matrix-pytest",
        lambda t: [
            "matrix",
            "--record",
            "52078",
            "--vllm",
            release.installed(),
            "--jobs",
            "1",
            "-k",
            "C1",
            "--work",
            str(t / "out" / "work"),
            "--reports",
            str(t / "out" / "reports"),
        ],
    ),
    "review": (
        "review-side",
        lambda t: [
            "review",
            str(_review_diff(t)),
            "--record",
            "52078",
            "-k",
            "C1",
            "--max-mutants",
            "0",
            "--out",
            str(t / "out" / "review"),
            "--work",
            str(t / "out" / "work"),
        ],
    ),
    "bench": (
        "bench-worker",
        lambda t: [
            "bench",
            "--record",
            "52078",
            "--releases",
            f"{release.installed()},{release.installed()}",
            "--case",
            "single_request",
            "--max-seconds",
            "5",
            "--evidence",
            str(t / "out" / "bench.json"),
        ],
    ),
    "bundle --dry-run": (
        "bundle-step",
        lambda t: [
            "bundle",
            "--out",
            str(t / "out" / "bundle"),
            "--record",
            "56531",
            "--vllm",
            release.installed(),
            "--dry-run",
            "--work",
            str(t / "out" / "work"),
        ],
    ),
}


@contextlib.contextmanager
def cpu_load():
    """One busy process per CPU, each one spinning already when the block starts (it says so
    first)."""
    spin = "import sys\nsys.stdout.write('spinning\\n')\nsys.stdout.flush()\nwhile True: pass\n"
    busy = [
        subprocess.Popen([sys.executable, "-c", spin], stdout=subprocess.PIPE)
        for _ in range(os.cpu_count() or 1)
    ]
    try:
        for process in busy:
            assert process.stdout.readline() == b"spinning\n"
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()
            process.stdout.close()


def _processes(session: int, *marks: str, but_children_of: int = 0) -> dict[int, str]:
    """Running processes of the command's session or whose environment names one of ``marks``,
    but ``but_children_of``'s own children (a test worker's preload servers: the children they
    fork show the server's environment, which names the TMPDIR it was started for)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            state, ppid, _, sid = stat[stat.rindex(")") + 2 :].split()[:4]
            environ = (entry / "environ").read_bytes()
            if (
                state == "Z"
                or int(ppid) == but_children_of
                or (int(sid) != session and not any(m.encode() in environ for m in marks))
            ):
                continue
            found[int(entry.name)] = (
                (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:160]
            )
        except (OSError, ValueError):
            continue
    return found


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


# One signal per command: both go through the same handler (common.interrupts). SIGTERM for the one
# whose children are forked (mutate: a forked child dies by SIGTERM, ignores SIGINT) and for bench;
# SIGINT for the rest. Each case costs a vLLM import.
SIGNALS = {"mutate": signal.SIGTERM, "bench": signal.SIGTERM}


@pytest.fixture(scope="module")
def shared_tmp(tmp_path_factory) -> Path:
    """One TMPDIR for this module's commands, with a preload server for it. A TMPDIR per test was
    a server signature per test (``preloaded.signature``: torch derives folders from it at
    import), so each command's Python children started as fresh interpreters, a vLLM import
    each; each test checks what its own run left in the folder."""
    folder = tmp_path_factory.mktemp("interrupts-tmp")
    interrupts.preload_server(dict(os.environ, TMPDIR=str(folder)), str(ROOT), now=True)
    return folder


@pytest.mark.slow
@pytest.mark.xdist_group("interrupts")
@pytest.mark.parametrize(
    "command, signum",
    [(command, SIGNALS.get(command, signal.SIGINT)) for command in COMMANDS],
    ids=[f"{command}-{SIGNALS.get(command, signal.SIGINT).name}" for command in COMMANDS],
)
def test_a_signal_stops_the_run_within_10_s_leaves_no_process_and_writes_nothing(
    command, signum, tmp_path, shared_tmp
):
    point, arguments = COMMANDS[command]
    vllm_before = vllm_files_digest()
    ready = tmp_path / "hold-ready"
    tmp_before = set(os.listdir(shared_tmp))
    marks = (str(tmp_path), str(shared_tmp))  # a fresh child's environment, a preloaded child's
    env = dict(
        os.environ,  # with the shared_tmp server's name (preloaded.SERVERS)
        TMPDIR=str(shared_tmp),
        **{interrupts.HOLD: point, interrupts.HOLD_READY: str(ready)},
    )
    # SIGINT ignored from the start, as a non-interactive shell starts `cmd &`: the command must not
    # rely on it.
    argv = [
        "sh",
        "-c",
        'trap "" INT; exec "$0" "$@"',
        sys.executable,
        "-m",
        "gdn_review.cli",
        *arguments(tmp_path),
    ]
    with open(tmp_path / "stderr.txt", "w") as err:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True
        )
    try:
        started = time.monotonic()
        while (
            not ready.exists()
        ):  # the hold point says when; polled, with a cap for a run that never gets there
            assert process.poll() is None, (
                f"{command} ended ({process.returncode}) before its hold point: "
                f"{(tmp_path / 'stderr.txt').read_text()[-3000:]}"
            )
            assert time.monotonic() - started < READY_S, (
                f"{command} did not reach its hold point in {READY_S:.0f} s"
            )
            time.sleep(0.05)
        held = int(ready.read_text())
        # What finds a process left over sees the one at the hold point, forked or fresh.
        assert held in _processes(process.pid, *marks, but_children_of=os.getpid())
        with cpu_load():  # the bound is signal to exit: that is when the CPUs are kept busy
            sent = time.monotonic()
            process.send_signal(signum)
            try:
                code = process.wait(timeout=BOUND_S)
            except subprocess.TimeoutExpired:
                pytest.fail(
                    f"{command} still running {BOUND_S:.0f} s after {signum.name}: "
                    f"{_processes(process.pid, *marks, but_children_of=os.getpid())}"
                )
            took = time.monotonic() - sent
            left = _processes(process.pid, *marks, but_children_of=os.getpid())
    finally:
        # a failed run leaves nothing running either
        for pid in _processes(process.pid, *marks, but_children_of=os.getpid()):
            os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()
    print(
        f"{command} {signum.name}: hold point after {sent - started:.1f} "
        f"s, exit {code} {took:.2f} s after the signal"
    )
    stderr = (tmp_path / "stderr.txt").read_text()
    assert code == 128 + signum, f"exit {code} after {signum.name}: {stderr[-3000:]}"
    assert took <= BOUND_S
    assert not left, f"processes left running: {left}"
    assert not _running(held), f"the process at the hold point ({held}) is still running"
    said = [line for line in stderr.splitlines() if "interrupted" in line]
    assert said == [
        f"interrupted by {signum.name}: its processes are stopped; nothing was written"
    ], stderr[-3000:]
    assert not (tmp_path / "out").exists(), sorted(str(p) for p in (tmp_path / "out").rglob("*"))[
        :20
    ]
    assert not [
        name
        for name in set(os.listdir(shared_tmp)) - tmp_before
        if name.startswith(("gdn-review-review-", "gdn-bundle"))
    ]
    assert vllm_files_digest() == vllm_before


def test_stop_ends_a_tree_that_left_its_session_and_group(tmp_path):
    """A child's session, a grandchild in a group of its own (`timeout`), one in a new session
    (`setsid`), an orphan."""
    mark = str(tmp_path)
    env = dict(os.environ, TMPDIR=mark)
    script = "timeout 300 sleep 300 & setsid sleep 300 & (sleep 300 &); sleep 300"
    process = interrupts.popen(["bash", "-c", script], env=env)
    deadline = time.monotonic() + 120
    while (
        sum(line.startswith("sleep") for line in _processes(-1, mark).values()) < 4
    ):  # every sleep has started
        assert time.monotonic() < deadline, _processes(-1, mark)
        time.sleep(0.05)
    assert any(line.startswith("timeout") for line in _processes(-1, mark).values())
    interrupts.stop(process)
    assert process.returncode == -signal.SIGKILL
    assert _processes(-1, mark) == {}


def test_stop_leaves_alone_a_child_someone_else_already_reaped(monkeypatch):
    """Its pid may be another process's by now: nothing is signalled, for a Popen or a forked
    pid."""
    killed = []
    monkeypatch.setattr(interrupts, "_kill_tree", killed.append)
    # The running one below is not really killed here: waiting the full reap time for it is waste.
    monkeypatch.setattr(interrupts, "REAP_S", 0.2)
    process = interrupts.popen(["true"])
    os.waitpid(process.pid, 0)  # reaped behind the Popen's back
    interrupts.stop(process)
    pid = interrupts.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert interrupts.stop(pid) is None
    assert killed == []
    running = interrupts.popen(["sleep", "300"])  # and one still running is killed, tree and all
    interrupts.stop(running)
    assert killed == [running.pid]
    running.kill()
    running.wait()


def test_a_signal_raises_interrupted_once_and_stops_the_forked_children():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(interrupts.Interrupted) as stopped:
        with interrupts.handled():
            pid = interrupts.fork()
            if pid == 0:
                signal.pause()  # SIGINT ignored here: only the parent's stop ends it
                os._exit(0)
            os.kill(os.getpid(), signal.SIGINT)
            signal.pause()
    assert stopped.value.exit_code == 130
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped by the stop on the way out
    assert signal.getsignal(signal.SIGINT) is before


def test_once_the_output_is_being_written_a_signal_lets_the_run_finish():
    before = signal.getsignal(signal.SIGTERM)
    with interrupts.handled():
        interrupts.finishing()
        os.kill(os.getpid(), signal.SIGTERM)
        # A signal to oneself is handled as os.kill returns (the call checks for pending signals):
        # the handler has run, noted it and raised nothing.
        assert interrupts._received == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before
