"""A local stand-in for vLLM's ``tests/v1/attention/utils.py``, for a wall-time comparison only.

vLLM's own GDN builder tests (``tests/v1/attention/test_gdn_metadata_builder.py``) import
``BatchSpec``, ``create_common_attn_metadata`` and ``create_vllm_config`` from that module,
which the wheel does not ship, and their ``create_vllm_config`` reads a model config from the
Hugging Face hub (``Qwen/Qwen3.5-0.8B``). ``benchmarks/family_vs_vllm_tests.py`` puts this
module in its place (as ``tests.v1.attention.utils``) so that vLLM's tests run on this machine,
offline, beside the generated suite. It is not vLLM's code and not a re-implementation of it:

- ``create_vllm_config`` is the harness's own ``VllmConfig`` (``gdn_review.harness.builders``:
  the tiny Qwen3-Next ``MODEL_CONFIG``, CPU device), whatever ``model_name`` the test asks for;
- ``create_common_attn_metadata`` is the harness's own ``CommonAttentionMetadata``
  (``gdn_review.harness.inputs.build_arguments``) for the batch's rows, with no
  ``is_prefilling`` (as vLLM's helper sends none) and the harness's block table;
- ``BatchSpec`` has the fields and methods the tests call.

So a test's verdict here says how the real builder answers on the harness's config, which is
not the config vLLM's CI uses: read the results for time, not as vLLM's CI verdict.
"""

from __future__ import annotations

import dataclasses

from gdn_review.harness.builders import (
    BuilderSettings,
    make_vllm_config,
)  # prepares vLLM's platform first
from gdn_review.harness.inputs import build_arguments

STANDIN_NAME = (
    "local stand-in for tests/v1/attention/utils.py (benchmarks/vllm_utils_standin.py): "
    "create_vllm_config builds the harness's tiny Qwen3-Next config "
    "(gdn_review.harness.builders.MODEL_CONFIG), not Qwen/Qwen3.5-0.8B from the hub"
)


@dataclasses.dataclass
class BatchSpec:
    seq_lens: list[int]
    query_lens: list[int]
    name: str = "unnamed"

    def __post_init__(self):
        assert len(self.seq_lens) == len(self.query_lens)

    @property
    def batch_size(self) -> int:
        return len(self.seq_lens)

    def compute_num_tokens(self) -> int:
        return sum(self.query_lens)


def _settings(
    block_size: int, max_model_len: int = 1024, max_num_seqs: int = 256
) -> BuilderSettings:
    return BuilderSettings(
        block_size=block_size, max_model_len=max_model_len, max_num_seqs=max_num_seqs
    )


def create_vllm_config(
    model_name: str = "",
    tensor_parallel_size: int = 1,
    max_model_len: int = 1024,
    dtype=None,
    block_size: int = 16,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    **_ignored,
):
    """The harness's VllmConfig (its tiny Qwen3-Next), whatever model_name says."""
    return make_vllm_config(_settings(block_size, max_model_len, max_num_seqs))


def create_common_attn_metadata(batch_spec: BatchSpec, block_size: int, device, *_args, **_kwargs):
    """The harness's CommonAttentionMetadata for these rows (no is_prefilling, as vLLM's helper)."""
    case = {
        "rows": [
            {"seq_len": s, "query_len": q}
            for s, q in zip(batch_spec.seq_lens, batch_spec.query_lens)
        ],
        "no_is_prefilling": True,
    }
    settings = dataclasses.replace(_settings(block_size), device=str(device))
    arguments, _rows, _columns = build_arguments(case, settings)
    return arguments["common_attn_metadata"]
