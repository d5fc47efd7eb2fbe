"""A mutant is loaded in memory as a fresh process would import the edited file; a file that
cannot be swapped in place at all gives an error, never a kill."""

from __future__ import annotations

import sys

import pytest

from gdn_review.common import interrupts
from gdn_review.harness import mutation
from gdn_review.mutation import runner

TARGET = "vllm/v1/attention/backends/gdn_attn.py"


def _not_loading():
    return compile("raise RuntimeError('the copy does not import')", "<mutant>", "exec")


def test_a_mutant_that_does_not_import_is_killed_when_the_original_loads(monkeypatch):
    monkeypatch.setattr(mutation, "loads_unmutated", lambda path: True)
    result = runner.run_in_this_process(TARGET, _not_loading(), [])
    assert result["status"] == "killed"
    assert "the copy does not import" in result["messages"]["(module import)"]


def test_a_file_that_does_not_load_unmutated_is_an_error_not_a_kill(monkeypatch):
    monkeypatch.setattr(mutation, "loads_unmutated", lambda path: False)
    result = runner.run_in_this_process(TARGET, _not_loading(), [])
    assert result["status"] == "error"
    assert "does not load in place unmutated either" in result["reason"]
    assert "the copy does not import" in result["reason"]


@pytest.mark.slow
def test_files_that_register_custom_ops_load_in_place():
    """qwen_gdn_linear_attn.py registers a CustomOp and a torch op when imported: its copy
    loads in place (a fresh process's registrations), in a child so this one stays clean."""
    code = (
        "from gdn_review.harness import mutation\n"
        "for path in ('vllm/model_executor/layers/mamba/gdn/qwen_gdn_linear_attn.py',"
        " 'vllm/v1/attention/backends/gdn_attn.py'):\n"
        "    print(path, mutation.loads_unmutated(path))\n"
    )
    # (interrupts.run_child: the preload server's child, where there is one, with torch imported
    # already and vLLM not: vLLM's registrations are the child's own, as in a fresh process)
    done = interrupts.run_child(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count(" True") == 2, done.stdout + done.stderr[-2000:]


def test_the_op_registries_are_found_once_and_then_only_in_modules_loaded_since(monkeypatch):
    """A forked child inherits the parent's look at every module (``registries``): it looks
    only at modules loaded after, and forgets those gone."""
    import types

    mutation.registries()
    scanned = dict(mutation._SCANNED)
    late = types.ModuleType("gdn_review_test_late_registry")
    late.op_registry = {"late_op": object()}
    monkeypatch.setitem(sys.modules, late.__name__, late)
    found = mutation.registries()
    assert any(registry is late.op_registry for registry in found)
    # Those looked at before keep their entries: not looked at again.
    assert all(mutation._SCANNED[name] is entry for name, entry in scanned.items())
    monkeypatch.delitem(sys.modules, late.__name__)
    assert not any(registry is late.op_registry for registry in mutation.registries())
