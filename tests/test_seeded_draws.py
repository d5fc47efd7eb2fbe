"""A claim's seeded Hypothesis draws depend on its seed and strategy alone, not on which modules
Hypothesis deems local (an unpacked vLLM release tree is, the installed one is not)."""

from __future__ import annotations

import importlib.util
import sys

from hypothesis.internal.conjecture import providers


def test_a_local_modules_constants_do_not_reach_the_draws(tmp_path):
    # The plugin's pytest_configure ran in this session (pytest11), as in every generated run.
    module_file = tmp_path / "releases_vllm_like.py"
    module_file.write_text("ODD = 987654321\nNAME = 'only-in-this-module'\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("releases_vllm_like", module_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        constants = providers._get_local_constants()
        assert 987654321 not in constants.set_for_type("integer")
        assert "only-in-this-module" not in constants.set_for_type("string")
        assert len(constants) == 0
    finally:
        del sys.modules[spec.name]
