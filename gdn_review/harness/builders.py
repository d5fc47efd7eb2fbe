"""A real GDNAttentionMetadataBuilder from a real VllmConfig.

The model is a tiny hybrid (Qwen3-Next) config written to a temp folder as
``config.json`` (``tiny_models``): no weights are loaded, only the config is
read (by vLLM, through ``transformers``). Constructor arguments that differ between vLLM
releases are passed only where the installed release accepts them; ``build()``
itself is never re-implemented.

``gdn-review export`` copies these functions verbatim into standalone test
modules (stdlib, torch and vLLM imports only), so they must stay free of
gdn-review imports other than each other and ``prepare_platform``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os

import torch

from gdn_review.common.vocabulary import SkipKind
from gdn_review.harness.adaptations import (
    accepted_kwargs,
    making_config,
    model_runner_env,
    prefill_backend_resolvers,
    resolve_prefix_caching,
    set_field,
)
from gdn_review.harness.environment import prepare_platform
from gdn_review.harness.origin import setting_up, skip, under_test
from gdn_review.harness.tiny_models import model_config, speculative_config


@dataclasses.dataclass(frozen=True)
class BuilderSettings:
    """What a case needs of the builder: device, speculative and scenario config.

    ``None`` leaves a setting as the VllmConfig makes it (eager, no capture size
    limit, the model's mamba cache mode, the release's default prefill backend).
    """

    device: str = "cpu"
    speculative_tokens: int | None = None  # None: no speculative config at all
    max_num_seqs: int = 8
    max_model_len: int = 256
    block_size: int = 16
    cudagraph_mode: str | None = None  # a CUDAGraphMode name, e.g. "FULL_AND_PIECEWISE"
    mamba_cache_mode: str | None = None  # "none" or "align"
    max_cudagraph_capture_size: int | None = None
    prefill_backend: str | None = None  # additional_config["gdn_prefill_backend"]
    # The builder as a GPU server configures it (None: as this machine resolves
    # it): the prefill backend vLLM's resolver returns there (made to return it
    # off CUDA),
    resolved_prefill_backend: str | None = None
    # prefix caching in align mode as the engine resolves it: (hash_block_size,
    # cache_hit_alignment_tokens, num_prefill_checkpoint_blocks,
    # prefill_checkpoint_alignment),
    prefix_caching: tuple[int, int, int, int | None] | None = None
    # and the model runner ("v1", "v2": VLLM_USE_V2_MODEL_RUNNER meanwhile).
    model_runner: str | None = None
    # The builder class: an in-tree subclass of GDNAttentionMetadataBuilder that the
    # loaded release ships (harness.family finds them); None: GDN's own.
    builder: str | None = None
    # A subclass's own configuration: additional_config["kda_prefill_backend"],
    kda_prefill_backend: str | None = None
    # and cache_config.use_kda_recoverssm (derived by vLLM; set after the config).
    use_kda_recoverssm: bool | None = None
    # speculative_config.enable_adaptive_verification (None: the config's default).
    adaptive_verification: bool | None = None
    # speculative_config.method (None: ngram; tiny_models.SPECULATIVE_METHODS).
    speculative_method: str | None = None

    @property
    def block_table_columns(self) -> int:
        # cdiv(max_model_len, block_size) columns, as the runner allocates them;
        # never fewer than the 1 + k state slots a speculative row reads.
        columns = -(-self.max_model_len // self.block_size)
        return max(columns, 1 + (self.speculative_tokens or 0))


def _accepted_kwargs(cls, asked=(), **kwargs):
    """Keep only the keyword arguments this release's ``cls`` accepts; one of ``asked``
    (a field the case sets) that it does not accept raises (adaptations.py)."""
    return accepted_kwargs(cls, asked, **kwargs)


def make_vllm_config(settings: BuilderSettings):
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig

    target = model_config(settings.max_model_len)
    speculative = None
    if settings.speculative_tokens is not None:
        speculative = speculative_config(
            settings.speculative_method, settings.speculative_tokens, target
        )
    scheduler = SchedulerConfig(
        **_accepted_kwargs(
            SchedulerConfig,
            ("max_num_seqs",),
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=max(2048, settings.max_model_len),
            max_model_len=settings.max_model_len,
            is_encoder_decoder=False,
        )
    )
    additional = {}
    if settings.prefill_backend is not None:
        additional["gdn_prefill_backend"] = settings.prefill_backend
    if settings.kda_prefill_backend is not None:
        additional["kda_prefill_backend"] = settings.kda_prefill_backend
    # A release's platform may refuse this machine for its runner (adaptations.py).
    with making_config():
        config = VllmConfig(
            model_config=target,
            # vLLM's CPU platform asserts a cpu device config. Where the builder's
            # tensors go to CUDA under it (CUDA platform unavailable: a bundle on a
            # GPU machine), the config says cpu and the builder gets the device.
            device_config=DeviceConfig(
                device="cpu"
                if os.environ.get("VLLM_TARGET_DEVICE") == "cpu"
                else settings.device
            ),
            cache_config=CacheConfig(
                **_accepted_kwargs(
                    CacheConfig,
                    ("block_size", "mamba_cache_mode", "enable_prefix_caching"),
                    block_size=settings.block_size,
                    **(
                        {"mamba_cache_mode": "align", "enable_prefix_caching": True}
                        if settings.prefix_caching is not None
                        else {}
                    ),
                )
            ),
            scheduler_config=scheduler,
            speculative_config=speculative,
            **_accepted_kwargs(
                VllmConfig,
                ("additional_config",) if additional else (),
                additional_config=additional,
            ),
        )
    _set_after_config(config, speculative, settings)
    return config


def _set_after_config(config, speculative, settings: BuilderSettings) -> None:
    """What the case sets once the config is made, as vLLM's own CPU tests of the
    builder do: made with them, the eager model config would turn a requested graph
    mode back into NONE, and the engine resolves prefix caching only later.
    ``speculative``: the config's speculative config, as it was made."""
    if settings.cudagraph_mode is not None:
        from vllm.config import CUDAGraphMode

        config.compilation_config.cudagraph_mode = CUDAGraphMode[
            settings.cudagraph_mode
        ]
    if settings.max_cudagraph_capture_size is not None:
        compilation = config.compilation_config
        compilation.max_cudagraph_capture_size = settings.max_cudagraph_capture_size
    if settings.mamba_cache_mode is not None:
        set_field(config.cache_config, "mamba_cache_mode", settings.mamba_cache_mode)
    if settings.use_kda_recoverssm is not None:
        set_field(
            config.cache_config, "use_kda_recoverssm", settings.use_kda_recoverssm
        )
    if settings.adaptive_verification is not None and speculative is not None:
        # vLLM's check (V2 runner, FULL graphs) reads the graph mode the eager
        # model config has turned back into NONE by then.
        set_field(
            speculative, "enable_adaptive_verification", settings.adaptive_verification
        )
    if settings.prefix_caching is not None:
        # The engine resolves these after the config is made (EngineCore, then the
        # worker copies them into the cache config); a bare VllmConfig leaves them None.
        hash_block_size, alignment_tokens, _, _ = settings.prefix_caching
        set_field(config.cache_config, "mamba_cache_mode", "align")
        # Where the release resolves them (adaptations.PREFIX_CACHING_UNRESOLVED).
        resolve_prefix_caching(config.cache_config, hash_block_size, alignment_tokens)


def _vllm_platform_is_cuda() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cuda()


@contextlib.contextmanager
def as_on_server(settings: BuilderSettings):
    """While the builder is constructed: vLLM's own resolver returns the case's prefill
    backend (off vLLM's CUDA platform; on it vLLM resolves it with no override), and the
    model runner is the case's. The builder's __init__ then derives its own attributes
    from them."""
    runner = model_runner_env(settings.model_runner)
    saved_runner = os.environ.get(runner[0]) if runner else None
    if runner is not None:
        os.environ[runner[0]] = runner[1]
    patched = []
    backend = settings.resolved_prefill_backend
    # vLLM's resolver answers for vLLM's platform, not the tensors' device: on its CPU
    # platform it says "triton" also beside CUDA tensors (the first H200 run).
    if backend is not None and not _vllm_platform_is_cuda():
        for module in prefill_backend_resolvers():
            patched.append((module, module._resolve_gdn_prefill_backend))
            module._resolve_gdn_prefill_backend = lambda config: (backend, backend)
    try:
        yield
    finally:
        for module, original in patched:
            module._resolve_gdn_prefill_backend = original
        if runner is not None:
            if saved_runner is None:
                os.environ.pop(runner[0], None)
            else:
                os.environ[runner[0]] = saved_runner


def warm_up(construct: bool = False) -> None:
    """Pay now what the first build of a process pays (imports, model checks: ~10 s).

    A process that forks children to run tests (review) calls it first, so
    every child starts warm. ``construct`` also makes (and forgets) one
    builder, whose first construction costs ~2 s more; leave it off where the
    builder class may be a change under review that could hang.
    """
    with setting_up("importing vLLM's builder"):
        import vllm.v1.attention.backends.gdn_attn  # noqa: F401  (and what it imports)

    settings = BuilderSettings(speculative_tokens=1)
    with setting_up("VllmConfig"):  # a platform that refuses: as in each test
        make_vllm_config(settings)
    if construct:
        make_builder(settings)
        make_builder.cache_clear()  # each child makes its own, as a fresh engine would


GDN_BUILDER_MODULE = "vllm.v1.attention.backends.gdn_attn"
GDN_BUILDER = "GDNAttentionMetadataBuilder"


@functools.cache
def family_modules() -> dict[str, str]:
    """The loaded release's GDN builder family: each class whose base is
    GDNAttentionMetadataBuilder or one of its subclasses (GDN's own included) -> its
    module. Found by scanning the release's own files, not from a list."""
    import re

    import vllm

    root = os.path.dirname(vllm.__file__)
    bases: dict[str, tuple[str, list[str]]] = {}
    pattern = re.compile(rb"^class (\w+)\(([\w., ]+)\):", re.MULTILINE)
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, "rb") as handle:
                text = handle.read()
            if b"MetadataBuilder)" not in text and b"MetadataBuilder," not in text:
                continue
            module = "vllm." + os.path.relpath(path, root)[:-3].replace(os.sep, ".")
            for found in pattern.finditer(text):
                parents = [
                    b.strip().rsplit(b".", 1)[-1].decode()
                    for b in found.group(2).split(b",")
                ]
                bases[found.group(1).decode()] = (
                    module.removesuffix(".__init__"),
                    parents,
                )
    family = {GDN_BUILDER: GDN_BUILDER_MODULE}
    grown = True
    while grown:
        grown = False
        for cls, (module, parents) in bases.items():
            if cls not in family and any(parent in family for parent in parents):
                family[cls] = module
                grown = True
    return dict(sorted(family.items()))


def builder_class(name: str | None):
    """The builder class ``name`` (None: GDN's) of the loaded release; a release
    without it skips as not applicable."""
    import importlib

    import vllm

    if name is None or name == GDN_BUILDER:
        return getattr(importlib.import_module(GDN_BUILDER_MODULE), GDN_BUILDER)
    module = family_modules().get(name)
    if module is None:
        skip(SkipKind.ABSENT, f"not applicable: vLLM {vllm.__version__} has no {name}")
    loaded = importlib.import_module(module)
    cls = getattr(loaded, name)
    gdn = getattr(importlib.import_module(GDN_BUILDER_MODULE), GDN_BUILDER)
    if gdn not in cls.__mro__:
        # GDN's module was replaced after the subclass was imported (a mutant loaded in
        # memory): import the subclass again, as a fresh process would, so that it
        # derives from the loaded GDN builder.
        cls = getattr(importlib.reload(loaded), name)
    return cls


@functools.cache
def engine_config(settings: BuilderSettings):
    """The VllmConfig of ``settings``, made once per process: an engine's builders
    share its one config and only read it (no builder of the releases searched,
    0.17.0 to 0.19.0 and 0.28.0 to 0.34.0, writes into it). Dropped with the
    builders where a mutated module is loaded (making a config might run it)."""
    return make_vllm_config(settings)


@functools.cache
def make_builder(settings: BuilderSettings):
    """The real builder for ``settings``; built once per process and reused."""
    return new_builder(settings)


def new_builder(settings: BuilderSettings):
    """A fresh real builder: its persistent (FULL-graph) buffers are its own."""
    prepare_platform()
    with setting_up("importing vLLM's builder"):
        cls = builder_class(settings.builder)

    spec = mamba_spec(settings)
    with setting_up("VllmConfig"):
        config = engine_config(settings)
    with contextlib.ExitStack() as server:
        with setting_up("the server's configuration"):  # a release without its resolver
            server.enter_context(as_on_server(settings))
        with under_test(f"{cls.__name__}.__init__"):
            # As the engine does: builder_cls(kv_cache_spec, layer_names, config,
            # device).
            return cls(
                spec,
                ["model.layers.0.linear_attn"],
                config,
                torch.device(settings.device),
            )


def mamba_spec(settings: BuilderSettings):
    """The MambaSpec the engine hands the builder (kv_cache_spec) for ``settings``."""
    with setting_up("importing vLLM's MambaSpec"):
        from vllm.v1.kv_cache_interface import MambaSpec

    checkpoints = {}
    if settings.prefix_caching is not None:
        _, _, blocks, alignment = settings.prefix_caching
        checkpoints = {
            "mamba_cache_mode": "align",
            "num_prefill_checkpoint_blocks": blocks,
            "prefill_checkpoint_alignment": alignment,
        }
    with setting_up("MambaSpec"):
        spec = MambaSpec(
            **_accepted_kwargs(
                MambaSpec,
                ("block_size", "shapes", "dtypes", *checkpoints)
                + (("num_speculative_blocks",) if settings.speculative_tokens else ()),
                block_size=settings.block_size,
                shapes=((4, 4),),
                dtypes=(torch.float32,),
                num_speculative_blocks=settings.speculative_tokens or 0,
                **checkpoints,
            )
        )
    return spec
