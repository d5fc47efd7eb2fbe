"""Which steps of the builder path run on this machine: the first thing a bundle does
per release.

A release built against another torch (vLLM 0.33.0 against torch 2.14, the GPU
machine has 2.11) may fail at import, at ``VllmConfig``, at the builder or in
``build()``; pytest would show that as the same error in every test. The probe
runs each step once per device, stops a device at its first failure, and
writes what ran and what did not (with the exception) as JSON, so the evidence
says which part of the path did not run instead of a wall of errors.

    python -m gdn_review.harness.probe CASES.json OUT.json

CASES.json: {"case id": {case}, ...} (the first case is built).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def _step(steps: list, name: str, action) -> bool:
    started = time.perf_counter()
    try:
        detail = action()
    except BaseException as error:  # noqa: BLE001 - any failure is the finding
        frames = traceback.extract_tb(error.__traceback__)
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        steps.append(
            {
                "step": name,
                "ok": False,
                "error": f"{type(error).__name__}: {error}"[:2000],
                "where": where,
            }
        )
        return False
    steps.append(
        {
            "step": name,
            "ok": True,
            "detail": detail,
            "seconds": round(time.perf_counter() - started, 2),
        }
    )
    return True


def _platform() -> str:
    from vllm.platforms import current_platform

    return (
        f"{type(current_platform).__name__} (device type "
        f"{current_platform.device_type})"
    )


def probe(cases: dict) -> dict:
    from gdn_review.harness.environment import (
        device_skip_reason,
        environment,
        prepare_platform,
    )

    prepare_platform()
    steps: list = []
    result: dict = {"steps": steps, "devices": {}}
    if not _step(steps, "import torch", lambda: __import__("torch").__version__):
        return result
    if not _step(steps, "import vllm", lambda: __import__("vllm").__version__):
        return result
    # vLLM picks its platform on first use; the CUDA one imports compiled kernels.
    if not _step(
        steps, f"vLLM platform ({os.environ.get('VLLM_TARGET_DEVICE')})", _platform
    ):
        return result

    def read_environment() -> str:
        result["environment"] = environment()
        return "read"

    _step(steps, "environment", read_environment)
    case_id, case = next(iter(cases.items()))
    for device in ("cpu", "cuda"):
        skip = device_skip_reason(device)
        device_steps: list = []
        result["devices"][device] = {
            "skipped": skip,
            "steps": device_steps,
            "case": case_id,
        }
        if skip:
            continue
        from gdn_review.harness.builders import make_builder
        from gdn_review.harness.case_build import build_case, settings_for

        if not _step(
            device_steps,
            "VllmConfig and builder",
            lambda device=device: (
                type(make_builder(settings_for(case, device))).__name__
            ),
        ):
            continue
        if not _step(
            device_steps,
            "build()",
            lambda device=device: sorted(build_case(device, case).metadata)[:3],
        ):
            continue
        _step(
            device_steps,
            "build() without op counting",
            lambda device=device: build_case(device, case, count_ops=False).rows,
        )
    return result


def main(argv: list[str]) -> int:
    cases_path, out_path = argv
    with open(cases_path, encoding="utf-8") as handle:
        cases = json.load(handle)
    result = probe(cases)
    with open(out_path, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1, sort_keys=True, default=str)
        handle.write("\n")
    failed = [s for s in result["steps"] if not s["ok"]] + [
        s for d in result["devices"].values() for s in d["steps"] if not s["ok"]
    ]
    return 1 if failed else 0


if __name__ == "__main__":
    from gdn_review.common.fast_exit import exit_now

    exit_now(main(sys.argv[1:]))
