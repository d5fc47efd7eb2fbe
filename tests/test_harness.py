"""The harness against the real vLLM builder (CPU here)."""

from __future__ import annotations

import ast

import pytest

from gdn_review import harness

SPEC = {
    "speculative_tokens": 2,
    "rows": [
        {"seq_len": 10, "query_len": 3, "drafted": 2, "accepted": 2},
        {"seq_len": 20, "query_len": 5},
    ],
    "padded_rows": 1,
}
PLAIN = {"rows": [{"seq_len": 10, "query_len": 1}, {"seq_len": 20, "query_len": 5}]}


def test_builder_is_vllms_own_and_built_once():
    settings = harness.BuilderSettings(device="cpu", speculative_tokens=2)
    builder = harness.make_builder(settings)
    assert type(builder).__module__ == "vllm.v1.attention.backends.gdn_attn"
    assert type(builder).__name__ == "GDNAttentionMetadataBuilder"
    assert builder.use_spec_decode and builder.num_spec == 2
    assert harness.make_builder(settings) is builder


def test_the_builder_belongs_to_a_text_generation_model_as_on_a_server():
    # A server loads a Qwen3-Next checkpoint, whose config names Qwen3NextForCausalLM:
    # vLLM's generate runner. Unnamed, the tiny model was vLLM's embedding (pooling) model.
    model = harness.make_builder(harness.BuilderSettings(device="cpu")).vllm_config.model_config
    assert model.architectures == ["Qwen3NextForCausalLM"]
    assert (model.runner_type, model.convert_type) == ("generate", "none")


def test_each_builder_gets_the_cache_mode_a_fresh_engine_would():
    # VllmConfig runs the model's config hooks (prefix caching -> mamba_cache_mode)
    # once per ModelConfig; a ModelConfig shared between builders left every
    # builder after a process's first in another mode, so a case's state indices
    # depended on which test ran first.
    from gdn_review.harness.builders import make_vllm_config

    configs = [
        make_vllm_config(harness.BuilderSettings(device="cpu", speculative_tokens=k))
        for k in (None, 2, None, 2)
    ]
    modes = [(c.cache_config.mamba_cache_mode, c.cache_config.mamba_block_size) for c in configs]
    assert len(set(modes)) == 1, modes


def test_build_case_snapshots_rows_and_counts_ops():
    run = harness.build_case("cpu", SPEC)
    assert run.metadata["path"] == "spec"
    assert run.metadata["spec_state_rows"] == [0]
    assert run.metadata["non_spec_state_rows"] == [1, 2]  # the prefill and the padded row
    assert run.metadata["num_accepted_tokens"] == [2]
    assert run.rows == 2 and run.padded_rows == 1
    assert run.ops.get("aten.ge", 0) >= 1  # the `>= 0` mask, seen by the dispatch mode
    plain = harness.build_case("cpu", PLAIN)
    assert plain.metadata["path"] == "non_spec" and "aten.ge" not in plain.ops


def test_release_ranges_against_loaded_vllm():
    release = harness.vllm_release()
    assert harness.release_in_range(None) and harness.release_in_range("")
    assert harness.release_in_range(f"=={release}")
    assert not harness.release_in_range(f"<{release}")


def test_active_deviation_selects_by_release_and_value():
    release = harness.vllm_release()
    deviations = [
        {"releases": f"<{release}", "cases": ["a"], "reason": "old"},
        {"releases": f">={release}", "cases": ["b"], "reason": "new"},
        {"reason": "every case"},
    ]
    assert harness.active_deviation(deviations, "cases", "b")["reason"] == "new"
    assert harness.active_deviation(deviations, "cases", "a")["reason"] == "every case"
    assert harness.active_deviation(deviations[:2], "cases", "a") is None


def test_environment_names_versions():
    env = harness.environment()
    assert env["vllm_version"] == str(harness.vllm_release())
    assert env["torch_version"] and env["python"]
    assert env["vllm_source"] in {
        "installed distribution",
        "unpacked on PYTHONPATH (not the installed distribution)",
    }


def test_cuda_skip_reason_on_this_machine():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the reason is for machines without it")
    reason = harness.device_skip_reason("cuda")
    assert reason.startswith("needs CUDA: no CUDA device")
    assert harness.device_skip_reason("cpu") is None
    assert "unknown device" in harness.device_skip_reason("tpu")


def test_mutants_of_the_bundled_record_apply_to_the_loaded_release():
    """Each mutant's find text occurs exactly `count` times in the loaded target file."""
    from gdn_review.kb import load_record
    from tests.conftest import ROOT

    record = load_record(ROOT / "kb" / "52078.yaml")
    path, source = harness.target_source(record.target.file)
    checked = 0
    for risk in record.risks:
        for mutant in risk.mutants:
            if harness.release_in_range(mutant.releases):
                assert source.count(mutant.find) == mutant.count, f"{risk.id}/{mutant.id} in {path}"
                checked += 1
    assert checked >= 3


def test_on_vllms_cpu_platform_a_cuda_builder_gets_a_cpu_device_config(monkeypatch):
    """A bundle's fallback on a GPU machine: the CPU platform asserts a cpu device config, the
    builder's tensors go to CUDA."""
    import os

    from gdn_review.harness.builders import make_vllm_config

    assert os.environ["VLLM_TARGET_DEVICE"] == "cpu"  # this machine: no CUDA
    config = make_vllm_config(harness.BuilderSettings(device="cuda", speculative_tokens=2))
    assert config.device_config.device_type == "cpu"
    assert (
        make_vllm_config(harness.BuilderSettings(device="cpu")).device_config.device_type == "cpu"
    )


@pytest.mark.slow
def test_a_fresh_process_gets_the_cpu_platform_and_making_a_builder_starts_no_background_process():
    """Both are about a process's first vLLM import, so one fresh process checks both (one import,
    not two).

    vLLM picks its platform at first import. A test reaching vLLM through a helper
    that does not prepare it (a bare VllmConfig) once left a pytest worker on the
    CUDA platform, and every later build() there failed with "no NVIDIA driver".
    And vLLM's humming kernels would start two interpreters to build CUDA launchers
    at import. The variables the harness sets for both are removed first. The same process
    shows that the model folder a process writes is gone once it ends (each process used to
    leave one behind in the temp folder). And the variables it writes outside ``CHILD_OWN`` are the
    ones our children start without (``interrupts.VLLM_WORKER_SETUP``), else every child of a
    process that used vLLM would differ from the preload servers' environment.
    """
    import os
    import subprocess
    import sys

    code = (
        "import os\n"
        "before = dict(os.environ)\n"
        "from gdn_review.harness.builders import BuilderSettings, make_vllm_config\n"
        "make_vllm_config(BuilderSettings())\n"
        "from vllm.platforms import current_platform\n"
        "print('platform', type(current_platform).__name__)\n"
        "from gdn_review import harness\n"
        "harness.make_builder(harness.BuilderSettings(speculative_tokens=1))\n"
        "me = str(os.getpid())\n"
        # Any process on the machine may end between the listing and the read: one that is
        # gone is no child of ours.
        "def parent(pid):\n"
        "    try:\n"
        "        return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1]\n"
        "    except (OSError, IndexError):\n"
        "        return None\n"
        "kids = [p for p in os.listdir('/proc') if p.isdigit() and parent(p) == me]\n"
        "print('children', len(kids))\n"
        "from gdn_review.harness.tiny_models import model_dir\n"
        "print('model folder', os.path.isdir(model_dir()), model_dir())\n"
        "from gdn_review.common.preloaded import CHILD_OWN\n"
        "print('written', sorted(k for k, v in os.environ.items()\n"
        "                        if before.get(k) != v and not k.startswith(CHILD_OWN)))\n"
    )
    from gdn_review.common import interrupts, preloaded

    env = {
        k: v
        for k, v in interrupts.child_environment(dict(os.environ)).items()
        if k not in {"VLLM_TARGET_DEVICE", "HUMMING_DISABLE_PARALLEL_BUILD"}
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert "platform CpuPlatform" in done.stdout, done.stdout + done.stderr[-2000:]
    assert "children 0" in done.stdout, done.stdout + done.stderr[-2000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("model folder")]
    assert line.startswith("model folder True "), line
    assert not os.path.exists(line.split(" ", 3)[3])
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("written ")]
    written = set(ast.literal_eval(line.removeprefix("written ")))
    assert written - set(preloaded.IMPORT_DEFAULTS) <= set(interrupts.VLLM_WORKER_SETUP), written
