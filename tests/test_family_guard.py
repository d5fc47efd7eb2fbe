"""The builder family under mutate --whole-file --file, review and the matrix: which file holds
which builder, which records cover it, which of its statements CPU cannot reach (each naming
its kernel), and the matrix's column per builder."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from gdn_review.cli import main
from gdn_review.kb import load_record
from gdn_review.matrix import matrix_report
from gdn_review.mutation import family, guard_lines, guard_notes
from tests.conftest import ROOT

AMD = "vllm/models/kimi_k3/amd/kda_metadata.py"
NVIDIA = "vllm/models/kimi_k3/nvidia/kda_metadata.py"

KERNEL_SOURCE = """
import triton


@triton.jit(do_not_specialize=["N"])
def _chunk_kernel(x, N):
    i = x + 1
    if i > N:
        i = 0


def prepare(x):
    n = x + 1
    _chunk_kernel[(n,)](x, n)
    return n


class KimiMetadataBuilder(Base):
    def build(self, x):
        return prepare(x)
"""


def _installed(relative: str) -> str:
    """The loaded vLLM's text of a file, read without importing vLLM."""
    spec = importlib.util.find_spec("vllm")
    return (Path(spec.origin).parent.parent / relative).read_text(encoding="utf-8")


def test_a_kernels_body_is_unreachable_and_named():
    assert family.kernels(KERNEL_SOURCE) == {"_chunk_kernel": (6, 9)}
    marked = family.kernel_lines(KERNEL_SOURCE)
    assert set(marked) == set(range(6, 10))
    assert marked[7] == "the Triton kernel _chunk_kernel itself (device code)"
    # the kernel's body is in the scope (a module-level function): so its mutants read unreachable
    assert {7, 8, 9} <= set(guard_lines.scope(KERNEL_SOURCE))


def test_a_family_files_unreachable_reason_must_name_a_kernel():
    problems = family.reasons_without_kernel(
        KERNEL_SOURCE,
        [
            ("notes.yaml:3", "launches the Triton kernel _chunk_kernel"),
            ("notes.yaml:5", "CPU never gets there"),
        ],
    )
    assert len(problems) == 1 and problems[0].startswith("notes.yaml:5: the reason names no kernel")


def test_notes_and_reports_of_a_subclass_file_have_their_own_names(tmp_path):
    assert family.notes_path(tmp_path, family.GDN_FILE) == tmp_path / "guard" / "notes.yaml"
    assert family.notes_path(tmp_path, AMD) == (
        tmp_path / "guard" / "vllm.models.kimi_k3.amd.kda_metadata.yaml"
    )
    assert family.report_stem(family.GDN_FILE) == "guard"
    assert family.report_stem(NVIDIA) == "guard-kimi_k3.nvidia.kda_metadata"


@pytest.mark.parametrize("relative", [AMD, NVIDIA])
def test_the_bundled_notes_match_the_release_and_name_their_kernels(relative):
    source = _installed(relative)
    notes = guard_notes.load_notes(family.notes_path(ROOT / "kb", relative))
    _, unmatched = guard_notes.unreachable_lines(source, notes)
    assert unmatched == []
    reasons = [(n.where, n.reason) for n in notes.unreachable] + list(notes.elsewhere.items())
    assert family.reasons_without_kernel(source, reasons) == []
    assert family.kernels(source)  # each file has its Triton kernels


def _record(target: str, builders: list[str | None]):
    return types.SimpleNamespace(
        target=types.SimpleNamespace(file=target, symbol="GDNAttentionMetadataBuilder.build"),
        cases=[types.SimpleNamespace(id=f"c{i}", builder=b) for i, b in enumerate(builders)],
    )


def test_a_diff_of_a_subclass_file_reaches_the_records_whose_cases_name_its_builder():
    subclass = "class KimiK3ROCmKDAMetadataBuilder(GDNAttentionMetadataBuilder):\n    pass\n"
    read = {AMD: subclass, family.GDN_FILE: "class GDNAttentionMetadataBuilder:\n    pass\n"}.get
    naming = _record(family.GDN_FILE, [None, "KimiK3ROCmKDAMetadataBuilder"])
    plain = _record(family.GDN_FILE, [None])
    contract = _record(AMD, ["KimiK3ROCmKDAMetadataBuilder"])
    assert family.covered_files(naming, {AMD: subclass}, read) == [
        (AMD, "KimiK3ROCmKDAMetadataBuilder.build")
    ]
    assert family.covered_files(plain, {AMD: subclass}, read) == []
    # a diff of GDN's file runs the family's cases too, whatever file their record targets
    assert family.covered_files(contract, {family.GDN_FILE: "x"}, read) == [
        (family.GDN_FILE, "GDNAttentionMetadataBuilder.build")
    ]
    assert family.covered_files(plain, {family.GDN_FILE: "x"}, read) == [(family.GDN_FILE, None)]


def test_a_new_file_defining_a_named_builder_is_read_from_the_diff_and_shown_as_code():
    # A PR's diff may add a file under any name the diff parser lets through (names that climb
    # out of vllm/ are refused there): its text comes from the diff, never from the disk, and
    # its name reaches the review's markdown only as inline code.
    from gdn_review.report.markdown import code

    hostile = "vllm/models/kimi_k3/amd/x`|y<b>.py"
    text = "class KimiK3ROCmKDAMetadataBuilder(GDNAttentionMetadataBuilder):\n    pass\n"
    opened = []

    def read(relative):
        opened.append(relative)
        return None  # a file the diff adds: the release has no such file

    naming = _record(family.GDN_FILE, ["KimiK3ROCmKDAMetadataBuilder"])
    found = family.covered_files(naming, {hostile: text}, read)
    assert found == [(hostile, "KimiK3ROCmKDAMetadataBuilder.build")]
    assert opened == [hostile]
    shown = code(f"{hostile} (KimiK3ROCmKDAMetadataBuilder.build)")
    assert "\\|" in shown and "\n" not in shown and shown.startswith("``")


def test_the_family_is_found_by_scanning_the_loaded_release():
    files = family.family_files()
    assert files[family.GDN_FILE] == ["GDNAttentionMetadataBuilder"]
    assert files[AMD] == ["KimiK3ROCmKDAMetadataBuilder"]
    assert files[NVIDIA] == ["KimiK3KDAMetadataBuilder"]


def test_whole_file_refuses_a_file_outside_the_family(tmp_path):
    done = CliRunner().invoke(
        main,
        [
            "mutate",
            "--whole-file",
            "--file",
            "vllm/v1/attention/backends/mamba_attn.py",
            "--record",
            "kimi_k3_rocm_kda_builder",
            "--reports",
            str(tmp_path),
        ],
    )
    assert done.exit_code == 2, done.output
    assert "not a file of the loaded vLLM's GDN builder family" in done.output
    assert "vllm/models/kimi_k3/amd/kda_metadata.py" in done.output


def test_the_matrix_has_a_column_per_builder():
    path = ROOT / "kb" / "kimi_k3_rocm_kda_builder.yaml"
    record = load_record(path)
    assert matrix_report.record_builders(record) == ["KimiK3ROCmKDAMetadataBuilder"]
    mixed = types.SimpleNamespace(
        cases=[
            types.SimpleNamespace(id="gdn", builder=None),
            types.SimpleNamespace(id="kimi", builder="KimiK3KDAMetadataBuilder"),
        ]
    )
    assert matrix_report.record_builders(mixed) == [
        "GDNAttentionMetadataBuilder",
        "KimiK3KDAMetadataBuilder",
    ]
    cells = [
        {
            "version": "0.29.0",
            "tests": [
                {"case": "gdn", "outcome": "passed"},
                {"case": "kimi", "outcome": "failed"},
            ],
        },
        {
            "version": "0.30.0",
            "tests": [
                {"case": "gdn", "outcome": "passed"},
                # the evidence's own builder wins over the record's case
                {"case": "gdn", "builder": "KimiK3KDAMetadataBuilder", "outcome": "passed"},
            ],
        },
    ]
    assert matrix_report.by_builder(mixed, cells) == {
        "GDNAttentionMetadataBuilder": "holds (0.29.0–0.30.0)",
        "KimiK3KDAMetadataBuilder": "fails (0.29.0) → holds (0.30.0)",
    }
    assert json.dumps(matrix_report.by_builder(mixed, []))  # no release ran: nothing to show
