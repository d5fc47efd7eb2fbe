"""Python children that start with torch already imported: the preload server.

Every Python child of ours runs the harness, which imports vLLM, which imports torch,
transformers and some two hundred other packages of the shared environment: about 10 s of CPU
per child, three quarters of it the same packages each time. The first Python child a process
starts (``interrupts.popen``) starts this server, which imports those packages once
(``PRELOAD``, never vLLM or gdn_review) and then forks one child per command. The child makes
itself what a fresh interpreter would be (argv, environment, working folder, standard streams,
``sys.path``, signal handlers, ``__main__``), drops the server's gdn_review modules and runs
the command; vLLM and gdn_review are imported in the child from its own path, so a release tree
on ``PYTHONPATH`` or a mutated file is what it sees.

The command is still a process of its own, started as the fresh interpreter would have been:
``preloaded_start.py`` (the standard library only, a few milliseconds) hands its argv,
environment, folder and standard streams to the server over a Unix socket, writes the forked
child's pid to a pipe its parent reads (``interrupts.stop`` kills both trees), waits for the
child and ends as it ended. A monitor process between server and child reports the end, and kills
the child if the command's process goes away first. Where the server cannot stand in for a fresh
interpreter (an interpreter option, or an environment that differs in a variable a preloaded
package reads at import: ``CHILD_OWN`` lists the ones that may differ), the command execs a fresh
interpreter; so does it when the server is not there. ``GDN_REVIEW_PRELOAD=0`` turns the
servers off.

A server imports with one environment and working folder; a command whose environment differs
from it outside ``CHILD_OWN``, or whose folder differs (``signature``), gets another server,
started for it the second time such a command starts (a one-off command runs fresh: a server's
imports cost most of what they save one child), at most ``MAX_STARTED`` per process. Children
inherit their parent's servers (``SERVERS``): a command run in a child, and that command's own
children, are forked by the servers a test worker or a CLI run started.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import random
import runpy
import secrets
import select
import signal
import socket
import struct
import sys
import threading
import types
from pathlib import Path
from typing import Mapping, NoReturn

from gdn_review.common import fast_exit

SWITCH = "GDN_REVIEW_PRELOAD"
SERVERS = "GDN_REVIEW_PRELOAD_SERVERS"  # {signature: name} of the servers at hand, handed down
MAX_STARTED = 4
# Imported by every vLLM release from 0.28.0 on when the harness makes a builder (measured over
# the release trees: the packages common to all), all from the shared environment.
PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch._inductor.lowering",
    "torchvision",
    "torchaudio",
    "transformers",
    "transformers.configuration_utils",
    "openai",
    "pydantic",
    "aiohttp",
    "huggingface_hub",
    "numpy",
    "sympy",
    "requests",
    "zmq",
    "psutil",
    "yaml",
    "jinja2",
)
# Then the builder's own imports from the shared environment (its layer's module, the model
# registry), measured the same way: each child imported them itself (0.8 s of its 8 s of CPU).
# Left to the child: those a release before 0.29.0 does not import (cutlass, fastapi, xgrammar),
# and those whose import writes a variable or reads one a child may set differently (cv2 sets
# LD_LIBRARY_PATH; humming, compressed_tensors and prometheus_client read CHILD_OWN ones;
# torch.utils.cpp_extension asks torch for CUDA devices). tests/test_preloaded.py checks that
# this list does neither.
PRELOAD_BUILDER_IMPORTS = (
    "transformers.models.auto.image_processing_auto",
    "transformers.models.auto.modeling_auto",
    "transformers.models.auto.tokenization_auto",
    "transformers.modeling_layers",
    "torch._inductor.compile_fx",
    "pytest",
    "opentelemetry.exporter.otlp.proto.grpc.trace_exporter",
    "fastsafetensors",
    "openai_harmony",
)
# What every child of ours has set by the time those packages are imported: the harness's offline
# default (harness.environment.prepare_platform) and vLLM's one inductor compile thread (every
# release's env_override sets it before inductor is imported). The server imports with them set.
IMPORT_DEFAULTS = {"HF_HUB_OFFLINE": "1", "TORCHINDUCTOR_COMPILE_THREADS": "1"}
# Variables a child may set differently from the server: read only by what the child imports
# itself (vLLM, gdn_review) or after import (pytest's, when it runs), never by a preloaded
# package at its import.
CHILD_OWN = (
    "GDN_REVIEW_",
    "VLLM_",
    "PYTEST_",
    "HUMMING_",
    # Set by vLLM's import in a parent that imported it, and set the same by the child's own:
    # read by vLLM's kernels (aiter, triton, tilelang) or by torch when asked, not at import.
    "AITER_",
    "TRITON_",
    "TILELANG_",
    "PYTORCH_NVML_BASED_CUDA_CHECK",
    "TORCHINDUCTOR_CACHE_DIR",
    "PYTHONPATH",
    "PYTHONDONTWRITEBYTECODE",
    "CUDA_VISIBLE_DEVICES",
    "COLUMNS",
    "LINES",
    "PWD",
    "OLDPWD",
)
# What Popen is given that the command's own process takes care of (anything else: a fresh one).
PLAIN_OPTIONS = frozenset(
    {"env", "cwd", "stdin", "stdout", "stderr", "text", "encoding", "errors", "bufsize"}
)
START = Path(__file__).with_name("preloaded_start.py")
ROOT = Path(__file__).resolve().parents[2]  # the folder gdn_review is imported from


def suits(args, options: dict) -> bool:
    """Whether a command may run in a preloaded child: this interpreter, ``-m``, ``-c`` or a
    script, plain Popen options, the server not turned off."""
    return (
        os.environ.get(SWITCH) != "0"
        and isinstance(args, (list, tuple))
        and len(args) > 1
        and str(args[0]) == sys.executable
        and command([str(arg) for arg in args[1:]]) is not None
        and set(options) <= PLAIN_OPTIONS
    )


def command(arguments: list[str]) -> tuple[str, str, list[str]] | None:
    """(``module``, ``code`` or ``script``, its name or text, its argv's rest); None for any
    interpreter option."""
    if len(arguments) >= 2 and arguments[0] in ("-m", "-c"):
        return ("module" if arguments[0] == "-m" else "code"), arguments[1], arguments[2:]
    if arguments and not arguments[0].startswith("-"):
        return "script", arguments[0], arguments[1:]
    return None


def listen() -> tuple[socket.socket, str]:
    """The server's socket, listening before the server starts (a command started meanwhile waits
    in the backlog), and its name. The name is in the abstract namespace (no file to clean up);
    the server serves only this user."""
    name = f"gdn-review-preload-{os.getpid()}-{secrets.token_hex(8)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(64)
    return listener, name


def server_command(listener_fd: int, parent_fd: int) -> list[str]:
    """The server ends when ``parent_fd``'s other end closes (the process that started it ended)."""
    return [sys.executable, "-m", "gdn_review.common.preloaded", str(listener_fd), str(parent_fd)]


def server_environment(child_env: Mapping[str, str]) -> dict[str, str]:
    """A server's environment for children with ``child_env``: theirs, with this checkout on the
    path (the server starts in their folder; a child's own path is set in the child)."""
    return {**child_env, "PYTHONPATH": str(ROOT)}


def signature(env: Mapping[str, str], cwd: str) -> str:
    """What a preloaded package could read at import, as a short hash: ``env`` outside
    ``CHILD_OWN`` (with ``IMPORT_DEFAULTS``) and the working folder (torch derives two debug
    folders from it). Children with one signature share a server."""
    relevant = sorted(_read_at_import(env).items())
    relevant.append(("(working folder)", os.path.realpath(cwd)))
    return hashlib.sha256(json.dumps(relevant).encode()).hexdigest()[:16]


def servers(env: Mapping[str, str]) -> dict[str, str]:
    """The servers ``env`` hands down: signature -> name."""
    try:
        found = json.loads(env.get(SERVERS) or "{}")
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def start_command(name: str, pid_fd: int, args) -> list[str]:
    return [sys.executable, "-I", "-S", str(START), name, str(pid_fd), *map(str, args[1:])]


def read_pid(fd: int) -> int | None:
    """The forked child's pid, if the command's process has written it (it writes its own where it
    ran a fresh interpreter); the pipe is closed."""
    try:
        if select.select([fd], [], [], 0)[0]:
            text = os.read(fd, 64).decode(errors="replace").strip()
            return int(text) if text.isdigit() else None
        return None
    finally:
        os.close(fd)


def differs(child_env: dict[str, str], server_env: dict[str, str]) -> str | None:
    """The first variable, outside ``CHILD_OWN``, whose value a preloaded package would have read
    differently; None where there is none."""
    child, server = _read_at_import(child_env), _read_at_import(server_env)
    keys = sorted(set(child) | set(server))
    return next((k for k in keys if child.get(k) != server.get(k)), None)


def _read_at_import(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` a preloaded package may read at import: all outside
    ``CHILD_OWN``, with ``IMPORT_DEFAULTS``. ``signature`` and ``differs`` both ask this."""
    return {k: v for k, v in {**IMPORT_DEFAULTS, **env}.items() if not k.startswith(CHILD_OWN)}


# --- the server (a process of its own: python -m gdn_review.common.preloaded NAME FD) ---------


def serve(listener_fd: int, parent_fd: int) -> _Child:
    """Import ``PRELOAD`` and ``PRELOAD_BUILDER_IMPORTS``, then fork a monitor per connection;
    returns only in a forked child, with what it is to run."""
    listener = socket.socket(fileno=listener_fd)
    own_env = dict(os.environ)
    base_path = list(sys.path[1:])  # without the working folder (-m puts it first)
    at = _stdlib_at(base_path)
    if at and base_path[at - 1] == str(ROOT):
        del base_path[at - 1]  # the server's PYTHONPATH, not the children's
    os.environ.update({k: v for k, v in IMPORT_DEFAULTS.items() if k not in own_env})
    for module in (*PRELOAD, *PRELOAD_BUILDER_IMPORTS):
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - not in this environment: the child imports what it needs
            pass
    os.environ.clear()
    os.environ.update(own_env)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    while True:
        ready = select.select([listener, parent_fd], [], [])[0]
        if parent_fd in ready:
            os._exit(0)
        connection, _ = listener.accept()
        _, uid, _ = struct.unpack(
            "3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
        )
        if uid == os.getuid() and os.fork() == 0:
            listener.close()
            os.close(parent_fd)
            return _monitor(connection, own_env, base_path)
        connection.close()


class _Child:
    """What a forked child runs, made to look like a fresh interpreter's start."""

    def __init__(self, request: dict, fds: list[int], base_path: list[str]):
        self.kind, self.target, self.rest = command(request["argv"])
        self.request, self.fds, self.base_path = request, fds, base_path

    def become(self) -> None:
        os.setsid()  # a session of its own, as the command's process has
        for target, fd in enumerate(self.fds):
            os.dup2(fd, target)
        for fd in self.fds:
            if fd > 2:
                os.close(fd)
        os.chdir(self.request["cwd"])
        os.environb.clear()
        os.environb.update(
            {k.encode("latin-1"): v.encode("latin-1") for k, v in self.request["env"].items()}
        )
        ignored = set(self.request.get("ignored", ()))  # by the command's process, at its start
        for signum in signal.valid_signals():
            if signum not in (signal.SIGKILL, signal.SIGSTOP):
                try:
                    signal.signal(signum, signal.SIG_IGN if signum in ignored else signal.SIG_DFL)
                except (OSError, ValueError):
                    pass
        if signal.SIGINT not in ignored:  # what Python itself sets, unless SIGINT came ignored
            signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        first = {
            "module": os.getcwd(),
            "code": "",
            "script": os.path.dirname(os.path.realpath(self.target)),
        }[self.kind]
        from_env = [
            os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
        ]
        # PYTHONPATH goes where a fresh interpreter puts it: after what site's .pth files put
        # in front, before the standard library (its zip is the first entry of the default path).
        at = _stdlib_at(self.base_path)
        before, after = self.base_path[:at], self.base_path[at:]
        sys.path[:] = list(dict.fromkeys([first, *before, *from_env, *after]))
        for name in [n for n in sys.modules if n == "gdn_review" or n.startswith("gdn_review.")]:
            del sys.modules[name]  # the child's own path decides which gdn_review it runs
        importlib.invalidate_caches()  # files written since the server started
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
        random.seed()  # a fresh interpreter's state is its own
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()

    def run(self) -> None:
        """Exceptions and SystemExit go up to the interpreter, which ends as a fresh one would."""
        self.become()
        if self.kind == "module":
            sys.argv = [self.target, *self.rest]
            runpy.run_module(self.target, run_name="__main__", alter_sys=True)
        elif self.kind == "code":
            sys.argv = ["-c", *self.rest]
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(self.target, "<string>", "exec"), main.__dict__)  # noqa: S102
        else:
            sys.argv = [self.target, *self.rest]
            runpy.run_path(self.target, run_name="__main__")

    def main(self) -> NoReturn:
        """``run``, then the end a fresh interpreter has: an uncaught exception shown from the
        command's own frames down, SystemExit's code, non-daemon threads waited for, atexit
        callbacks run. The teardown of torch's modules (seconds) is skipped (``fast_exit``)."""
        try:
            self.run()
            code = 0
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else 0 if done.code is None else 1
            if not isinstance(done.code, (int, type(None))):
                print(done.code, file=sys.stderr)
        except BaseException as error:  # noqa: BLE001 - shown, then the exit a fresh one has
            trace = error.__traceback__
            while trace is not None and trace.tb_frame.f_code.co_filename in _OWN_FRAMES:
                trace = trace.tb_next
            sys.excepthook(type(error), error.with_traceback(trace), trace)
            if isinstance(error, KeyboardInterrupt):  # Python ends killed by SIGINT
                sys.stderr.flush()
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
            code = 1
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
        fast_exit.exit_now(code)


_OWN_FRAMES = {__file__, runpy.__file__, "<frozen runpy>"}


def _stdlib_at(path: list[str]) -> int:
    """Where the default path starts (its first entry is the standard library's zip): PYTHONPATH
    goes just before it, after what site's .pth files put in front."""
    stdlib = f"python{sys.version_info[0]}{sys.version_info[1]}.zip"
    return next((i for i, entry in enumerate(path) if entry.endswith(stdlib)), 0)


def _monitor(connection: socket.socket, server_env: dict, base_path: list[str]) -> _Child:
    """Fork the child, say its pid, wait for its end and say how it ended; kill it if the command's
    process goes first. Returns only in the child."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    try:
        header, fds, _, _ = socket.recv_fds(connection, 8, 3)
        size = struct.unpack("!Q", header)[0]
        data = b""
        while len(data) < size:
            part = connection.recv(size - len(data))
            if not part:
                raise OSError("the command's process closed the connection")
            data += part
        request = json.loads(data)
        env = {
            os.fsdecode(k.encode("latin-1")): os.fsdecode(v.encode("latin-1"))
            for k, v in request["env"].items()
        }
        fresh = command(request["argv"]) is None or differs(env, server_env) is not None
    except (OSError, ValueError, KeyError):
        os._exit(1)
    if fresh or len(fds) != 3:
        _say(connection, "fresh")
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        connection.close()
        return _Child(request, fds, base_path)
    for fd in fds:
        os.close(fd)
    if not _say(connection, f"pid {pid}"):
        _kill(pid)
    pidfd = os.pidfd_open(pid)
    while True:
        ready = select.select([connection, pidfd], [], [])[0]
        if pidfd in ready:
            break
        try:
            gone = not connection.recv(64)
        except OSError:
            gone = True
        if gone:  # the command's process was killed: so is the child
            _kill(pid)
            break
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        _say(connection, f"signal {os.WTERMSIG(status)}")
    else:
        _say(connection, f"exit {os.waitstatus_to_exitcode(status)}")
    os._exit(0)


def _say(connection: socket.socket, line: str) -> bool:
    try:
        connection.sendall(line.encode() + b"\n")
        return True
    except OSError:
        return False


def _kill(pid: int) -> None:
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2])).main()
