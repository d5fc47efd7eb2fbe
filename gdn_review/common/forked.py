"""Work run in forked children: a copy of this process each, ``jobs`` at a time, each with a
timeout.

``mutate`` and ``review`` import vLLM once and then run each mutant (or each
side of a change) in a child forked from that process: the parent is never
changed, and a child that crashes or hangs is the child's problem alone. A
child runs one body (a function returning a JSON-able dict) with its standard
streams sent to /dev/null and writes the body's result to a pipe; the parent
reads the pipes and gives every piece of work one result:

- the body's own dict;
- ``{"status": "error", "reason": ...}``: the body raised (a bug of ours, not of the code under
test);
- ``{"status": "crashed", "reason": "the test process died (signal SIGSEGV)"}``: the child
  ended without a result;
- ``{"status": "timeout", "reason": "no result within 60 s: killed"}``: past ``timeout``,
  the child and every process under it are stopped (``interrupts.stop``).

Each result carries ``duration_s``. Children go through ``interrupts.fork``
(SIGINT is the parent's to act on); an interrupt or any error in the parent
stops every child still running.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import signal
import time
import traceback
from typing import Callable, Iterable

from gdn_review.common import interrupts

CRASHED, TIMEOUT, ERROR = "crashed", "timeout", "error"


@dataclasses.dataclass
class _Child:
    key: object
    pid: int
    fd: int
    started: float
    data: bytearray = dataclasses.field(default_factory=bytearray)


def run(
    work: Iterable[tuple[object, Callable[[], dict]]],
    jobs: int,
    timeout: float,
    on_result: Callable[[object, dict], None],
    prepare: Callable[[], None] = lambda: None,
) -> None:
    """Run each ``(key, body)`` of ``work`` in its own forked child, ``jobs`` at a time.

    ``prepare`` runs first in each child (before its streams are closed), e.g. to keep
    torch to one thread; ``on_result(key, result)`` is called in the parent as each ends.
    """
    pending = list(work)
    running: dict[int, _Child] = {}
    try:
        while pending or running:
            while pending and len(running) < jobs:
                key, body = pending.pop(0)
                child = _start(key, body, prepare)
                running[child.fd] = child
            ready, _, _ = select.select(list(running), [], [], 0.2)
            for fd in ready:
                chunk = os.read(fd, 1 << 16)
                if chunk:
                    running[fd].data.extend(chunk)
                    continue
                child = running.pop(fd)
                os.close(fd)
                on_result(child.key, _ended(child, interrupts.wait(child.pid)))
            now = time.monotonic()
            for fd, child in list(running.items()):
                if now - child.started > timeout:
                    _stop(child)
                    running.pop(fd)
                    reason = f"no result within {timeout:g} s: killed"
                    on_result(
                        child.key,
                        {"status": TIMEOUT, "reason": reason, "duration_s": _seconds(child)},
                    )
    except BaseException:
        for child in running.values():
            _stop(child)
        raise


def _start(key: object, body: Callable[[], dict], prepare: Callable[[], None]) -> _Child:
    read_fd, write_fd = os.pipe()
    pid = interrupts.fork()
    if pid == 0:
        os.close(read_fd)
        _child(body, prepare, write_fd)
    os.close(write_fd)
    return _Child(key, pid, read_fd, time.monotonic())


def _child(body: Callable[[], dict], prepare: Callable[[], None], write_fd: int) -> None:
    """A child's whole life: never returns (``os._exit``), whatever the body does."""
    status = 1
    try:
        prepare()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        try:
            result = body()
        except BaseException as error:  # reported, not raised: the parent decides
            reason = f"{type(error).__name__}: {error}"
            result = {"status": ERROR, "reason": reason, "trace": traceback.format_exc()[-2000:]}
        with os.fdopen(write_fd, "w") as stream:
            json.dump(result, stream)
        status = 0
    finally:
        os._exit(status)


def _stop(child: _Child) -> None:
    interrupts.stop(child.pid)  # with anything the child started
    try:
        os.close(child.fd)
    except OSError:
        pass


def _seconds(child: _Child) -> float:
    return round(time.monotonic() - child.started, 2)


def _ended(child: _Child, status: int) -> dict:
    try:
        result = json.loads(child.data.decode("utf-8"))
    except ValueError:
        result = {"status": CRASHED, "reason": f"the test process died ({how_it_ended(status)})"}
    result["duration_s"] = _seconds(child)
    return result


def how_it_ended(status: int) -> str:
    """A wait status in words: ``signal SIGSEGV``, ``exit status 1``."""
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.WEXITSTATUS(status)}"
