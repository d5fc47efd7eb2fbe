"""Every adaptation of the harness to a vLLM release's platform and API: where, why it
is sound.

An adaptation changes how the harness *sets up* a release (never ``build()`` nor any
code under test): where the release refuses this machine for a reason that does not
concern the builder (``X86_CPU_WITHOUT_TRITON``), or where its API has no place for
something the harness passes (``PREFIX_CACHING_UNRESOLVED``,
``METADATA_WITHOUT_ROW_FACTS``). Each one names the releases it applies to and its
reason; the evidence lists those in force (``in_force``), and every report shows them.
``GDN_REVIEW_NO_RELEASE_ADAPTATIONS=1`` switches the platform's off: the release then
shows what it does unadapted (its checks read "could not run", with vLLM's message).
A field a case sets that the release does not have is never dropped (``NotInRelease``):
the case could not run, rather than run in another configuration.

``gdn-review export`` copies this file into each exported module, so it imports only
the standard library (and vLLM inside the functions), and what the export copies too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

from gdn_review.common.vocabulary import SkipKind
from gdn_review.harness.origin import skip

# Set to 1: no adaptation applies (a release runs as it is, or could not run).
SWITCH_OFF = "GDN_REVIEW_NO_RELEASE_ADAPTATIONS"


@dataclasses.dataclass(frozen=True)
class Adaptation:
    name: str
    releases: str  # in words: "0.34.0 on", "before 0.32.0"
    what: str
    reason: str
    # The first release it applies to (and every later one); None: found by probing
    # the loaded release's API.
    first_release: str | None = None


X86_CPU_WITHOUT_TRITON = Adaptation(
    name="x86_cpu_without_triton",
    releases="0.34.0 on",
    first_release="0.34.0",
    what=(
        "while the harness makes its VllmConfig on the CPU platform of an x86 machine, "
        "vllm.triton_utils.HAS_TRITON reads True (False again once the config is made, "
        "also in the modules first imported meanwhile)"
    ),
    reason=(
        "vLLM's CPU platform refuses x86 without Triton's CPU backend (triton-cpu) "
        "in check_and_update_config ('vLLM on x86 CPUs requires Triton "
        "(triton-cpu).'), for its model runner; the metadata builder launches no "
        "Triton kernel on CPU, and 0.33.0 only warned there"
    ),
)
PREFIX_CACHING_UNRESOLVED = Adaptation(
    name="prefix_caching_unresolved",
    releases="before 0.32.0 (CacheConfig without hash_block_size)",
    what=(
        "a case's prefix caching in align mode sets mamba_cache_mode 'align' and "
        "enable_prefix_caching, not hash_block_size nor cache_hit_alignment_tokens"
    ),
    reason=(
        "the release's CacheConfig has neither field (0.32.0 added them, with prefill "
        "checkpoints); its engine resolved prefix caching without them, so the builder "
        "is configured as that engine configured it"
    ),
)
METADATA_WITHOUT_ROW_FACTS = Adaptation(
    name="metadata_without_row_facts",
    releases="before 0.20.0 (CommonAttentionMetadata without them)",
    what=(
        "the rows' is_prefilling or seq_lens_cpu_upper_bound (those the class lacks) "
        "not passed to CommonAttentionMetadata"
    ),
    reason=(
        "the release's CommonAttentionMetadata has no such field: its runners sent "
        "none and its builder reads none (a case stating host lengths there is not "
        "applicable)"
    ),
)
ADAPTATIONS = (
    X86_CPU_WITHOUT_TRITON,
    PREFIX_CACHING_UNRESOLVED,
    METADATA_WITHOUT_ROW_FACTS,
)
# build()'s inputs that carry the rows' own facts, each a field of
# CommonAttentionMetadata from some release on (METADATA_WITHOUT_ROW_FACTS).
ROW_FACT_FIELDS = ("is_prefilling", "seq_lens_cpu_upper_bound")
# The engine's prefix-caching resolution (PREFIX_CACHING_UNRESOLVED).
PREFIX_CACHING_FIELDS = ("hash_block_size", "cache_hit_alignment_tokens")


def switched_off() -> bool:
    return os.environ.get(SWITCH_OFF) == "1"


def _release_tuple(version: str) -> tuple[int, ...]:
    numbers = []
    for part in version.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        numbers.append(int(digits) if digits else 0)
    return tuple(numbers)


def _applies(adaptation: Adaptation, version: str) -> bool:
    return not switched_off() and _release_tuple(version) >= _release_tuple(
        adaptation.first_release
    )


def _x86_cpu_without_triton() -> bool:
    """The loaded vLLM's platform is its CPU one on x86 and finds no Triton."""
    import platform

    import vllm.triton_utils
    from vllm.platforms import current_platform

    machine = platform.machine().lower()
    return (
        current_platform.is_cpu()
        and machine in ("x86_64", "amd64", "i386", "i686")
        and not vllm.triton_utils.HAS_TRITON
    )


def _missing_fields(cls, names) -> list[str]:
    fields = {field.name for field in dataclasses.fields(cls)}
    return [name for name in names if name not in fields]


def in_force() -> list[dict]:
    """The adaptations that apply to the loaded release on this machine (plain data)."""
    import vllm
    from vllm.config import CacheConfig
    from vllm.v1.attention.backend import CommonAttentionMetadata

    found = []
    if _applies(X86_CPU_WITHOUT_TRITON, vllm.__version__) and _x86_cpu_without_triton():
        found.append(X86_CPU_WITHOUT_TRITON)
    if _missing_fields(CacheConfig, PREFIX_CACHING_FIELDS):
        found.append(PREFIX_CACHING_UNRESOLVED)
    missing = _missing_fields(CommonAttentionMetadata, ROW_FACT_FIELDS)
    if missing:  # 0.19.0 lacks one of them, 0.17.0 and 0.18.0 both
        found.append(
            dataclasses.replace(
                METADATA_WITHOUT_ROW_FACTS,
                what=f"the rows' {' and '.join(missing)} not passed to "
                "CommonAttentionMetadata",
            )
        )
    return [dataclasses.asdict(adaptation) for adaptation in found]


def resolve_prefix_caching(cache_config, hash_block_size: int, alignment: int) -> None:
    """The engine's resolution of prefix caching (EngineCore, then the worker copies it
    into the cache config), where the release has it (PREFIX_CACHING_UNRESOLVED)."""
    if _missing_fields(type(cache_config), PREFIX_CACHING_FIELDS):
        return
    cache_config.hash_block_size = hash_block_size
    cache_config.cache_hit_alignment_tokens = alignment


# Where vLLM resolves GDN's prefill backend (defined in the layer's module; gdn_attn
# imports it by name, so both names are replaced).
PREFILL_BACKEND_RESOLVER = "_resolve_gdn_prefill_backend"
RESOLVER_MODULES = (
    "vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn",
    "vllm.v1.attention.backends.gdn_attn",
)


def prefill_backend_resolvers() -> list:
    """The modules of the loaded release that hold vLLM's prefill-backend resolver;
    ``NotInRelease`` where none does: a case that asks for the backend a GPU server
    resolves cannot have it."""
    import importlib

    found = []
    for name in RESOLVER_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(module, PREFILL_BACKEND_RESOLVER):
            found.append(module)
    if not found:
        asked = f"{PREFILL_BACKEND_RESOLVER} (resolved_prefill_backend)"
        _not_in_release("GDN layer module", [asked])
    return found


@contextlib.contextmanager
def making_config():
    """While the harness makes a VllmConfig: the adaptations of that step in force."""
    import vllm

    if not (
        _applies(X86_CPU_WITHOUT_TRITON, vllm.__version__) and _x86_cpu_without_triton()
    ):
        yield
        return
    import sys

    import vllm.triton_utils

    # How many modules were loaded: those imported meanwhile come after them (a dict
    # keeps its insertion order), and a set of every name per config cost a millisecond.
    before = len(sys.modules)
    # vllm/platforms/cpu.py reads it at call time (from vllm.triton_utils import ...).
    vllm.triton_utils.HAS_TRITON = True
    try:
        yield
    finally:
        vllm.triton_utils.HAS_TRITON = False
        # A module first imported meanwhile copied True (from vllm.triton_utils
        # import HAS_TRITON), e.g. 0.34.0's jit_warmup_triton_helper: its decorators
        # would then reach triton.runtime, which the placeholder has not, once the
        # builder imports its kernels.
        for module in list(sys.modules.values())[before:]:
            names = getattr(module, "__dict__", None)  # getattr(module, ...) may import
            if isinstance(names, dict) and names.get("HAS_TRITON") is True:
                module.HAS_TRITON = False


def model_runner_env(runner: str | None) -> tuple[str, str] | None:
    """How the case's ``model_runner`` is chosen on the loaded release: the environment
    variable and its value, or None where the release has one runner only. A release
    without the one asked skips as not applicable (vLLM 0.34.0 removed model runner V1:
    its gpu_model_runner.py is gone, VLLM_USE_V2_MODEL_RUNNER is no longer read)."""
    if runner is None:
        return None
    import vllm
    import vllm.envs

    if "VLLM_USE_V2_MODEL_RUNNER" in vllm.envs.environment_variables:
        return "VLLM_USE_V2_MODEL_RUNNER", "1" if runner == "v2" else "0"
    if runner == "v2":
        return None
    skip(
        SkipKind.REFUSED,
        f"not applicable: vLLM {vllm.__version__} has no model runner V1 (removed in "
        "0.34.0: VLLM_USE_V2_MODEL_RUNNER is no longer read; V2 is the only runner)",
    )


class NotInRelease(TypeError):
    """The loaded release has no such field: a case that sets it would run elsewise."""


def accepted_kwargs(cls, asked=(), **kwargs):
    """The keyword arguments of ``kwargs`` that this release's ``cls`` accepts.

    The harness's own defaults (``kwargs`` not in ``asked``) are dropped where a
    release does not take them; a field the case sets (``asked``) is never dropped:
    ``NotInRelease`` names it (renamed or removed), so the case could not run rather
    than run in another configuration.
    """
    import inspect

    try:
        parameters = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return kwargs
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return kwargs
    missing = sorted(
        name for name in asked if name in kwargs and name not in parameters
    )
    if missing:
        _not_in_release(cls.__name__, missing)
    return {name: value for name, value in kwargs.items() if name in parameters}


def set_field(owner, name: str, value) -> None:
    """``owner.name = value`` where the release's config has that field; else
    ``NotInRelease`` (setting it would add an attribute vLLM never reads)."""
    if not hasattr(owner, name):
        _not_in_release(type(owner).__name__, [name])
    setattr(owner, name, value)


def _not_in_release(owner: str, names: list[str]) -> None:
    import vllm

    raise NotInRelease(
        f"vLLM {vllm.__version__}'s {owner} has no {', '.join(names)}, which the "
        "case sets (renamed or removed in this release?): run as it is, the case "
        "would check another configuration"
    )
