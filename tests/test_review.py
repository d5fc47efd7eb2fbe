"""gdn-review review: a change checked against the KB before it merges (slow: vLLM runs in
subprocesses).

The changes are real: the diffs between consecutive releases' copies of the
builder's file, made here from the release cache, three of them reviewed onto their
older release and compared with what `gdn-review matrix` shows for the same step.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gdn_review.common import interrupts, release_trees
from gdn_review.common.release import loaded as loaded_release
from gdn_review.kb import load_kb

ROOT = Path(__file__).resolve().parents[1]
TARGET = "vllm/v1/attention/backends/gdn_attn.py"
RELEASES = ["0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"]
# The steps reviewed: the one that carries #52078 (its op counts change), the one that carries
# #56531 (fields move) and the last one (the shards test's). The two quiet steps between them
# cost a review each (a vLLM process per side) and show nothing the others do not.
STEPS = [("0.28.0", "0.29.0"), ("0.31.0", "0.32.0"), ("0.32.0", "0.33.0")]
# Snapshots are whole whatever -k says; C1 and C2 are #52078's op counts, whose verdicts
# change only in the step that carries #52078 (the other steps compare snapshots alone).
STEP_TESTS = {"0.28.0": "snapshot or C1 or C2", "0.32.0": "C1 or snapshot"}
# The step the shards test splits in two and compares with: the mutants of its new lines run too.
STEP_MUTANTS = {"0.32.0": "2"}
# The records whose cases move between 0.28.0 and 0.33.0. The release steps are
# reviewed against a KB of these two only: the other records' cases are the matrix's
# and the generated suite's to check, and each record costs both sides of 5 steps.
STEP_RECORDS = (52078, 56531)


def gdn(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    return interrupts.run_child(
        [sys.executable, "-m", "gdn_review.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def release_diff(old: str, new: str, files: list[str]) -> str:
    text = []
    for path in files:
        before = release_trees.entry(old).path / path
        after = release_trees.entry(new).path / path
        a = before.read_text(encoding="utf-8").splitlines(True) if before.exists() else []
        b = after.read_text(encoding="utf-8").splitlines(True) if after.exists() else []
        text.append(
            "".join(difflib.unified_diff(a, b, f"a/{path}" if a else "/dev/null", f"b/{path}"))
        )
    return "".join(text)


MISSING = re.compile(r"No module named '([\w.]+)'|cannot import name '\w+' from '([\w.]+)'")


def kb_of(records: tuple[int | str, ...], root: Path) -> Path:
    """A copy of these records (a PR's number or a contract's id; with their snapshots and
    generated modules) under ``root``.

    A review reads (and checks) every record of its KB before it runs the ones asked for:
    on the whole KB that is most of its own time, so a review of one record gets a KB of it.
    """
    (root / "kb" / "snapshots").mkdir(parents=True)
    (root / "generated_tests").mkdir()
    for key in records:
        shutil.copy(ROOT / "kb" / f"{key}.yaml", root / "kb")
        shutil.copytree(ROOT / "kb" / "snapshots" / str(key), root / "kb" / "snapshots" / str(key))
        module = f"test_pr_{key}.py" if isinstance(key, int) else f"test_contract_{key}.py"
        shutil.copy(ROOT / "generated_tests" / module, root / "generated_tests")
    return root


def kb_options(records: tuple[int | str, ...], root: Path) -> list[str]:
    """``--kb`` and ``--generated`` of a copy of these records (``kb_of``) under ``root``."""
    kb = kb_of(records, root)
    return ["--kb", str(kb / "kb"), "--generated", str(kb / "generated_tests")]


def review_onto_0_33(diff: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """``review DIFF --onto 0.33.0`` against a KB of #52078 alone, its reports under tmp/out."""
    options = kb_options((52078,), tmp_path / "kb")
    return gdn("review", str(diff), "--onto", "0.33.0", "--out", str(tmp_path / "out"), *options)


def review_step(
    old: str, new: str, folder: Path, kb: Path
) -> tuple[subprocess.CompletedProcess, dict, Path]:
    """The builder's file alone where it imports on ``old``, else with the files the import says it
    needs."""
    files = [TARGET]
    for attempt in range(6):
        diff = folder / f"step-{old}.diff"
        diff.write_text(release_diff(old, new, files), encoding="utf-8")
        work = folder / f"work-{old}-{attempt}"
        done = gdn(
            "review",
            str(diff),
            "--onto",
            old,
            "--max-mutants",
            STEP_MUTANTS.get(old, "0"),
            "-k",
            STEP_TESTS.get(old, "snapshot"),
            "--out",
            str(folder),
            "--work",
            str(work),
            "--kb",
            str(kb / "kb"),
            "--generated",
            str(kb / "generated_tests"),
        )
        missing = MISSING.search(done.stderr) if done.returncode == 2 else None
        if not missing:
            break
        module = (missing.group(1) or missing.group(2)).replace(".", "/")
        files.append(
            f"{module}.py"
            if (release_trees.entry(new).path / f"{module}.py").exists()
            else f"{module}/__init__.py"
        )
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-3000:]
    return done, json.loads((folder / f"step-{old}.json").read_text(encoding="utf-8")), work


@pytest.fixture(scope="module")
def step_kb(tmp_path_factory) -> Path:
    return kb_of(STEP_RECORDS, tmp_path_factory.mktemp("step-kb"))


@pytest.fixture(scope="module")
def step_reviews(tmp_path_factory, step_kb):
    """Each consecutive-release step reviewed onto its older release (kept: each side's
    snapshots)."""
    found = {}
    for old, new in STEPS:
        folder = tmp_path_factory.mktemp(f"step-{old}")
        found[old] = (folder, *review_step(old, new, folder, step_kb))
    return found


def _unpatched_snapshot(work: Path, number: int) -> dict:
    (path,) = work.glob(f"*/snapshot-unpatched-{number}.json")
    return json.loads(path.read_text(encoding="utf-8"))


# Each record of a KB folder: its snapshots on the loaded vLLM, as snapshot_take takes them.
TAKE_EVERY_RECORD = """
import sys
from pathlib import Path
from gdn_review.run.snapshot_take import write_snapshot
for path in sorted(Path(sys.argv[1]).glob("*.yaml")):
    write_snapshot(path, Path(sys.argv[2], path.stem + ".json"))
"""


@pytest.fixture(scope="module")
def release_drift(step_reviews, step_kb, tmp_path_factory):
    """What the release matrix shows between consecutive releases, per record: {(record, from):
    rows}.

    The matrix compares each release's snapshots (taken by ``snapshot_take.take`` on that
    release) with ``matrix_report.drift_data``. Most releases' own snapshots are here
    already: the side without the change of the review onto it, and for 0.33.0 the
    stored ones (``gdn-review snapshot``); 0.29.0's are taken on its tree. The same
    function compares them.
    """
    from gdn_review.common import snapshots
    from gdn_review.matrix.matrix_report import drift_data

    records = {r.key: r for r in load_kb(step_kb / "kb").values()}
    reviewed = {old for old, _ in STEPS} | {RELEASES[-1]}
    # The releases after a reviewed step whose own step is not reviewed (0.29.0): every record's
    # snapshots in one child on its tree (one vLLM import).
    others = {
        new: tmp_path_factory.mktemp(f"snapshot-{new}") for _, new in STEPS if new not in reviewed
    }
    for release, folder in others.items():
        done = interrupts.run_child(
            [sys.executable, "-c", TAKE_EVERY_RECORD, str(step_kb / "kb"), str(folder)],
            env=release_trees.environment(release_trees.tree(release)),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    drift = {}
    for number, record in records.items():
        taken = {old: _unpatched_snapshot(step_reviews[old][3], number) for old, _ in STEPS}
        taken[RELEASES[-1]] = snapshots.stored(step_kb / "kb", number)[RELEASES[-1]]
        for release, folder in others.items():
            taken[release] = json.loads((folder / f"{number}.json").read_text(encoding="utf-8"))
        ordered = sorted(taken.items(), key=lambda item: RELEASES.index(item[0]))
        for row in drift_data(record, ordered, set(records))["rows"]:
            drift.setdefault((number, row["from"]), []).append(row)
    return drift


def _rows(rows: list[dict]) -> set:
    return {
        (row["case"], tuple(row["fields"]), tuple(e["number"] for e in row["explained_by"]))
        for row in rows
    }


@pytest.mark.slow
@pytest.mark.xdist_group("review_steps")
@pytest.mark.parametrize("old, new", STEPS, ids=[f"{a}-{b}" for a, b in STEPS])
def test_each_release_step_moves_what_the_matrix_shows(old, new, step_reviews, release_drift):
    folder, done, data, _ = step_reviews[old]
    assert data["onto"] == old and data["lands_in"] == new
    for record in data["records"]:
        shown = _rows(release_drift.get((record["key"], old), []))
        assert _rows(record["moved"]) == shown, (record["key"], _rows(record["moved"]) ^ shown)
    carried = [c["key"] for c in data["carried"]]
    markdown = (folder / f"step-{old}.md").read_text(encoding="utf-8")
    if old == "0.28.0":  # the step that carries #52078: its op counts change as the record says
        (record,) = [r for r in data["records"] if r["key"] == 52078]
        assert record["carries_pr"] and 52078 in carried
        claims = {c["id"]: c for c in record["claims"]}
        assert (claims["C1"]["before"], claims["C1"]["after"]) == ("fails", "holds")
        assert claims["C1"]["measured_before"] != claims["C1"]["measured_after"]
        assert claims["C2"]["measured_before"] != claims["C2"]["measured_after"]
        assert "#52078" in markdown and "kb/52078.yaml" in markdown
    if not carried:  # no recorded PR shipped in this step: the change is reported as unexplained
        assert (
            "**Unexplained change**" in markdown
            and "no recorded PR explains the change" in done.stdout
        )
    if any(
        record["moved"] for record in data["records"]
    ):  # --draft: the moved cases, measured with the change
        from gdn_review.kb import is_draft, load_record
        from gdn_review.review import review_files

        draft = load_record(review_files.write_draft(data, ROOT / "kb", 99999, folder))
        assert is_draft(draft) and draft.target.base_release == old
        moved = [(r["key"], row["case"]) for r in data["records"] for row in r["moved"]]
        assert (
            len({c for change in draft.target.changes for c in change.cases})
            == len(moved)
            == len(draft.cases)
        )
        first = next(r for r in data["records"] if r["moved"])
        case_id = first["moved"][0]["case"]
        assert (
            next(c for c in draft.cases if c.id == case_id).expect == first["expect_after"][case_id]
        )


@pytest.mark.slow
@pytest.mark.xdist_group("review_steps")
def test_the_matrix_command_shows_the_same_drift_for_the_step_that_moves(
    step_reviews, release_drift, step_kb, tmp_path
):
    """The step where fields move (0.31.0 -> 0.32.0, #56531): `gdn-review matrix` itself, both
    records."""
    from gdn_review.matrix import matrix_files, matrix_report

    records = {r.key: r for r in load_kb(step_kb / "kb").values()}
    _, _, data, _ = step_reviews["0.31.0"]
    assert any(record["moved"] for record in data["records"])
    # Both records in one matrix run: records that run a release share one pytest session.
    chosen = [arg for number in records for arg in ("--record", str(number))]
    done = gdn(
        "matrix",
        *chosen,
        "--vllm",
        "0.31.0",
        "--vllm",
        "0.32.0",
        "-k",
        "snapshot",
        "--kb",
        str(step_kb / "kb"),
        "--generated",
        str(step_kb / "generated_tests"),
        "--work",
        str(tmp_path / "work"),
        "--reports",
        str(tmp_path / "reports"),
        "--fail-on",
        "",
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for number, record in records.items():
        work = tmp_path / "work" / matrix_files.matrix_folder_name(number)
        rows = matrix_report.matrix_report(record, matrix_files.load_matrix(work), set(records))[
            "matrix"
        ]["drift"]["rows"]
        (reviewed,) = [r for r in data["records"] if r["key"] == number]
        assert (
            _rows(rows)
            == _rows(reviewed["moved"])
            == _rows(release_drift.get((number, "0.31.0"), []))
        )


def test_a_diff_that_does_not_apply_names_the_hunk_and_runs_nothing(tmp_path):
    diff = tmp_path / "old.diff"
    diff.write_text(release_diff("0.28.0", "0.29.0", [TARGET]), encoding="utf-8")
    done = review_onto_0_33(diff, tmp_path)
    assert done.returncode == 2, done.stderr
    assert (
        f"{diff}:" in done.stderr
        and f"{TARGET}: hunk 1 (@@ -" in done.stderr
        and "does not apply" in done.stderr
    )
    assert "running" not in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_change_that_needs_code_outside_the_diff_names_what_is_missing(tmp_path):
    diff = tmp_path / "jump.diff"  # 0.33.0's builder file alone, onto 0.28.0
    diff.write_text(release_diff("0.28.0", "0.33.0", [TARGET]), encoding="utf-8")
    done = gdn(
        "review",
        str(diff),
        "--onto",
        "0.28.0",
        "--max-mutants",
        "0",
        "--out",
        str(tmp_path / "out"),
        *kb_options((52078,), tmp_path / "kb"),  # a record of the builder's file: it runs
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "does not import on vLLM 0.28.0" in done.stderr
    assert "No module named 'vllm.model_executor.layers.mamba.checkpoint'" in done.stderr
    assert not (tmp_path / "out").exists()


def test_a_diff_outside_the_kb_affects_no_claim(tmp_path):
    diff = tmp_path / "docs.diff"
    diff.write_text(
        release_diff("0.32.0", "0.33.0", ["vllm/v1/kv_cache_interface.py"]) or "", encoding="utf-8"
    )
    assert diff.read_text(), (
        "the two releases' kv_cache_interface.py are the same: pick another file"
    )
    done = gdn("review", str(diff), "--onto", "0.32.0", "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "no recorded claim affected" in done.stderr.lower() + done.stdout.lower()
    assert "outside the KB" in (tmp_path / "out" / "docs.md").read_text(encoding="utf-8")


# --- The installed vLLM is never written: after a run, an interrupt, and a change that never
# returns.


def _installed_digest() -> str:
    _, root = loaded_release()
    digest = hashlib.sha256()
    for path in sorted((root / "vllm").rglob("*.py")):
        digest.update(str(path).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _never_returning_build() -> str:
    """The installed builder file with build() looping forever before its first statement."""
    version, root = loaded_release()
    source = (root / TARGET).read_text(encoding="utf-8")
    tree = ast.parse(source)
    (cls,) = [
        n
        for n in tree.body
        if isinstance(n, ast.ClassDef) and n.name == "GDNAttentionMetadataBuilder"
    ]
    (build,) = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "build"]
    first = (
        build.body[1]
        if isinstance(build.body[0], ast.Expr) and isinstance(build.body[0].value, ast.Constant)
        else build.body[0]
    )
    lines = source.splitlines(True)
    indent = " " * first.col_offset
    # Asleep, not spinning: a hang that burns a CPU only slows the tests beside it.
    lines.insert(
        first.lineno - 1,
        f"{indent}while True:  # never returns\n{indent}    __import__('time').sleep(3600)\n",
    )
    return "".join(
        difflib.unified_diff(
            source.splitlines(True), "".join(lines).splitlines(True), f"a/{TARGET}", f"b/{TARGET}"
        )
    )


@pytest.mark.slow
def test_a_change_whose_build_never_returns_is_stopped_and_leaves_vllm_as_it_was(tmp_path):
    before = _installed_digest()
    diff = tmp_path / "hang.diff"
    diff.write_text(_never_returning_build(), encoding="utf-8")
    # C1's tests take the unpatched side about a second; ten times that leaves a loaded machine
    # room, and the hang idles this test's worker for no longer than it must.
    done = gdn(
        "review",
        str(diff),
        "--record",
        "52078",
        "--timeout",
        "10",
        "-k",
        "C1",
        "--out",
        str(tmp_path / "out"),
        *kb_options((52078,), tmp_path / "kb"),
        timeout=900,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    text = (tmp_path / "out" / "hang.md").read_text(encoding="utf-8")
    assert "**patched side did not finish**: no result within 10 s: killed" in text
    assert "fail-on: breaks: #52078 C1: holds → not run" in done.stderr
    assert _installed_digest() == before


@pytest.mark.slow
@pytest.mark.xdist_group("review_steps")
def test_shards_merged_give_the_report_of_one_run(tmp_path, step_kb, step_reviews):
    """The step 0.32.0 -> 0.33.0, whose two records' cases move: one record per shard, each shard a
    whole review.

    The one run to compare with is the step's own review (same diff, selection and mutants).
    """
    before = _installed_digest()
    folder, _, _, _ = step_reviews["0.32.0"]
    diff = folder / "step-0.32.0.diff"
    common = [
        "--onto",
        "0.32.0",
        "-k",
        STEP_TESTS["0.32.0"],
        "--max-mutants",
        STEP_MUTANTS["0.32.0"],
        "--fail-on",
        "",
        "--kb",
        str(step_kb / "kb"),
        "--generated",
        str(step_kb / "generated_tests"),
    ]
    shards = []
    for index in (1, 2):
        done = gdn(
            "review",
            str(diff),
            *common,
            "--shard",
            f"{index}/2",
            "--out",
            str(tmp_path / f"shard{index}"),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        shards.append(str(tmp_path / f"shard{index}" / "step-0.32.0.json"))
    # The merge reads JSON and writes the report (no vLLM, no child): in this process.
    from click.testing import CliRunner

    from gdn_review.cli import main

    merged = CliRunner().invoke(
        main,
        ["review-merge", *shards, "--out", str(tmp_path / "merged"), "--fail-on", ""],
        catch_exceptions=False,
    )
    assert merged.exit_code == 0, merged.stderr
    one = (folder / "step-0.32.0.md").read_text(encoding="utf-8")
    assert (tmp_path / "merged" / "step-0.32.0.md").read_text(encoding="utf-8") == one
    assert "mutants of the new lines killed" in one and "### #52078" in one and "### #56531" in one
    assert _installed_digest() == before


def test_a_change_that_deletes_the_target_file_is_bad_input(tmp_path):
    source = (release_trees.entry("0.33.0").path / TARGET).read_text(encoding="utf-8")
    diff = tmp_path / "delete.diff"
    diff.write_text(
        "".join(difflib.unified_diff(source.splitlines(True), [], f"a/{TARGET}", "/dev/null")),
        encoding="utf-8",
    )
    done = review_onto_0_33(diff, tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert f"the change deletes {TARGET}, which records target" in done.stderr
    assert "running" not in done.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_change_that_breaks_a_contract_is_a_break(tmp_path):
    """Dropping update_block_table's NULL fill of padded rows breaks contract update_block_table:
    only its second-builder cases see it (the first builder's buffers hold the build's NULLs)."""
    version, root = loaded_release()
    source = (root / TARGET).read_text(encoding="utf-8")
    line = "            spec_indices[m.num_spec_decodes :].fill_(NULL_BLOCK_ID)\n"
    assert source.count(line) == 1, f"vLLM {version} has no such line"
    changed = source.replace(line, "")
    diff = tmp_path / "no-fill.diff"
    diff.write_text(
        "".join(
            difflib.unified_diff(
                source.splitlines(True), changed.splitlines(True), f"a/{TARGET}", f"b/{TARGET}"
            )
        ),
        encoding="utf-8",
    )
    done = gdn(
        "review",
        str(diff),
        "--record",
        "update_block_table",
        "--max-mutants",
        "0",
        "-k",
        "C4 or C2",
        "--out",
        str(tmp_path / "out"),
        *kb_options(("update_block_table",), tmp_path / "kb"),
        timeout=900,
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert "fail-on: breaks: contract update_block_table C4: holds → fails" in done.stderr, (
        done.stderr[-2000:]
    )
    text = (tmp_path / "out" / "no-fill.md").read_text(encoding="utf-8")
    assert "### contract update_block_table" in text and "claim(s) break" in text
