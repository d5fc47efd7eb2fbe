"""What a ``call`` case may name, and which speculation method a case may configure, read from
the releases at hand.

A call case names a declaration of its builder's module: a public module-level function
(``plan_flashinfer_checkpoints``), or a classmethod, staticmethod or class attribute of the
builder class or of the backend class whose ``get_builder_cls`` returns it
(``GDNAttentionBackend.supports_device_cpu_query_lens_mismatch``). The harness
(``harness.declarations``) calls it as the engine does, passing the case's own ``VllmConfig``,
``MambaSpec`` and device to parameters named ``vllm_config``, ``kv_cache_spec`` and
``device``, and the case's ``arguments`` to the rest. Validation finds the declaration in every
release at hand (the installed vLLM and the release cache, ``kb.builder_family.trees_at_hand``)
with ``ast``, without importing vLLM, so a target no release has, an instance method, or a
parameter nothing fills is a record error at its line, not a skip or a ``TypeError`` at run
time. A release without the target reads "not applicable" there; one that inherits it, the
inherited value.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from gdn_review.kb.builder_family import GDN_BUILDER_MODULE, scan_tree, trees_at_hand
from gdn_review.kb.checks import GDN_BUILDER
from gdn_review.kb.release_names import (
    backends_of,
    expression_name,
    imported_from,
    module_classes,
    parsed_module,
    releases_words,
)
from gdn_review.kb.yaml_source import Problems

# Parameters the harness fills from the case (harness.declarations.CASE_ARGUMENTS).
CASE_ARGUMENTS = ("vllm_config", "kv_cache_spec", "device")
# A case's fields that configure what CASE_ARGUMENTS pass: meaningless for a target taking none.
CONFIGURATION_FIELDS = (
    "speculative_tokens",
    "speculative_method",
    "adaptive_verification",
    "cudagraph_mode",
    "mamba_cache_mode",
    "prefix_caching",
    "resolved_prefill_backend",
    "model_runner",
)
SPECULATIVE_MODULE = "vllm.config.speculative"


@dataclasses.dataclass(frozen=True)
class Found:
    """A declaration as one release defines it."""

    kind: str  # "function", "classmethod", "staticmethod", "method", "property", "attribute"
    parameters: tuple[str, ...]  # what a call passes (cls left out)
    required: tuple[str, ...]  # those without a default
    any_keyword: bool  # it takes **kwargs


def _signature(node: ast.FunctionDef, kind: str) -> tuple[tuple[str, ...], tuple[str, ...], bool]:
    args = node.args
    positional = [a.arg for a in args.posonlyargs + args.args]
    if kind in ("classmethod", "method", "property"):
        positional = positional[1:]  # cls or self
    defaults = len(args.defaults)
    required = positional[: len(positional) - defaults] if defaults else list(positional)
    keyword = [a.arg for a in args.kwonlyargs]
    required += [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    return tuple(positional + keyword), tuple(required), args.kwarg is not None


def _function(node: ast.AST, in_class: bool) -> Found | None:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        decorators = {expression_name(d) for d in node.decorator_list}
        kind = "function"
        if in_class:
            kind = next(
                (k for k in ("classmethod", "staticmethod", "property") if k in decorators),
                "method",
            )
        return Found(kind, *_signature(node, kind))
    targets = []
    if isinstance(node, ast.Assign):
        targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        targets = [node.target.id]
    return Found("attribute", (), (), False) if targets and in_class else None


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _member(root: Path, module: str, cls: str, name: str, seen=frozenset()) -> Found | None:
    """``cls.name`` of one release, its own or inherited (followed through the release's
    imports; the nearest base first, as Python's lookup finds it)."""
    if (module, cls) in seen:
        return None
    seen = seen | {(module, cls)}
    tree = parsed_module(root, module)
    node = module_classes(tree).get(cls) if tree is not None else None
    if node is None:
        source = imported_from(tree, module, cls) if tree is not None else None
        return _member(root, *source, name, seen) if source else None
    for item in node.body:
        if name in _names(item):
            return _function(item, in_class=True)
    for base in node.bases:
        base_name = expression_name(base)
        if base_name is None:
            continue
        if base_name in module_classes(tree):
            found = _member(root, module, base_name, name, seen)
        else:
            source = imported_from(tree, module, base_name)
            found = _member(root, source[0], source[1], name, seen) if source else None
        if found is not None:
            return found
    return None


def _in_release(root: Path, builder: str, target: str) -> tuple[Found | None, list[str], str]:
    """(the target as one release defines it or None, that release's backend classes, the
    builder's module)."""
    module = (
        GDN_BUILDER_MODULE if builder == GDN_BUILDER else scan_tree(root).get(builder, (None,))[0]
    )
    tree = parsed_module(root, module) if module else None
    if tree is None:
        return None, [], module or GDN_BUILDER_MODULE
    backends = backends_of(tree, builder)
    owner, _, name = target.rpartition(".")
    if not owner:
        found = next((_function(n, in_class=False) for n in tree.body if name in _names(n)), None)
        return found, backends, module
    if owner != builder and owner not in backends:
        return None, backends, module
    return _member(root, module, owner, name), backends, module


def _kind_problem(field: str, target: str, kind: str) -> str | None:
    if field == "function" and kind == "attribute":
        return f"{target} is a class attribute: read it with `attribute: {target}`"
    if field == "function" and kind in ("method", "property"):
        return (
            f"{target} is an instance {kind}: a call case calls what the engine calls on the "
            "class (a classmethod, staticmethod or module-level function) or reads a class "
            "attribute (`attribute:`); an instance's value is a batch case's expect"
        )
    if field == "attribute" and kind != "attribute":
        return f"{target} is a {kind}, not a class attribute: call it with `function: {target}`"
    return None


def call_target_problems(case) -> Problems:
    """A call case's target and arguments checked against the releases at hand (none: no
    installed vLLM to tell a later release's name from a misspelt one)."""
    problems = Problems()
    call = getattr(case, "call", None)
    if call is None:
        return problems
    field = "function" if call.function is not None else "attribute"
    target, builder = call.target, case.builder or GDN_BUILDER
    owner, _, name = target.rpartition(".")
    releases, found, backends, module = [], [], [], GDN_BUILDER_MODULE
    for release, root in trees_at_hand():
        each, owners, module = _in_release(root, builder, target)
        releases.append(release)
        backends += [b for b in owners if b not in backends]
        if each is not None:
            found.append((release, each))
    if "installed" not in releases:
        return problems
    if not owner and name.startswith("_"):
        problems.add(("call", field), f"{name} is private: a call names a public function")
        return problems
    if not found:
        where = (
            f"a public function of {module}"
            if not owner
            else f"a classmethod, staticmethod or class attribute of {builder} or "
            f"{' or '.join(backends) or 'its backend class'} (or their bases)"
        )
        problems.add(
            ("call", field),
            f"{target!r} is not {where} in {releases_words(releases)}"
            + (
                ""
                if not owner or owner in (builder, *backends)
                else f": {owner} is neither the case's builder class {builder} nor the backend "
                f"class whose get_builder_cls returns it ({', '.join(backends) or 'none found'})"
            ),
        )
        return problems
    for kind in sorted({each.kind for _, each in found}):
        message = _kind_problem(field, target, kind)
        if message:
            problems.add(("call", field), message)
            return problems
    return problems + _argument_problems(case, field, target, found)


def _argument_problems(case, field: str, target: str, found) -> Problems:
    """Every parameter filled (by the case or its arguments), every argument a parameter, and
    configuration fields only where a parameter takes them."""
    problems = Problems()
    given = set(case.call.arguments)
    for release, each in found:
        missing = [p for p in each.required if p not in given and p not in CASE_ARGUMENTS]
        if missing:
            problems.add(
                ("call", "arguments"),
                f"{target} on {release} takes {', '.join(missing)}, which nothing fills: give "
                "them in arguments (the harness itself passes only "
                f"{', '.join(CASE_ARGUMENTS)})",
            )
            break
    known = {p for _, each in found for p in each.parameters}
    if not any(each.any_keyword for _, each in found):
        for name in sorted(given - known):
            problems.add(
                ("call", "arguments", name),
                f"{target} has no parameter {name!r} in any release at hand "
                f"(it takes {', '.join(sorted(known)) or 'none'})",
            )
    if not known & set(CASE_ARGUMENTS):
        stated = [f for f in CONFIGURATION_FIELDS if getattr(case, f, None) is not None]
        if stated:
            takes = "is read" if field == "attribute" else "takes no " + ", ".join(CASE_ARGUMENTS)
            problems.add(
                ("call",),
                f"{target} {takes}: the case's configuration reaches nothing, leave out "
                f"{', '.join(stated)}",
            )
    return problems


def _literal_strings(tree: ast.Module, name: str, seen=frozenset()) -> set[str]:
    """The strings a module's ``name = Literal[...]`` alias admits, aliases inside followed."""
    if name in seen:
        return set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and name in _names(node):
            value = node.value
            break
    else:
        return set()
    items = value.slice if isinstance(value, ast.Subscript) else value
    items = items.elts if isinstance(items, ast.Tuple) else [items]
    strings = set()
    for item in items:
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            strings.add(item.value)
        elif isinstance(item, ast.Name):
            strings |= _literal_strings(tree, item.id, seen | {name})
    return strings


def configurable_methods() -> tuple[tuple[str, ...], set[str]]:
    """(the releases at hand read, every speculation method one of them can configure)."""
    releases, methods = [], set()
    for release, root in trees_at_hand():
        tree = parsed_module(root, SPECULATIVE_MODULE)
        if tree is not None:
            releases.append(release)
            methods |= _literal_strings(tree, "SpeculativeMethod")
    return tuple(releases), methods


def speculative_method_problems(case) -> Problems:
    """A case's speculation method: with a speculative config, one a release at hand has."""
    problems = Problems()
    method = getattr(case, "speculative_method", None)
    if method is None:
        return problems
    if not case.speculative_tokens:
        problems.add(
            ("speculative_method",),
            "a speculation method configures speculative decoding: give speculative_tokens",
        )
    releases, methods = configurable_methods()
    if "installed" in releases and method not in methods:
        problems.add(
            ("speculative_method",),
            f"no release at hand can configure {method!r} ({releases_words(releases)})",
        )
    return problems


def declaration_problems(case) -> Problems:
    """What a case calls (a ``call`` target) and configures (a speculation method) that the
    releases at hand cannot."""
    return call_target_problems(case) + speculative_method_problems(case)
