"""A Python child of the preload server starts as a fresh interpreter would, and ends as one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gdn_review.common import interrupts, preloaded

ROOT = Path(__file__).resolve().parents[1]

# What a command sees at its start, and whether torch was already there.
PROBE = """
import json, os, sys
print(json.dumps({
    "argv": sys.argv,
    "path": sys.path[:2],
    "cwd": os.getcwd(),
    "name": __name__,
    "variable": os.environ.get("GDN_REVIEW_PROBE"),
    "stdin": sys.stdin.read(),
    "torch_loaded": "torch" in sys.modules,
    "gdn_review_from": sys.modules["gdn_review"].__file__ if "gdn_review" in sys.modules else None,
}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[-1]))
"""


def _server_for(monkeypatch, env=None, cwd=None) -> str:
    """A server for children with ``env`` in ``cwd`` (default: this process's): a signature asked
    for the second time gets one, however many this test worker started already."""
    monkeypatch.setattr(preloaded, "MAX_STARTED", 100)
    env, cwd = os.environ if env is None else env, cwd or os.getcwd()
    interrupts.preload_server(env, cwd)
    return interrupts.preload_server(env, cwd)


def _probe(args, tmp_path, monkeypatch, *, fresh: bool) -> tuple[dict, str, int]:
    monkeypatch.setenv(preloaded.SWITCH, "0" if fresh else "1")
    # In this worker's folder: the session's server serves it (another folder: the configuration
    # test below).
    env = dict(os.environ, GDN_REVIEW_PROBE="set", PYTHONPATH=str(tmp_path / "on-path"))
    if not fresh:
        _server_for(monkeypatch, env)
    done = interrupts.run_child(
        [sys.executable, *args],
        input="from stdin",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return json.loads(done.stdout), done.stderr, done.returncode


@pytest.mark.slow  # starts Python children and servers
@pytest.mark.parametrize("form", ["-c", "-m", "script"])
def test_a_preloaded_child_starts_as_a_fresh_interpreter_and_ends_with_its_exit_code(
    form, tmp_path, monkeypatch
):
    (tmp_path / "on-path").mkdir()
    (tmp_path / "on-path" / "probe_module.py").write_text(PROBE)
    (tmp_path / "probe_script.py").write_text(PROBE)
    args = {
        "-c": ["-c", PROBE, "an argument", "3"],
        "-m": ["-m", "probe_module", "an argument", "3"],
        "script": [str(tmp_path / "probe_script.py"), "an argument", "3"],
    }[form]
    fresh, fresh_err, fresh_code = _probe(args, tmp_path, monkeypatch, fresh=True)
    child, child_err, child_code = _probe(args, tmp_path, monkeypatch, fresh=False)
    assert not fresh["torch_loaded"]
    assert child["torch_loaded"], "the command ran in a fresh interpreter, not the server's child"
    assert child["gdn_review_from"] is None  # the server's gdn_review is not the child's
    for seen in (fresh, child):
        seen.pop("torch_loaded")
    assert child == fresh
    assert (child_err, child_code) == (fresh_err, fresh_code) == ("to stderr\n", 3)


IGNORED = """
import json, signal, sys
print(json.dumps({s.name: signal.getsignal(s) == signal.SIG_IGN
                  for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)}))
print("torch" in sys.modules)
"""


@pytest.mark.slow  # starts Python children and servers
def test_signals_ignored_at_the_commands_start_stay_ignored_in_the_child(monkeypatch):
    """As `nohup` or a script's `cmd &` start a command: a fresh interpreter keeps SIGHUP or SIGINT
    ignored (and no KeyboardInterrupt handler), so does a preloaded child."""
    _server_for(monkeypatch)
    seen = {}
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGHUP)}
    try:
        for fresh in (True, False):
            monkeypatch.setenv(preloaded.SWITCH, "0" if fresh else "1")
            done = interrupts.run_child(
                [sys.executable, "-c", IGNORED], capture_output=True, text=True, timeout=120
            )
            dispositions, torch_loaded = done.stdout.splitlines()
            assert torch_loaded == str(not fresh), "preloaded: the server's child; fresh: not"
            seen[fresh] = json.loads(dispositions)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert seen[True] == {"SIGINT": True, "SIGHUP": True, "SIGTERM": False}
    assert seen[False] == seen[True]


@pytest.mark.slow  # starts Python children and servers
def test_an_uncaught_exception_is_shown_and_ends_the_child_as_a_fresh_interpreter(monkeypatch):
    _server_for(monkeypatch)
    shown = {}
    for fresh in (True, False):
        monkeypatch.setenv(preloaded.SWITCH, "0" if fresh else "1")
        done = interrupts.run_child(
            [sys.executable, "-c", "raise ValueError('from the command')"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        shown[fresh] = (done.returncode, done.stderr)
    assert shown[False] == shown[True]
    assert shown[False][1].endswith("ValueError: from the command\n")


@pytest.mark.slow  # starts Python children and servers
def test_a_child_killed_by_a_signal_ends_its_command_by_the_same_signal(monkeypatch):
    _server_for(monkeypatch)
    done = interrupts.run_child(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
        timeout=120,
    )
    assert done.returncode == -signal.SIGTERM


@pytest.mark.slow  # starts Python children and servers
def test_a_timeout_stops_the_preloaded_child_itself(tmp_path, monkeypatch):
    _server_for(monkeypatch)
    interrupts.run_child([sys.executable, "-c", "pass"], timeout=120)  # the server is up
    pid_file = tmp_path / "pid"
    hang = (
        "import os, pathlib, time\n"
        f"pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
        "time.sleep(120)\n"
    )
    with pytest.raises(subprocess.TimeoutExpired):
        interrupts.run_child([sys.executable, "-c", hang], timeout=5)
    pid = int(pid_file.read_text())
    stat = Path(f"/proc/{pid}/stat")
    assert not stat.exists() or stat.read_text().split(") ")[1][0] in "ZX", (
        f"the child {pid} outlived its command's timeout"
    )


@pytest.mark.slow  # starts Python children and servers
def test_an_environment_a_preloaded_package_reads_at_import_gets_a_server_of_its_own(
    monkeypatch,
):
    assert preloaded.differs({"HOME": "/elsewhere"}, {"HOME": "/root"}) == "HOME"
    assert preloaded.differs({"HF_HUB_OFFLINE": "0"}, {}) == "HF_HUB_OFFLINE"
    assert preloaded.differs({"HF_HUB_OFFLINE": "1"}, {}) is None  # the harness's default
    assert preloaded.differs({"VLLM_TARGET_DEVICE": "cpu", "PYTHONPATH": "/x"}, {}) is None
    here = os.getcwd()
    assert preloaded.signature({"VLLM_TARGET_DEVICE": "cpu"}, here) == preloaded.signature({}, here)
    assert preloaded.signature({"HF_HUB_OFFLINE": "0"}, here) != preloaded.signature({}, here)
    assert preloaded.signature({}, "/") != preloaded.signature({}, here)
    offline = (
        "import sys, huggingface_hub.constants as hub\n"
        "print('torch' in sys.modules, hub.HF_HUB_OFFLINE)\n"
    )
    online = dict(os.environ, HF_HUB_OFFLINE="0", GDN_PRELOAD_TEST=str(os.getpid()))
    monkeypatch.setattr(preloaded, "MAX_STARTED", 100)  # whatever this worker started already
    seen = []
    for _ in range(2):  # the first such command runs fresh, the second starts a server
        done = interrupts.run_child(
            [sys.executable, "-c", offline], capture_output=True, text=True, env=online, timeout=120
        )
        seen.append(done.stdout)
    assert seen == ["False False\n", "True False\n"]  # HF_HUB_OFFLINE read as set, both times
    started_for = interrupts.child_environment(online)  # what a child of this worker is given
    assert preloaded.signature(started_for, here) in preloaded.servers(os.environ)
    # Past the servers a process may start, a command of another environment runs fresh.
    monkeypatch.setattr(preloaded, "MAX_STARTED", 0)
    done = interrupts.run_child(
        [sys.executable, "-c", offline],
        capture_output=True,
        text=True,
        env=dict(os.environ, HF_HUB_OFFLINE="0", GDN_PRELOAD_TEST="another"),
        timeout=120,
    )
    assert done.stdout == "False False\n", done.stderr[-2000:]


def test_options_the_command_process_cannot_pass_on_get_a_fresh_interpreter(monkeypatch):
    monkeypatch.setenv(preloaded.SWITCH, "1")  # whatever this session chose (not slow: off)
    assert preloaded.suits([sys.executable, "-c", "pass"], {"env": {}, "stdout": None})
    assert not preloaded.suits([sys.executable, "-X", "importtime", "-c", "pass"], {})
    assert not preloaded.suits([sys.executable, "-c", "pass"], {"pass_fds": (3,)})
    assert not preloaded.suits(["/usr/bin/python3", "-c", "pass"], {})
    assert not preloaded.suits(f"{sys.executable} -c pass", {})


@pytest.mark.slow  # starts Python children and servers
@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
def test_the_server_closes_a_connection_from_another_user(monkeypatch):
    """Its socket is in the abstract namespace, which any user can reach: it serves this user only
    (a connection of this user's waits for its request instead)."""
    name = _server_for(monkeypatch)
    interrupts.run_child([sys.executable, "-c", "pass"], timeout=120)  # the server is up
    replies = {}
    # The other user first, given long enough for a busy machine: the close ends its wait at
    # once. Then this user's connection, which only waits.
    for user, wait in ((65534, 60), (os.getuid(), 3)):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # whatever happens here, this copy of the test worker ends here
            os.close(read)
            reply = b"no reply"
            try:
                os.setuid(user)
                connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                connection.connect("\0" + name)
                connection.settimeout(wait)
                reply = b"closed" if connection.recv(64) == b"" else b"answered"
            except TimeoutError:
                reply = b"waits for a request"
            except BaseException as error:  # noqa: BLE001 - reported to the test
                reply = repr(error).encode()
            finally:
                os.write(write, reply)
                os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        replies[user] = os.read(read, 200)
        os.close(read)
    assert replies == {os.getuid(): b"waits for a request", 65534: b"closed"}


@pytest.mark.slow
def test_after_importing_vllm_a_preloaded_child_has_the_configuration_a_fresh_one_has(
    monkeypatch, tmp_path
):
    """The preloaded packages read their settings at import: torch's inductor and dynamo
    configuration, huggingface_hub's constants and torch's threads are what a fresh interpreter has
    once the harness has imported vLLM."""
    dump = (
        "import json, os, sys\n"
        "torch_at_start = 'torch' in sys.modules\n"
        "from gdn_review import harness\n"
        "harness.environment()\n"
        "import torch, torch._dynamo.config as dynamo, torch._inductor.config as inductor\n"
        "import huggingface_hub.constants as hub\n"
        "def plain(value):  # a set's repr follows the hash seed\n"
        "    if isinstance(value, (set, frozenset)):\n"
        "        return sorted(map(repr, value))\n"
        "    return repr(value)\n"
        "seen = {f'inductor.{k}': plain(v) for k, v in inductor.get_config_copy().items()}\n"
        "seen.update({f'dynamo.{k}': plain(v) for k, v in dynamo.get_config_copy().items()})\n"
        "seen.update({f'hub.{k}': plain(getattr(hub, k)) for k in dir(hub) if k.isupper()})\n"
        "seen['threads'] = torch.get_num_threads()\n"
        "print(json.dumps([torch_at_start, seen]))\n"
    )
    seen = {}
    for fresh in (True, False):
        monkeypatch.setenv(preloaded.SWITCH, "0" if fresh else "1")
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        if not fresh:  # a folder of its own is a signature of its own: a server for it first
            _server_for(monkeypatch, env, cwd=tmp_path)
        done = interrupts.run_child(  # in another folder: torch derives two folders from it
            [sys.executable, "-c", dump],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        torch_at_start, seen[fresh] = json.loads(done.stdout.splitlines()[-1])
        # Until 2026-12-08 the second child ran fresh too (a new folder's first ask gets no
        # server), so two fresh interpreters were compared.
        assert torch_at_start is not fresh, "the child did not start as the test meant"
    differences = {
        key: (seen[True].get(key), seen[False].get(key))
        for key in set(seen[True]) | set(seen[False])
        if seen[True].get(key) != seen[False].get(key)
    }
    assert len(seen[True]) > 500
    assert not differences, differences


# The builder's imports the server adds (PRELOAD_BUILDER_IMPORTS), each imported in a fresh
# interpreter after PRELOAD, as the server does, with the environment watched. One that wrote a
# variable at import would leave a preloaded child without the change a fresh one makes itself
# (cv2 sets LD_LIBRARY_PATH); one that read a variable a child may set differently (CHILD_OWN)
# would give every child the server's value (torch.utils.cpp_extension reads
# PYTORCH_NVML_BASED_CUDA_CHECK). PRELOAD itself is older than this check: torch._dynamo sets
# TORCHINDUCTOR_CACHE_DIR, which CHILD_OWN lists for that reason.
WATCH_IMPORTS = """
import importlib, json, os
from gdn_review.common import preloaded
os.environ.update({k: v for k, v in preloaded.IMPORT_DEFAULTS.items() if k not in os.environ})
missing = []
def load(name):
    try:
        importlib.import_module(name)
    except ImportError:
        missing.append(name)
for name in preloaded.PRELOAD:
    load(name)
read = []
class Watched(type(os.environ)):
    def __getitem__(self, key):  # get, in, iteration and os.getenv come here too
        read.append(key)
        return super().__getitem__(key)
plain = os.environ
os.environ = Watched(plain._data, plain.encodekey, plain.decodekey, plain.encodevalue,
                     plain.decodevalue)
before = dict(plain._data)
for name in preloaded.PRELOAD_BUILDER_IMPORTS:
    load(name)
after = dict(plain._data)
print(json.dumps({
    "written": sorted(k.decode() for k in before.keys() | after.keys()
                      if before.get(k) != after.get(k)),
    "read": sorted({k for k in read if k.startswith(preloaded.CHILD_OWN)}),
    "missing": missing,
}))
"""


@pytest.mark.slow  # one fresh interpreter
def test_the_builder_imports_the_server_adds_neither_write_nor_read_a_childs_variables():
    done = subprocess.run(
        [sys.executable, "-c", WATCH_IMPORTS],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("GDN_REVIEW_PRELOAD")},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {"written": [], "read": [], "missing": []}, seen


# A process that imported interrupts, then had vLLM's config hooks write two of its variables.
WORKER_SETUP = """
import json, os, sys
os.environ.pop("NUMEXPR_MAX_THREADS", None)
os.environ["LD_LIBRARY_PATH"] = "/started/with"
from gdn_review.common import interrupts
os.environ["NUMEXPR_MAX_THREADS"] = "3"  # what vLLM's CPU platform sets for its own workers
os.environ["LD_LIBRARY_PATH"] = "/started/with:/added/by/cv2"
show = "import json, os, sys; print(json.dumps([os.environ.get(n) for n in sys.argv[1:]]))"
names = ["NUMEXPR_MAX_THREADS", "LD_LIBRARY_PATH"]
seen = {}
for label, env in (("inherited", None), ("chosen", dict(os.environ, NUMEXPR_MAX_THREADS="5"))):
    done = interrupts.run_child([sys.executable, "-c", show, *names], env=env,
                                capture_output=True, text=True, check=True)
    seen[label] = json.loads(done.stdout)
seen["here"] = [os.environ.get(n) for n in names]
print(json.dumps(seen))
"""


def test_a_child_starts_with_the_vllm_worker_setup_its_parent_started_with():
    """What vLLM set in this process for its own workers is not handed to our children (each sets
    its own); a value the caller chose is."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GDN_REVIEW_PRELOAD")}
    done = subprocess.run(
        [sys.executable, "-c", WORKER_SETUP],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**env, preloaded.SWITCH: "0"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen == {
        "inherited": [None, "/started/with"],
        "chosen": ["5", "/started/with"],
        "here": ["3", "/started/with:/added/by/cv2"],
    }
