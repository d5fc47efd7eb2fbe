"""Interrupts of a long run: SIGINT and SIGTERM become one exception, and the run's processes die
with it.

``handled()`` wraps a long run (``mutate``, ``matrix``, ``review``, ``bench``,
``bundle --dry-run``): in the main thread either signal raises
``Interrupted`` (a ``KeyboardInterrupt``), even where the shell that started
the command ignores SIGINT (a script's ``cmd &``); a second signal while the
run stops is ignored. Every child process the run starts goes through
``popen``/``run_child`` (a session of its own) or ``fork`` (a process group of its
own) and is registered; ``stop`` ends one with every process under it: its
session, its group and their descendants, stopped (SIGSTOP) first so none can
start another, then killed (SIGKILL) and the child reaped. On the way out of
``handled()`` every child still registered is stopped, so an interrupt ends
within seconds whatever the children were doing. Once a run calls
``finishing()`` (its work is done, its output is being written) a signal is
noted, not raised: the output is written whole and the run ends as it would. A child's
environment leaves out what vLLM set in this process for its own workers (``child_environment``).

``hold(point)`` is the test hook: where ``GDN_REVIEW_HOLD`` names the point,
it writes its pid to the file ``GDN_REVIEW_HOLD_READY`` names and waits for
ever, so a test signals the command at a known moment instead of sleeping.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from gdn_review.common import preloaded

HOLD, HOLD_READY = "GDN_REVIEW_HOLD", "GDN_REVIEW_HOLD_READY"
SIGNALS = (signal.SIGINT, signal.SIGTERM)
REAP_S = 5.0  # how long killed processes may take to die

_children: dict[int, subprocess.Popen | None] = {}  # pid -> its Popen (None: a forked child)
_received: int | None = None  # the first signal of this run
_active = False  # handled() is on
_finishing = False  # the run writes its output: signals are noted only
_deferred = 0  # the main thread is starting a child: a signal waits until it is registered
_preloaded: dict[int, int] = {}  # a preloaded command's pid -> the pipe that gives its child's pid
_started: dict[str, tuple[int, int]] = {}  # preload servers this process started: pid, its pipe
_asked: set[str] = set()  # signatures of Python children started fresh once already
_server_lock = threading.Lock()
# What vLLM's CPU platform sets in a process that makes a VllmConfig, for the worker processes vLLM
# itself would start (allocator and OpenMP preloads, thread counts), and cv2's import adds to the
# library path. Our children are not those workers: each sets them when it makes its own config.
# Inherited, they made every child of such a process differ from the preload servers' environment
# (a fresh interpreter, then a server of its own).
VLLM_WORKER_SETUP = (
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
    "NUMEXPR_MAX_THREADS",
    "LOCAL_WORLD_SIZE",
    "TORCHINDUCTOR_CPP_DYNAMIC_THREADS",
)
_started_with = {name: os.environ.get(name) for name in VLLM_WORKER_SETUP}


class Interrupted(KeyboardInterrupt):
    """The run got SIGINT or SIGTERM; ``exit_code`` is the shell's for it (130, 143)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _on_signal(signum, frame) -> None:
    global _received
    if _received is not None:
        return  # the run is already stopping
    _received = signum
    if not (_finishing or _deferred):
        raise Interrupted(signum)


@contextlib.contextmanager
def handled():
    """For the run inside: SIGINT/SIGTERM raise ``Interrupted`` in the main thread; registered
    children are stopped on the way out."""
    global _received, _active, _finishing
    if _active or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _on_signal) for signum in SIGNALS}
    _received, _active, _finishing = None, True, False
    try:
        yield
    finally:
        try:
            stop_all()
            if _received is not None:
                _stop_servers()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            _received, _active, _finishing = None, False, False


def check() -> None:
    """Raise ``Interrupted`` if the run got a signal (threads call it before they start
    anything)."""
    if _received is not None and not _finishing:
        raise Interrupted(_received)


_check = check  # run_child() has an argument of the same name


def finishing() -> None:
    """The run's work is done and its output is being written: from now on a signal does not stop
    it."""
    global _finishing
    if _active:
        _finishing = True


@contextlib.contextmanager
def _starting():
    """A signal in the main thread waits until the child being started is registered."""
    global _deferred
    main = threading.current_thread() is threading.main_thread()
    if main:
        _deferred += 1
    try:
        yield
    finally:
        if main:
            _deferred -= 1
    check()


def popen(args, **kwargs) -> subprocess.Popen:
    """``subprocess.Popen`` in a session of its own, registered until ``stop``.

    A Python command of this interpreter runs in a child of the preload server
    (``common/preloaded.py``: torch and the rest already imported) where it can.
    """
    check()
    kwargs["env"] = child_environment(kwargs.get("env"))
    with _starting():
        server = None
        if preloaded.suits(args, kwargs):
            env = os.environ if kwargs.get("env") is None else kwargs["env"]
            server = preload_server(env, kwargs.get("cwd") or os.getcwd())
        if server is None:
            process = subprocess.Popen(args, start_new_session=True, **kwargs)
        else:
            if kwargs.get("env") is not None:  # its own children use the same servers
                kwargs["env"] = {**kwargs["env"], preloaded.SERVERS: os.environ[preloaded.SERVERS]}
            read, write = os.pipe()
            try:
                process = subprocess.Popen(
                    preloaded.start_command(server, write, args),
                    start_new_session=True,
                    pass_fds=(write,),
                    **kwargs,
                )
            except BaseException:
                os.close(read)
                raise
            finally:
                os.close(write)
            _preloaded[process.pid] = read
        _children[process.pid] = process
    if _received is not None and not _finishing:  # a thread's child started as the run was stopping
        stop(process)
        check()
    return process


def child_environment(env=None):
    """``env`` (None: this process's) with each ``VLLM_WORKER_SETUP`` variable it inherited
    unchanged from this process given the value this process started with; None where that is
    this process's environment as it is. A value the caller chose stays."""
    given = os.environ if env is None else env
    back = {
        name: _started_with[name]
        for name in VLLM_WORKER_SETUP
        if given.get(name) == os.environ.get(name) != _started_with[name]
    }
    if not back:
        return env
    result = dict(given)
    for name, value in back.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = value
    return result


def preload_server(env, cwd, *, now: bool = False) -> str | None:
    """The name of a preload server for a child with environment ``env`` in folder ``cwd``: one
    this process has (inherited, or started earlier) for their ``preloaded.signature``, else, the
    second time that signature is asked for, one started now and handed down
    (``preloaded.SERVERS``). None (a fresh interpreter) the first time: a server's imports cost
    most of what it saves a child, so a one-off child does not start one; and None past
    ``preloaded.MAX_STARTED``. ``now``: start one on the first ask (a process that knows many
    children will follow, such as a test session). A server ends when the process that started
    it does (its end of the pipe closes); the command that started it waits for its imports.
    ``env`` counts as a child is given it (``child_environment``)."""
    env = child_environment(env)
    signature = preloaded.signature(env, cwd)
    with _server_lock:
        known = preloaded.servers(os.environ)
        if signature in known:
            return known[signature]
        if (signature not in _asked and not now) or len(_started) >= preloaded.MAX_STARTED:
            _asked.add(signature)
            return None
        read, write = os.pipe()
        listener, name = preloaded.listen()
        try:
            process = subprocess.Popen(
                preloaded.server_command(listener.fileno(), read),
                pass_fds=(read, listener.fileno()),
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd=cwd,
                env=preloaded.server_environment(env),
            )
        except OSError:
            os.close(write)
            return None
        finally:
            os.close(read)
            listener.close()
        _started[name] = (process.pid, write)
        os.environ[preloaded.SERVERS] = json.dumps({**known, signature: name})
        return name


def _stop_servers() -> None:
    """Kill the preload servers this process started, with their monitors and children (an
    interrupted run)."""
    with _server_lock:
        if not _started:
            return
        known = preloaded.servers(os.environ)
        os.environ[preloaded.SERVERS] = json.dumps(
            {signature: name for signature, name in known.items() if name not in _started}
        )
        for pid, write in _started.values():
            _kill_tree(pid)
            os.close(write)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        _started.clear()


def _forget(pid: int) -> int | None:
    """Forget a child; the pid of its preloaded child, if it has one."""
    _children.pop(pid, None)
    read = _preloaded.pop(pid, None)
    return None if read is None else preloaded.read_pid(read)


def run_child(
    args,
    *,
    input=None,
    capture_output: bool = False,
    timeout: float | None = None,
    check: bool = False,
    **kwargs,
) -> subprocess.CompletedProcess:
    """``subprocess.run`` in a session of its own: on a timeout or an interrupt the session is
    stopped."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    process = popen(args, **kwargs)
    try:
        out, err = process.communicate(input, timeout=timeout)
    except BaseException:
        stop(process)
        raise
    _forget(process.pid)
    _check()  # killed by an interrupt: say so rather than return its exit code
    if check and process.returncode:
        raise subprocess.CalledProcessError(process.returncode, args, out, err)
    return subprocess.CompletedProcess(args, process.returncode, out, err)


def fork() -> int:
    """``os.fork()``: the child in a process group of its own, ignoring SIGINT (its parent decides),
    killed by SIGTERM."""
    global _received, _active, _finishing
    check()
    with _starting():
        pid = os.fork()
        if pid == 0:  # nothing of the parent's run is the child's to stop
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            _children.clear()
            _preloaded.clear()
            _started.clear()  # the parent's servers: still this child's to use, not to stop
            _received, _active, _finishing = None, False, False
        else:
            with contextlib.suppress(OSError):  # the child may have done it (or ended) already
                os.setpgid(pid, pid)
            _children[pid] = None
    if pid == 0:
        os.setpgid(0, 0)
    return pid


def wait(pid: int) -> int:
    """Wait for a forked child to end and forget it; its wait status."""
    _, status = os.waitpid(pid, 0)
    _children.pop(pid, None)
    return status


def stop(child: int | subprocess.Popen) -> int | None:
    """Kill a registered child and every process under it, reap it; its wait status (None: not ours
    to reap).

    A child someone already reaped is only forgotten: its pid may be another process's by now.
    """
    pid = child if isinstance(child, int) else child.pid
    process = _children.get(pid)
    forked = _forget(pid)
    process = child if isinstance(child, subprocess.Popen) else process
    if process is not None and process.returncode is not None:
        return process.returncode
    try:  # still ours (running, or ended and not reaped: its pid stays ours until then)?
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped behind our back (os.waitpid on a Popen's pid, say)
        return None if process is None else process.poll()
    _kill_tree(pid, *([forked] if forked and forked != pid else []))
    if process is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=REAP_S)
        return process.returncode
    deadline = time.monotonic() + REAP_S
    while time.monotonic() < deadline:
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if done:
            return status
        time.sleep(0.01)
    return None


def stop_all() -> None:
    """Stop every registered child (the way out of an interrupted run)."""
    for pid in list(_children):
        stop(pid)


def _process_table() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (parent, process group, session, state) of every process, from /proc."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
    return table


def _tree(*roots: int) -> set[int]:
    """``roots``, the processes of a session or group led by one of them, and their descendants."""
    table = _process_table()
    members: set[int] = set()
    leaders = set(roots)
    grown = True
    while grown:
        grown = False
        for pid, (parent, group, session, state) in table.items():
            if pid in members or pid in (os.getpid(), 1) or state == "Z":
                continue
            if pid in roots or parent in members or group in leaders or session in leaders:
                members.add(pid)
                leaders.add(pid)
                grown = True
    return members


def _kill_tree(*roots: int) -> None:
    """Stop the trees (a stopped process starts nothing), look again until they hold still, then
    kill them."""
    stopped: set[int] = set()
    for _ in range(20):
        found = _tree(*roots) - stopped
        if not found:
            break
        for pid in found:
            _signal(pid, signal.SIGSTOP)
        stopped |= found
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    deadline = (
        time.monotonic() + REAP_S
    )  # a killed process dies when it is next scheduled: wait for that
    while any(_running(pid) for pid in stopped) and time.monotonic() < deadline:
        time.sleep(0.01)


def _running(pid: int) -> bool:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return text[text.rindex(")") + 2] not in "ZX"


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def hold(point: str) -> None:
    """Test hook: if ``GDN_REVIEW_HOLD`` is ``point``, write this pid to ``GDN_REVIEW_HOLD_READY``
    and never return."""
    if os.environ.get(HOLD) != point:
        return
    ready = os.environ.get(HOLD_READY)
    if ready:
        temp = f"{ready}.{os.getpid()}.tmp"
        Path(temp).write_text(f"{os.getpid()}\n", encoding="utf-8")
        os.replace(temp, ready)
    while True:
        signal.pause()


def hold_environment() -> dict[str, str]:
    """The test hook's variables, for a child started with an environment of its own."""
    return {name: os.environ[name] for name in (HOLD, HOLD_READY) if name in os.environ}
