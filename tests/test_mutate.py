"""`gdn-review mutate` end to end on the installed vLLM (CPU): real builder, real mutants.

Each test runs the command in a subprocess, as a user would. vLLM's installed
files are hashed before and after: mutants live in memory only, whatever
happens to the run (normal end, SIGINT, a mutant that never returns).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gdn_review.common import interrupts
from gdn_review.mutation import runner
from gdn_review.run import suite
from tests.conftest import ROOT, vllm_files_digest

pytestmark = pytest.mark.slow
GDN = [sys.executable, "-m", "gdn_review.cli"]
TARGET = "vllm/v1/attention/backends/gdn_attn.py"


def mutate(*args: str, tmp_path: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    command = [
        *GDN,
        "mutate",
        "--evidence",
        str(tmp_path / "evidence.json"),
        "--reports",
        str(tmp_path / "reports"),
        *args,
    ]
    return interrupts.run_child(command, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def mutants_of(tmp_path: Path) -> dict[str, dict]:
    data = json.loads((tmp_path / "evidence.json").read_text(encoding="utf-8"))
    return {m["id"]: m for m in data["mutation"]["mutants"]}


def test_every_mutant_of_52078_is_killed_or_explained_and_vllm_is_untouched(tmp_path):
    before = vllm_files_digest()
    done = mutate("--record", "52078", tmp_path=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert vllm_files_digest() == before
    found = mutants_of(tmp_path)
    assert {m["origin"] for m in found.values()} == {"record", "diff"}
    unexplained = {
        i: m["status"]
        for i, m in found.items()
        if m["status"] not in {"killed", "not applicable", "equivalent"}
    }
    assert not unexplained
    assert all(
        m["reason"] for m in found.values() if m["status"] in {"not applicable", "equivalent"}
    )
    report = (tmp_path / "reports" / "52078.md").read_text(encoding="utf-8")
    for risk in ("R1", "R2", "R3"):
        assert f"| {risk} |" in report and f"### {risk}: kill matrix" in report
    assert report.count("**mutation-verified**") == 3


def test_hang_times_out_unreached_is_named_survivor_fails_run_verdicts_equal_fresh_process(
    tmp_path,
):
    """One `mutate` run for what two runs checked (one vLLM import): five mutants under a
    weakened selection (C1's op counts, and C3 on one case), --jobs 1 and --fail-on survived.

    plan_flashinfer_checkpoints runs only for prefill checkpoints, which no case of this
    selection makes: no case's entry point executes it. A mutant that never returns comes
    first: it times out, is killed, and the next ones still run. Parity on a sample: a killed
    record mutant and a surviving automatic one give, each in a fresh pytest process under the
    same selection, the verdicts (and killing claims) of the in-process run.
    """
    kb = tmp_path / "kb"
    kb.mkdir()
    text = (ROOT / "kb" / "52078.yaml").read_text(encoding="utf-8")
    unreached = (
        "      - id: checkpoint_stride_off_by_one\n"
        '        releases: ">=0.33"\n'
        '        find: "cu_starts.append(cu_starts[-1] + query_len // every_n_tokens)"\n'
        '        replace: "cu_starts.append(cu_starts[-1] + query_len // every_n_tokens + 1)"\n'
    )
    hang = (
        "      - id: hang\n"
        '        find: "spec_sequence_masks_cpu = num_decode_draft_tokens_cpu >= 0"\n'
        '        replace: "spec_sequence_masks_cpu = '
        "[__import__('time').sleep(3600) for _ in iter(int, 1)]\"\n"
    )
    # The hang first of the chosen mutants (R2's first), the unreached before ge_to_gt (R3).
    first, anchor = "      - id: drop_non_spec_invert\n", "      - id: ge_to_gt\n"
    (kb / "52078.yaml").write_text(
        text.replace(first, hang + first).replace(anchor, unreached + anchor), encoding="utf-8"
    )
    sample = ["drop_non_spec_invert", "auto.invert_mask.non_spec_sequence_masks_cpu.26053e"]
    selection = "C1 or (C3 and pure_spec_decode)"
    before = vllm_files_digest()
    # Ten times what the other mutants' few tests take (about a second): a loaded machine
    # cannot turn their verdicts into timeouts, only the hang reaches it, and the worker
    # idles no longer.
    done = mutate(
        "--kb",
        str(kb),
        "--generated",
        str(tmp_path / "generated"),
        "--write",
        *("--mutant", "hang", "--mutant", "checkpoint_stride_off_by_one", "--mutant", "ge_to_gt"),
        *(argument for ident in sample for argument in ("--mutant", ident)),
        "-k",
        selection,
        "--jobs",
        "1",
        "--timeout",
        "10",
        "--fail-on",
        "survived",
        tmp_path=tmp_path,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "fail-on: survived: PR #52078 mutant ge_to_gt\n" in done.stderr
    found = mutants_of(tmp_path)
    assert list(found)[0] == "hang", list(found)  # first (--jobs 1: the others run after it)
    assert found["hang"]["status"] == "timeout" and "killed" in found["hang"]["reason"]
    assert vllm_files_digest() == before
    # ge_to_gt's line runs under the selection and none of its checks changes: a survivor
    # that ran.
    assert (found["ge_to_gt"]["status"], found["ge_to_gt"]["reason"]) == ("survived", "")
    entry = found["checkpoint_stride_off_by_one"]
    assert entry["status"] == "not reached", entry
    assert re.fullmatch(
        r"no test executes line \d+ of plan_flashinfer_checkpoints: add a case that reaches it",
        entry["reason"],
    )
    # (the sample's automatic survivor is the second survivor)
    assert "1 not reached, 2 survived" in done.stderr
    assert "not reached checkpoint_stride_off_by_one" in " ".join(done.stderr.split())
    report = (tmp_path / "reports" / "52078.md").read_text(encoding="utf-8")
    assert (
        "| `checkpoint_stride_off_by_one` | record | **not reached**: no test executes line"
        in report
    )
    assert "| `ge_to_gt` | record | **survived** |" in report
    assert "<code>checkpoint_stride_off_by_one</code> not reached: no test executes line" in report

    # The sample's verdicts in a fresh pytest process each, on the module the run generated.
    in_process = {ident: found[ident] for ident in sample}
    statuses = {m["status"] for m in in_process.values()}
    assert statuses == {"killed", "survived"}, in_process  # the sample has both
    from gdn_review.kb import load_record
    from gdn_review.mutation import catalogue_for

    record = load_record(kb / "52078.yaml")
    catalogue = catalogue_for(kb / "52078.yaml", record, fetch=True, say=lambda _: None)
    sources = {m.id: m.source for m in catalogue.mutants}
    tests = suite.test_args([tmp_path / "generated" / "test_pr_52078.py"], selection)
    for ident, entry in in_process.items():
        fresh = runner.run_fresh_process(TARGET, sources[ident], tests, cwd=ROOT)
        assert (fresh["status"], sorted(fresh.get("killed_by", {}))) == (
            entry["status"],
            sorted(entry["killed_by"]),
        ), ident
