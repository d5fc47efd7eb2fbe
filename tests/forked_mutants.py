"""Run one pytest module under several edited copies of gdn_attn.py, vLLM imported once.

A fresh interpreter per mutant costs the vLLM import and the model configs
(10-25 s here) every time. Instead one interpreter imports vLLM, runs the
module once unmutated (it must pass: a kill then means something, and the
configs are made once), then forks a child per mutant. A child compiles the
edited source into a new module in ``sys.modules`` (the installed file is never
touched), drops the builders made from the original class, runs pytest on the
module and reports its exit code and output. ``gdn-review mutate`` works the
same way; tests/test_mutate.py compares its verdicts with fresh processes'.

The runner script uses only the standard library, torch, vLLM and pytest, so it
also serves modules that must run without gdn-review (the export's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gdn_review.common import interrupts

SCRIPT = r"""
import importlib.abc, importlib.util, json, os, sys

settings = json.loads(sys.argv[1])
if settings["refuse_gdn_review"]:
    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "gdn_review":
                raise ModuleNotFoundError("the exported module must not need " + name)
            return None

    sys.meta_path.insert(0, Refuse())
    sys.modules.pop("gdn_review", None)

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ["CUDA_VISIBLE_DEVICES"] = ""  # forking after CUDA is initialised is unsafe
name = "vllm.v1.attention.backends.gdn_attn"
for module in settings["preload"] + [name]:
    importlib.import_module(module)
import gc
import pytest
import torch

spec = importlib.util.find_spec(name)
original = open(spec.origin, encoding="utf-8").read()
import time

started = time.monotonic()
code = int(pytest.main(settings["baseline_args"] or settings["pytest_args"]))
sys.stdout.flush()
results = {"(baseline)": {"returncode": code, "seconds": time.monotonic() - started}}
gc.collect()
gc.freeze()  # what the baseline made is shared with every child: keep the collector off it
for ident, edits in settings["mutants"].items():
    source = original
    for find, replace, count in edits:
        applies = source.count(find) == count
        assert applies, f"{ident}: edit does not apply {count} time(s): {find!r}"
        source = source.replace(find, replace)
    out = os.path.join(settings["scratch"], ident + ".out")
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            torch.set_num_threads(1)  # torch's thread pool does not survive a fork
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            parent, _, leaf = name.rpartition(".")
            setattr(sys.modules[parent], leaf, module)
            exec(compile(source, spec.origin, "exec"), module.__dict__)
            for holder, function in settings["clear"]:  # builders of the original class
                getattr(sys.modules[holder], function).cache_clear()
            code = int(pytest.main(settings["pytest_args"]))
            sys.stdout.flush()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    printed = open(out, encoding="utf-8", errors="replace").read()
    results[ident] = {"returncode": code, "stdout": printed}
json.dump(results, open(settings["result"], "w", encoding="utf-8"))
"""


# 9 parameters: each is one setting of SCRIPT's run, and the callers name them by keyword.
def run_mutants(
    mutants: dict[str, list[list]],
    pytest_args: list[str],
    cwd: Path,
    scratch: Path,
    env: dict | None = None,
    preload: tuple[str, ...] = (),
    clear: tuple[tuple[str, str], ...] = (),
    baseline_args: list[str] | None = None,
    refuse_gdn_review: bool = False,
) -> dict[str, dict]:
    """mutant id -> {returncode, stdout} of pytest over ``pytest_args`` with that mutant's
    edits ([find, replace, count] each) applied to vLLM's gdn_attn.py; "(baseline)" is the
    unmutated run (over ``baseline_args`` when given), with its seconds. ``clear`` names the cached
    builder factories (module, function) to empty
    in each child, as ``gdn-review mutate`` does."""
    result = scratch / "results.json"
    settings = {
        "mutants": mutants,
        "pytest_args": pytest_args,
        "scratch": str(scratch),
        "result": str(result),
        "preload": list(preload),
        "clear": [list(c) for c in clear],
        "refuse_gdn_review": refuse_gdn_review,
        "baseline_args": baseline_args,
    }
    done = interrupts.run_child(
        [sys.executable, "-c", SCRIPT, json.dumps(settings)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,  # the baseline and every mutant: a vLLM import and a few minutes of tests
    )
    if not result.exists():
        raise RuntimeError(
            "the mutant runner stopped (exit "
            f"{done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-3000:]}"
        )
    results = json.loads(result.read_text(encoding="utf-8"))
    results["(baseline)"]["stdout"] = done.stdout  # the children wrote theirs to files
    return results
