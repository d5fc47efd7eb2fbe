"""Load an edited copy of a vLLM module in place of the real one, in memory only.

The mutated source is compiled from text and executed into a fresh module
object that replaces the original in ``sys.modules`` (and on its parent
package), so ``make_builder`` picks the mutated builder class the next time it
builds. Nothing is written to disk: the installed file and its bytecode cache
stay as they are. Used by ``gdn-review mutate`` in a forked child, so the
parent process is never mutated.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from gdn_review.harness.builders import make_builder
from gdn_review.harness.environment import prepare_platform


def module_name(relative_path: str) -> str:
    """``vllm/v1/attention/backends/gdn_attn.py`` ->
    ``vllm.v1.attention.backends.gdn_attn``."""
    stem = (
        relative_path[: -len(".py")] if relative_path.endswith(".py") else relative_path
    )
    return stem.replace("/", ".").replace(os.sep, ".")


def target_path(relative_path: str) -> str:
    """Where the loaded vLLM keeps ``relative_path`` (imports vLLM's package, not the
    module)."""
    prepare_platform()
    spec = importlib.util.find_spec(module_name(relative_path))
    if spec is None or not spec.origin:
        raise ImportError(f"the loaded vLLM has no module {module_name(relative_path)}")
    return spec.origin


def compile_source(relative_path: str, source: str):
    """Compile mutated source (raises SyntaxError for a mutant that does not
    compile)."""
    return compile(
        source,
        f"{target_path(relative_path)} (mutated in memory)",
        "exec",
        dont_inherit=True,
    )


def load_mutated(relative_path: str, code) -> None:
    """Execute compiled mutated source as the module and make the builders use it."""
    prepare_platform()
    name = module_name(relative_path)
    # its imports (and parents) are loaded as usual
    original = importlib.import_module(name)
    module = importlib.util.module_from_spec(original.__spec__)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules[name] = original
        raise
    parent, _, leaf = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], leaf, module)
    # builders made from the original class must not be reused
    make_builder.cache_clear()


def single_threaded() -> None:
    """After fork: torch's intra-op thread pool does not survive a fork (a child would
    hang)."""
    import torch

    torch.set_num_threads(1)
