"""The generated suite must fail when the builder is broken the way a risk says.

Each mutant of kb/52078.yaml that applies to the loaded vLLM is applied to the
real gdn_attn.py source in a fresh interpreter (the module is compiled from the
edited text and put in sys.modules before anything imports it; the installed
file is never touched), then the generated module runs on CPU. It must fail.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gdn_review import harness
from gdn_review.kb import load_record
from tests.conftest import ROOT

RECORD = load_record(ROOT / "kb" / "52078.yaml")
MUTANTS = [
    pytest.param(risk.id, mutant, id=f"{risk.id}-{mutant.id}")
    for risk in RECORD.risks
    for mutant in risk.mutants
    if mutant.id in {"ge_to_gt", "drop_non_spec_invert"}  # the two hand edits of the acceptance list
]

RUN_MUTATED = """
import importlib.util, json, sys
from gdn_review import harness
harness.prepare_platform()
mutant = json.loads(sys.argv[1])
name = "vllm.v1.attention.backends.gdn_attn"
spec = importlib.util.find_spec(name)
source = open(spec.origin, encoding="utf-8").read()
assert source.count(mutant["find"]) == mutant["count"], "mutant does not apply"
module = importlib.util.module_from_spec(spec)
sys.modules[name] = module
exec(compile(source.replace(mutant["find"], mutant["replace"]), spec.origin, "exec"), module.__dict__)
import pytest
sys.exit(pytest.main(["generated_tests/test_pr_52078.py", "-q", "-p", "no:cacheprovider", "--gdn-no-evidence", "-k", "cpu", "-x"]))
"""


@pytest.mark.slow
@pytest.mark.parametrize("risk_id, mutant", MUTANTS)
def test_generated_suite_fails_on_mutant(risk_id, mutant):
    if not harness.release_in_range(mutant.releases):
        pytest.skip(f"mutant {mutant.id} is for vLLM {mutant.releases}")
    done = subprocess.run(
        [sys.executable, "-c", RUN_MUTATED, json.dumps(mutant.model_dump())],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 1, f"expected failing tests (exit 1), got {done.returncode}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
    assert "failed" in done.stdout.splitlines()[-1]
