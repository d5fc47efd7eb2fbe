"""Tiny model configs for a real VllmConfig, and the speculative config of each method.

The target is a tiny hybrid (Qwen3-Next) and a standalone draft a tiny Llama, each
written to a temp folder as ``config.json``: no weights are loaded, only the config
is read (by vLLM, through ``transformers``). The speculation methods the harness
configures on CPU without weights: ``ngram``; ``draft_model`` (the tiny Llama);
``mtp`` (the target's own MTP layer, as vLLM resolves it for Qwen3-Next).

``gdn-review export`` copies these definitions verbatim (stdlib, torch and vLLM
imports only).
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import tempfile

from gdn_review.common.vocabulary import SkipKind
from gdn_review.harness.adaptations import accepted_kwargs
from gdn_review.harness.origin import skip

# A tiny Qwen3-Next: one linear-attention (GDN) layer and one full-attention layer.
# transformers fills in every field left out. The architecture is named, as a
# Qwen3-Next checkpoint's config.json names it: left out, it was transformers' base
# class (Qwen3NextModel), which vLLM serves as an embedding model (pooling runner),
# inspecting a second model class in a subprocess of its own per release.
MODEL_CONFIG = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "layer_types": ["linear_attention", "full_attention"],
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "linear_num_value_heads": 2,
    "linear_num_key_heads": 1,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "num_experts": 2,
    "num_experts_per_tok": 1,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 32,
    "max_position_embeddings": 1024,
}


# A tiny Llama, the standalone draft model of method draft_model (its vocabulary the
# target's, as vLLM requires of a draft).
DRAFT_MODEL_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 1024,
}
# The methods a case may name (kb.cases.SpeculativeMethod).
SPECULATIVE_METHODS = ("ngram", "draft_model", "mtp")


@functools.cache
def model_dir(draft: bool = False) -> str:
    folder = tempfile.mkdtemp(prefix="gdn-review-model-")
    config = DRAFT_MODEL_CONFIG if draft else MODEL_CONFIG
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2, sort_keys=True)
    atexit.register(_remove_model_dir, folder, os.getpid())
    return folder


def _remove_model_dir(folder: str, owner: int) -> None:
    """Once the process that made it ends (each process used to leave one behind)."""
    if os.getpid() == owner:  # a forked child (a mutant's) shares its parent's folder
        shutil.rmtree(folder, ignore_errors=True)


def model_config(max_model_len: int):
    """A fresh ModelConfig for each VllmConfig, as each vLLM engine has its own.

    Never cached: VllmConfig runs the model's config hooks (which turn prefix
    caching into mamba_cache_mode "align") once per ModelConfig and marks it
    done, so a shared one left every builder after the first in "none" mode.
    After the first (imports), one costs a few milliseconds.
    """
    from vllm.config import ModelConfig

    return ModelConfig(
        **accepted_kwargs(
            ModelConfig,
            ("max_model_len",),
            model=model_dir(),
            tokenizer=None,
            skip_tokenizer_init=True,
            max_model_len=max_model_len,
            dtype="float32",
            # Eager: no full CUDA graphs, so CUDA metadata is not padded to a
            # graph's batch size and compares field by field with CPU runs.
            enforce_eager=True,
        )
    )


def speculative_config(method: str | None, tokens: int, target):
    """The SpeculativeConfig of ``method`` (None: ngram), ``tokens`` speculative tokens,
    for the target model config ``target``; a release that cannot configure the method
    skips as not applicable."""
    import typing

    import vllm
    from vllm.config import ParallelConfig, SpeculativeConfig
    from vllm.config import speculative as module

    method = method or "ngram"
    if method not in typing.get_args(getattr(module, "SpeculativeMethod", None)):
        skip(
            SkipKind.ABSENT,
            f"not applicable: vLLM {vllm.__version__} has no speculative "
            f"method {method}",
        )
    if method == "ngram":
        extra = {"prompt_lookup_max": 2, "prompt_lookup_min": 1}
    else:
        # vLLM derives the drafter's model config from the target's, as the engine does.
        extra = {
            "target_model_config": target,
            "target_parallel_config": ParallelConfig(),
        }
        if method == "draft_model":
            extra["model"] = model_dir(draft=True)
    return SpeculativeConfig(
        **accepted_kwargs(
            SpeculativeConfig,
            ("method", "num_speculative_tokens"),
            method=method,
            num_speculative_tokens=tokens,
            **extra,
        )
    )
