"""Time the real ``build()`` of a case: the worker side of ``gdn-review bench``.

One worker process per vLLM release (that release's sources first on
``PYTHONPATH``), driven over stdin/stdout with one JSON object a line, so the
parent can interleave releases (A B B A ...) on the same machine. Only
``build()`` is inside the clock (a step case: its whole engine step, every
group's call): the inputs are made before each call. On CUDA the device is
synchronised before and after, so queued kernels are counted.
"""

from __future__ import annotations

import json
import sys
import time

from gdn_review.common.interrupts import hold
from gdn_review.harness.builders import make_builder, new_builder
from gdn_review.harness.case_build import settings_for
from gdn_review.harness.environment import environment, prepare_platform
from gdn_review.harness.inputs import build_arguments
from gdn_review.harness.steps import run_step


def time_build(device: str, case: dict, repeats: int) -> list[int]:
    """Nanoseconds of each of ``repeats`` calls of ``build()`` on ``case`` (of its
    engine step, for a step case: each group's builder its own)."""
    import torch

    settings = settings_for(case, device)
    step = case.get("step")
    if step is not None:
        builders = [new_builder(settings) for _ in range(step.get("groups", 2))]
    else:
        builder = make_builder(settings)
    cuda = device == "cuda"
    samples = []
    for _ in range(repeats):
        kwargs, _, _ = build_arguments(case, settings)
        if cuda:
            torch.cuda.synchronize()
        started = time.perf_counter_ns()
        if step is not None:
            run_step(builders, case, kwargs)
        else:
            builder.build(**kwargs)
        if cuda:
            torch.cuda.synchronize()
        samples.append(time.perf_counter_ns() - started)
    return samples


def serve(stdin=None, stdout=None) -> None:
    """Answer requests until stdin closes: {"cases": {...}, "device": d} once, then
    {"case": id, "repeats": n}."""
    stdin, stdout = stdin or sys.stdin, stdout or sys.stdout
    prepare_platform()
    hold("bench-worker")  # the test hook: vLLM imported, no request answered yet
    cases: dict = {}
    device = "cpu"
    for line in stdin:
        request = json.loads(line)
        if "cases" in request:
            cases, device = request["cases"], request.get("device", "cpu")
            # Warm-up (builders, allocator, first-call paths); the last call's time
            # sizes the rounds.
            warm = {
                case_id: time_build(device, case, 3)[-1]
                for case_id, case in cases.items()
            }
            answer = {"ready": True, "environment": environment(), "warm_ns": warm}
        else:
            answer = {
                "case": request["case"],
                "ns": time_build(device, cases[request["case"]], request["repeats"]),
            }
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()


if __name__ == "__main__":
    # vLLM logs to stdout: the protocol uses a private copy of it, the rest stderr.
    import os

    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    serve(sys.stdin, protocol)
    protocol.flush()
    from gdn_review.common.fast_exit import exit_now

    exit_now(0)
