"""Load an edited copy of a vLLM module in place of the real one, in memory only.

The mutated source is compiled from text and executed into a fresh module
object that replaces the original in ``sys.modules`` (and on its parent
package), so ``make_builder`` picks the mutated builder class the next time it
builds. Nothing is written to disk: the installed file and its bytecode cache
stay as they are. Used by ``gdn-review mutate`` in a forked child, so the
parent process is never mutated.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys

from gdn_review.harness.builders import engine_config, make_builder
from gdn_review.harness.environment import prepare_platform

# The modules this process runs mutated (``load_mutated``): only a throwaway child does.
_MUTATED: list[str] = []


def runs_a_mutant() -> bool:
    """Whether this process has loaded a mutant: a child that runs a few tests, then
    ends."""
    return bool(_MUTATED)


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
    forgotten = _forget_registrations(name)
    module = importlib.util.module_from_spec(original.__spec__)
    sys.modules[name] = module
    try:
        with _ops_registered_once():
            exec(code, module.__dict__)
    except BaseException:
        sys.modules[name] = original
        for registry, key, value in forgotten:
            registry[key] = value
        raise
    parent, _, leaf = name.rpartition(".")
    if parent in sys.modules:
        setattr(sys.modules[parent], leaf, module)
    # builders (and configs) made from the original modules must not be reused
    make_builder.cache_clear()
    engine_config.cache_clear()
    _MUTATED.append(name)


def _forget_registrations(name: str) -> list[tuple[dict, str, object]]:
    """Forget the custom ops and pluggable layers module ``name`` registered when it was
    imported (vLLM's ``op_registry`` asserts each name is registered once, so the copy
    could not register them again): as a fresh process imports the edited module, with
    none of them registered yet. Returns what was forgotten."""
    forgotten = []
    for registry in registries():
        for key, value in list(registry.items()):
            if getattr(value, "__module__", None) == name:
                forgotten.append((registry, key, registry.pop(key)))
    return forgotten


# Module -> its registries (``registries``): each loaded module is looked at once per
# process, and a forked child inherits what its parent looked at. Scanning every module
# in each child was a fifth of a mutant's time there (cProfile, 513 children), most of
# it writing to pages the child shares with its parent (even a loop that only reads a
# module raises its reference count): a child whose modules are the parent's touches
# none of them. A module replaced under its name while the count stays (a mutant loaded
# in place) is not looked at again: the registries are vLLM's own modules', which hold
# no builder.
_SCANNED: dict[str, tuple[object, list[dict]]] = {}
_REGISTRIES: list[dict] = []


def registries() -> list[dict]:
    """The custom-op and pluggable-layer registries (module-level ``op_registry`` and
    ``op_registry_oot`` dicts) of the loaded modules: those loaded since the last call
    are looked at, the rest were (call it before forking: each child starts scanned)."""
    if len(sys.modules) != len(_SCANNED):
        _scan()
    return _REGISTRIES


def _scan() -> None:
    for module_name, loaded in list(sys.modules.items()):
        seen = _SCANNED.get(module_name)
        if seen is not None and seen[0] is loaded:
            continue
        # A module's own names only: asked through getattr, a lazy module
        # (transformers') imports hundreds of modules to answer, 1.4 s of a mutant's
        # 1.8 s in its child.
        names = getattr(loaded, "__dict__", None)
        found = [
            registry
            for registry in (
                names.get(attribute) if isinstance(names, dict) else None
                for attribute in ("op_registry", "op_registry_oot")
            )
            if isinstance(registry, dict)
        ]
        _SCANNED[module_name] = (loaded, found)
    for gone in _SCANNED.keys() - sys.modules.keys():
        del _SCANNED[gone]
    _REGISTRIES[:] = [registry for _, found in _SCANNED.values() for registry in found]


@contextlib.contextmanager
def _ops_registered_once():
    """While the edited copy executes: a torch custom op it registers that the original
    already registered (torch refuses a second definition) keeps the original's. Those
    ops are the layer's kernels, which no check calls on CPU; a mutant inside one reads
    unreached, never killed."""
    try:
        import vllm.utils.torch_utils as torch_utils
    except ImportError:
        yield
        return
    register = getattr(torch_utils, "direct_register_custom_op", None)
    if register is None:
        yield
        return

    def once(op_name, op_func, *args, target_lib=None, **kwargs):
        import torch

        namespace = getattr(target_lib or torch_utils.vllm_lib, "ns", "vllm")
        if hasattr(getattr(torch.ops, namespace), op_name):
            return None
        return register(op_name, op_func, *args, target_lib=target_lib, **kwargs)

    torch_utils.direct_register_custom_op = once
    try:
        yield
    finally:
        torch_utils.direct_register_custom_op = register


def loads_unmutated(relative_path: str) -> bool:
    """Whether the unmutated file loads in place as a mutant is loaded (if not, a mutant
    that does not load says nothing about the tests)."""
    with open(target_path(relative_path), encoding="utf-8") as handle:
        code = compile_source(relative_path, handle.read())
    try:
        load_mutated(relative_path, code)
    except Exception:
        return False
    return True


def single_threaded() -> None:
    """After fork: torch's intra-op thread pool does not survive a fork (a child would
    hang)."""
    import torch

    torch.set_num_threads(1)
