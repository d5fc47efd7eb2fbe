"""Where the releases at hand define a name a case ``needs``, read from their files.

At run time a case whose ``needs`` names something the loaded release lacks is
skipped as "not applicable" (``harness.case_build.skip_what_cannot_run``), which
looks in four places: a field of ``GDNAttentionMetadata``, an attribute or method
of the case's builder (its class and bases), of the backend class whose
``get_builder_cls`` returns that builder (its class and bases), and a module-level
name of the builder's module. Validation looks in the same four places of every
release at hand (the installed vLLM and the release cache, the trees
``kb.builder_family`` scans), with ``ast`` and without importing vLLM, so a name
defined nowhere is a record error and not a skip that reads as "pending".
"""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path

from gdn_review.common import release
from gdn_review.kb.builder_family import GDN_BUILDER_MODULE, scan_tree, trees_at_hand
from gdn_review.kb.checks import GDN_BUILDER

METADATA_CLASS = "GDNAttentionMetadata"


@dataclasses.dataclass(frozen=True)
class Places:
    """The names one release defines in the places a ``needs`` entry is looked up."""

    metadata: frozenset[str]  # GDNAttentionMetadata's fields
    builder: frozenset[str]  # the builder class's attributes and methods, its bases' too
    backend: frozenset[str]  # the backend class's (get_builder_cls returns the builder), bases'
    module: frozenset[str]  # module-level names of the builder's module

    def defines(self, name: str) -> bool:
        return any(
            name in names for names in (self.metadata, self.builder, self.backend, self.module)
        )


@dataclasses.dataclass(frozen=True)
class Lookup:
    """What the releases at hand define for one builder class, and where it looked (for
    messages)."""

    releases: tuple[str, ...]  # "0.32.0", ..., "installed" (empty: none to scan)
    places: tuple[Places, ...]
    backend_names: tuple[str, ...]  # the backend classes found, by name
    module: str  # the builder's module

    def defines(self, name: str) -> bool:
        return any(place.defines(name) for place in self.places)

    def where_looked(self, builder: str) -> str:
        backend = " or ".join(self.backend_names) or "the backend class"
        return (
            f"not a field of {METADATA_CLASS}, an attribute or method of {builder} (or its "
            f"bases), of {backend} (whose get_builder_cls returns it; or its bases), nor a "
            f"module-level name of {self.module}, in {releases_words(self.releases)}"
        )


def _module_file(root: Path, module: str) -> Path | None:
    """The file of ``module`` (``vllm.x.y``) in a release's ``vllm/`` folder, or None."""
    parts = module.split(".")[1:]
    for path in (root.joinpath(*parts).with_suffix(".py"), root.joinpath(*parts, "__init__.py")):
        if parts and path.is_file():
            return path
    return None


@functools.cache
def parsed_module(root: Path, module: str) -> ast.Module | None:
    path = _module_file(root, module)
    if path is None:
        return None
    try:
        return ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError):
        return None


def module_classes(tree: ast.Module) -> dict[str, ast.ClassDef]:
    return {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}


def imported_from(tree: ast.Module, module: str, name: str) -> tuple[str, str] | None:
    """(module, name) that ``module``'s ``from ... import`` binds ``name`` from, or None."""
    return _vllm_imports(tree, module).get(name)


@functools.cache
def _vllm_imports(tree: ast.Module, module: str) -> dict[str, tuple[str, str]]:
    """Every name ``module``'s ``from vllm... import`` binds, with where from (the first binding,
    in ``ast.walk`` order): one walk of the module, not one per name asked (a KB's load asked
    some 180 names, a second of walks)."""
    bound: dict[str, tuple[str, str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        source = node.module or ""
        if node.level:  # relative: from the package of ``module``
            package = module.split(".")[: -node.level]
            source = ".".join(package + ([source] if source else []))
        for alias in node.names:
            if source.startswith("vllm"):
                bound.setdefault(alias.asname or alias.name, (source, alias.name))
    return bound


def expression_name(node: ast.expr) -> str | None:
    """A base class expression's name: ``Base``, ``pkg.Base``, ``Base[Metadata]``."""
    if isinstance(node, ast.Subscript):
        node = node.value
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else None


def _own_names(cls: ast.ClassDef) -> set[str]:
    """What a class body defines, and what its methods assign to ``self``."""
    names: set[str] = set()
    for node in cls.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    for node in ast.walk(cls):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
        ):
            names.add(node.attr)
    return names


def _class_names(root: Path, module: str, name: str, seen: frozenset = frozenset()) -> set[str]:
    """The names class ``name`` of ``module`` has: its own and its bases' (followed through the
    release's imports; a base outside vLLM, such as ``ABC``, adds none)."""
    if (module, name) in seen:
        return set()
    seen = seen | {(module, name)}
    tree = parsed_module(root, module)
    if tree is None:
        return set()
    cls = module_classes(tree).get(name)
    if cls is None:  # re-exported: follow the import
        source = imported_from(tree, module, name)
        return _class_names(root, *source, seen) if source else set()
    names = _own_names(cls)
    for base in cls.bases:
        base_name = expression_name(base)
        if base_name is None:
            continue
        if base_name in module_classes(tree):
            names |= _class_names(root, module, base_name, seen)
        else:
            source = imported_from(tree, module, base_name)
            if source is not None:
                names |= _class_names(root, *source, seen)
    return names


def _returns_name(function: ast.FunctionDef, name: str) -> bool:
    return any(
        isinstance(node, ast.Return)
        and node.value is not None
        and expression_name(node.value) == name
        for node in ast.walk(function)
    )


def backends_of(tree: ast.Module, builder: str) -> list[str]:
    """The classes of a module whose ``get_builder_cls`` returns ``builder``."""
    return [
        cls.name
        for cls in module_classes(tree).values()
        for node in cls.body
        if isinstance(node, ast.FunctionDef)
        and node.name == "get_builder_cls"
        and _returns_name(node, builder)
    ]


def _module_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (imports under ``if TYPE_CHECKING`` left out:
    they are not there at run time)."""
    names: set[str] = set()
    body = list(tree.body)
    while body:
        node = body.pop(0)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.If) and not (
            isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
        ):
            body += node.body + node.orelse
        elif isinstance(node, ast.Try):
            body += node.body + [n for h in node.handlers for n in h.body] + node.orelse
    return names


@functools.cache
def _metadata_fields(root: Path) -> frozenset[str]:
    """The fields of one release's ``GDNAttentionMetadata`` (empty: it has none)."""
    gdn = parsed_module(root, GDN_BUILDER_MODULE)
    metadata = module_classes(gdn).get(METADATA_CLASS) if gdn is not None else None
    if metadata is None:
        return frozenset()
    return frozenset(n.target.id for n in metadata.body if isinstance(n, ast.AnnAssign))


def metadata_fields() -> tuple[tuple[str, ...], frozenset[str]]:
    """(the releases at hand that have ``GDNAttentionMetadata``, every field one of them has)."""
    releases, fields = [], set()
    for name, root in trees_at_hand():
        found = _metadata_fields(root)
        if found:
            releases.append(name)
            fields |= found
    return tuple(releases), frozenset(fields)


@functools.cache
def _places(root: Path, builder: str) -> tuple[Places, tuple[str, ...], str] | None:
    """One release's places for ``builder`` (None: the release does not ship it)."""
    # GDN's own module is known; a subclass's is found by scanning the release's files.
    module = (
        GDN_BUILDER_MODULE if builder == GDN_BUILDER else scan_tree(root).get(builder, (None,))[0]
    )
    tree = parsed_module(root, module) if module else None
    if tree is None:
        return None
    backends = backends_of(tree, builder)
    backend_names = set().union(*(_class_names(root, module, name) for name in backends))
    places = Places(
        metadata=_metadata_fields(root),
        builder=frozenset(_class_names(root, module, builder)),
        backend=frozenset(backend_names),
        module=frozenset(_module_names(tree)),
    )
    return places, tuple(backends), module


def releases_words(releases) -> str:
    """The releases scanned, in words: ``0.28.0, 0.29.0 (release cache) and 0.33.0 (installed)``."""
    cached = [name for name in releases if name != "installed"]
    parts = [f"{', '.join(cached)} (release cache)"] if cached else []
    if "installed" in releases:
        folder = dict(trees_at_hand()).get("installed")
        version = release.of_tree(folder.parent) if folder is not None else None
        parts.append(f"{version} (installed)" if version else "the installed vLLM")
    return " and ".join(parts)


def lookup(builder: str | None) -> Lookup:
    """Where the releases at hand define names for a case of ``builder`` (None: GDN's own)."""
    builder = builder or GDN_BUILDER
    releases, places, backends, module = [], [], [], None
    for name, root in trees_at_hand():
        found = _places(root, builder)
        if found is None:
            continue
        releases.append(name)
        places.append(found[0])
        backends += [name for name in found[1] if name not in backends]
        module = module or found[2]
    return Lookup(tuple(releases), tuple(places), tuple(backends), module or GDN_BUILDER_MODULE)
