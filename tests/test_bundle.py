"""The offline bundle: what it carries, its limit, its script, and (slow) a dry run with no
network."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import types
from pathlib import Path

import pytest
from click.testing import CliRunner
from packaging.utils import canonicalize_name

from gdn_review.cli import main
from gdn_review.common import vllm_cache
from gdn_review.export import bundle as bundling
from gdn_review.export import bundle_dry_run, bundle_run, bundle_wheels
from gdn_review.generate import environment

ROOT = Path(__file__).resolve().parent.parent


def _names(distributions) -> set[str]:
    return {canonicalize_name(name) for name in distributions}


def test_baseline_stops_at_what_the_bundle_carries():
    baseline = _names(bundle_wheels.baseline_distributions())
    assert {"torch", "transformers", "pytest", "hypothesis", "numpy"} <= baseline
    # pydantic comes with transformers' typer here, but the GPU machine is not known to have it.
    assert not baseline & _names(bundle_wheels.CARRIED)


def test_what_the_bundle_assumes_is_on_the_gpu_machines_image():
    # The first H200 run (2026-12-04) stopped at "No module named 'httpx2'": here
    # huggingface_hub 2.x brought it into the baseline; the image's 1.33 does not.
    listed = (ROOT / "tests/fixtures/gpu-image-packages.txt").read_text().splitlines()
    image = {canonicalize_name(line) for line in listed if line and not line.startswith("#")}
    assert _names(bundle_wheels.baseline_distributions()) <= image


def test_carried_pins_are_what_vllm_needs_beyond_the_baseline_at_installed_versions():
    import importlib.metadata

    pins = {canonicalize_name(pin.name): pin.version for pin in bundle_wheels.carried_pins()}
    assert set(map(canonicalize_name, bundle_wheels.CARRIED)) <= set(pins)
    assert "pydantic-core" in pins  # pydantic's own requirement comes along
    assert not set(pins) & _names(bundle_wheels.baseline_distributions())
    assert pins["pydantic"] == importlib.metadata.version("pydantic")


def test_platform_arguments_name_the_python_and_every_manylinux():
    arguments = bundle_wheels._platform_arguments("3.12")
    assert arguments[arguments.index("--python-version") + 1] == "3.12"
    assert {"cp312", "abi3", "none"} <= {
        arguments[i + 1] for i, a in enumerate(arguments) if a == "--abi"
    }
    platforms = {arguments[i + 1] for i, a in enumerate(arguments) if a == "--platform"}
    # llguidance's wheel is 2_31
    assert {"manylinux2014_x86_64", "manylinux_2_31_x86_64"} <= platforms


def _manifest(**changes) -> dict:
    manifest = {
        "created_at": "2026-11-29T00:00:00Z",
        "python": "3.12",
        "baseline": list(bundle_wheels.BASELINE),
        "releases": ["0.28.0", "0.29.0", "0.33.0"],
        "records": [
            {
                "record": 52078,
                "label": "PR #52078",
                "file": "52078.yaml",
                "releases": ["0.28.0", "0.29.0", "0.33.0"],
                "bench": {"base": "0.28.0", "head": "0.29.0"},
            },
            {
                "record": 56531,
                "label": "PR #56531",
                "file": "56531.yaml",
                "releases": ["0.33.0"],
                "bench": None,
            },
        ],
        "wheels": [{"name": "pydantic", "version": "2", "file": "p.whl", "sha256": "0"}],
    }
    manifest.update(changes)
    return manifest


def test_run_script_is_valid_bash_and_runs_what_the_manifest_names(tmp_path):
    script = environment().get_template("bundle/run.sh.j2").render(manifest=_manifest(), max_mib=60)
    (tmp_path / "run.sh").write_text(script)
    assert (
        subprocess.run(["bash", "-n", str(tmp_path / "run.sh")], capture_output=True).returncode
        == 0
    )
    assert "gdn-review: generated" in script.splitlines()[1]
    assert (
        "--no-index" in script
        and "--require-hashes" in script
        and "sys.version_info[:2] != (3, 12)" in script
    )
    assert "matrix --record 52078 --vllm 0.28.0 --vllm 0.29.0 --vllm 0.33.0" in script
    assert "matrix --record 56531 --vllm 0.33.0 " in script
    assert "bench --record 52078 --device" in script and "--record 56531 --device" not in script
    # The reports take the evidence files there are: a failed step writes none.
    assert '"$OUT/matrix-56531/evidence-0.33.0.json"' in script
    assert '[ -f "$file" ] && EVIDENCE+=(--evidence "$file")' in script
    # The run's cache starts from the model info the bundle carries, where vllm_cache puts it.
    assert 'cp -R "$HERE/vllm-cache" "$WORK/cache/vllm-cache"' in script
    assert 'GDN_REVIEW_CACHE="$WORK/cache"' in script


def test_run_script_without_a_latency_claim_has_no_bench(tmp_path):
    manifest = _manifest(records=_manifest()["records"][1:])  # 56531: no latency claim
    script = environment().get_template("bundle/run.sh.j2").render(manifest=manifest, max_mib=60)
    assert "gdn_review.cli bench" not in script and "bench.json" not in script


def test_run_script_refuses_another_python(tmp_path):
    script = (
        environment()
        .get_template("bundle/run.sh.j2")
        .render(manifest=_manifest(python="2.7"), max_mib=60)
    )
    (tmp_path / "run.sh").write_text(script)
    done = subprocess.run(
        ["bash", str(tmp_path / "run.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable},
    )
    assert done.returncode == 2
    assert "wheels are for Python 2.7" in done.stderr
    # it stopped before installing anything
    assert (tmp_path / "out" / "steps.jsonl").read_text() == ""


def test_out_must_be_empty_unless_forced(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    result = CliRunner().invoke(
        main, ["bundle", "--out", str(tmp_path / "out"), "--vllm", "0.33.0"]
    )
    assert result.exit_code == 2
    assert "exists and is not empty (--force replaces it)" in result.output
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_unknown_release_is_bad_input(tmp_path):
    result = CliRunner().invoke(main, ["bundle", "--out", str(tmp_path / "out"), "--vllm", "0.29"])
    assert result.exit_code == 2
    assert "give a plain release number" in result.output or "0.29" in result.output
    assert not (tmp_path / "out").exists()


def test_dry_run_needs_this_python():
    result = CliRunner().invoke(main, ["bundle", "--out", "x", "--dry-run", "--python", "2.7"])
    assert result.exit_code == 2
    assert "--dry-run runs the bundle with this Python" in result.output


def test_over_the_limit_nothing_is_written(tmp_path, monkeypatch):
    # The wheels and releases are stood in by small files: this checks the limit and the staging,
    # not pip.
    wheel = tmp_path / "cache" / "w-1-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"x" * 4096)
    monkeypatch.setattr(bundle_wheels, "carried_pins", lambda: [bundle_wheels.Pin("w", "1")])
    monkeypatch.setattr(bundle_wheels, "fetch_wheels", lambda pins, python, say: [wheel])
    # Each release a tree with its version file; 0.29.0's vLLM cache has what vLLM learnt of the
    # model class, beside a file that is not vLLM's and one that is not valid.
    monkeypatch.setenv("GDN_REVIEW_CACHE", str(tmp_path / "cache"))
    trees = {}
    for version in ("0.28.0", "0.29.0", "0.33.0"):
        trees[version] = tmp_path / "cache" / "trees" / version
        (trees[version] / "vllm").mkdir(parents=True)
        (trees[version] / "vllm" / "_version.py").write_text(f"__version__ = '{version}'\n")
    learnt = Path(vllm_cache.cache_root(str(trees["0.29.0"] / "vllm"))) / "modelinfos"
    learnt.mkdir(parents=True)
    (learnt / "vllm-Qwen3NextForCausalLM.json").write_text('{"hash": "ab", "modelinfo": {}}')
    (learnt / "notes.txt").write_text("not vLLM's")
    (learnt / "broken.json").write_text('{"hash": ')
    monkeypatch.setattr(
        bundling.release_trees,
        "entry",
        lambda version, say=None: types.SimpleNamespace(path=trees[version]),
    )
    monkeypatch.setattr(
        bundling,
        "pack_release",
        lambda release, destination, say: destination.write_bytes(b"y" * 100_000),
    )
    from gdn_review.kb import load_kb

    records = load_kb(ROOT / "kb")
    with pytest.raises(bundle_wheels.BundleError, match=r"over the limit of 0\.1 MiB \(project"):
        bundling.write_bundle(
            tmp_path / "out",
            records,
            ["0.28.0", "0.29.0", "0.33.0"],
            max_bytes=100_000,
            project_root=ROOT,
            say=lambda line: None,
        )
    # no bundle, no staging folder left
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
    manifest = bundling.write_bundle(
        tmp_path / "out",
        records,
        ["0.28.0", "0.29.0", "0.33.0"],
        max_bytes=10 << 20,
        project_root=ROOT,
        say=lambda line: None,
    )
    assert manifest["bytes"] <= 10 << 20
    carried = {
        r["record"]: r
        for r in json.loads((tmp_path / "out" / "bundle.json").read_text())["records"]
    }
    assert carried[52078]["bench"] == {"base": "0.28.0", "head": "0.29.0"}
    with tarfile.open(tmp_path / "out" / "project.tar.xz") as packed:
        names = packed.getnames()
    assert "project/generated_tests/test_pr_52078.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert manifest["model_info"] == {
        "0.28.0": [],
        "0.29.0": ["vllm-Qwen3NextForCausalLM.json"],
        "0.33.0": [],
    }
    seeded = tmp_path / "out" / "vllm-cache" / learnt.parent.name / "modelinfos"
    assert sorted(p.name for p in seeded.iterdir()) == ["vllm-Qwen3NextForCausalLM.json"]
    import hashlib

    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert (
        tmp_path / "out" / "wheels" / "requirements.txt"
    ).read_text() == f"w==1 --hash=sha256:{digest}\n"


def test_a_latency_claim_needs_its_releases_carried(tmp_path):
    from gdn_review.kb import load_kb

    records = load_kb(ROOT / "kb")
    with pytest.raises(
        bundle_wheels.BundleError, match="latency claim's releases 0.28.0 are not carried"
    ):
        bundling.write_bundle(
            tmp_path / "out",
            records,
            ["0.29.0", "0.33.0"],
            project_root=ROOT,
            say=lambda line: None,
        )


def test_probe_lines_say_what_ran_and_the_first_error():
    attempt = {
        "mode": "cuda",
        "result": {
            "steps": [
                {"step": "import torch", "ok": True},
                {
                    "step": "vLLM platform (cuda)",
                    "ok": False,
                    "error": "ModuleNotFoundError: No module named 'vllm._C_stable_libtorch'",
                },
            ],
            "devices": {},
        },
    }
    assert bundle_run.probe_lines("0.33.0", attempt) == [
        "vLLM 0.33.0 [cuda]: vLLM platform (cuda) failed: "
        "ModuleNotFoundError: No module named 'vllm._C_stable_libtorch'"
    ]
    attempt = {
        "mode": "cuda tensors on the cpu platform",
        "result": {
            "steps": [{"step": "import vllm", "ok": True}],
            "devices": {
                "cpu": {"skipped": None, "steps": [{"step": "build()", "ok": True}]},
                "cuda": {
                    "skipped": None,
                    "steps": [
                        {"step": "VllmConfig and builder", "ok": True},
                        {"step": "build()", "ok": False, "error": "RuntimeError: x"},
                    ],
                },
            },
        },
    }
    assert bundle_run.probe_lines("0.33.0", attempt) == [
        "vLLM 0.33.0 [cuda tensors on the cpu platform] cpu: ran build()",
        "vLLM 0.33.0 [cuda tensors on the cpu platform] cuda: ran "
        "VllmConfig and builder; build() failed: RuntimeError: x",
    ]


@pytest.mark.slow
def test_default_bundle_for_the_gpu_machine_is_within_60_mib(tmp_path):
    result = CliRunner().invoke(
        main, ["bundle", "--out", str(tmp_path / "gpu")], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "gpu" / "bundle.json").read_text())
    size = sum(p.stat().st_size for p in (tmp_path / "gpu").rglob("*") if p.is_file())
    assert size <= 60 << 20, f"{size / (1 << 20):.1f} MiB"
    assert manifest["python"] == "3.12"
    assert all("cp311" not in w["file"] for w in manifest["wheels"])
    assert subprocess.run(["bash", "-n", str(tmp_path / "gpu" / "run.sh")]).returncode == 0


@pytest.mark.slow
def test_dry_run_passes_from_the_bundle_alone_with_no_network(tmp_path):
    """The bundle's run.sh in a bare environment, with no network where ``unshare -rn`` works; its
    matrix step is also the release matrix's end-to-end check on two real releases."""
    # A small selection keeps CI short: one record on the two releases of its latency claim,
    # its C1 tests (probes, matrix, bench and report all run; the default bundle's size is
    # checked above).
    selection = ["--record", "52078", "--vllm", "0.28.0", "--vllm", "0.29.0", "-k", "C1"]
    result = CliRunner().invoke(
        main,
        [
            "bundle",
            "--out",
            str(tmp_path / "bundle"),
            *selection,
            "--dry-run",
            "--work",
            str(tmp_path / "work"),
        ],
        catch_exceptions=False,
    )
    out = tmp_path / "work" / "evidence"
    log = (out / "run.log").read_text() if (out / "run.log").exists() else result.output
    assert result.exit_code == 0, log[-3000:]
    if bundle_dry_run.no_network_prefix():
        assert "no network" in result.output
    else:  # said, not hidden: the rest still runs from the bundle alone
        assert "network not cut (no unshare here)" in result.output
    summary = json.loads((out / "bundle-run.json").read_text())
    assert summary["failed_steps"] == []
    assert summary["mode"] == "cpu"
    import torch  # the workers' torch, the bare environment's too

    assert f"torch {torch.__version__}, CUDA: False; checks and bench run as: cpu" in log
    for version, probe in summary["probes"].items():
        (attempt,) = probe["attempts"]
        assert all(step["ok"] for step in attempt["result"]["steps"]), (version, attempt)
        assert all(step["ok"] for step in attempt["result"]["devices"]["cpu"]["steps"]), (
            version,
            attempt,
        )
        assert attempt["result"]["devices"]["cuda"]["skipped"].startswith("needs CUDA")
    for number, runs in summary["matrices"].items():
        assert runs, number
        for run in runs:
            evidence = json.loads((out / run["evidence"]).read_text())
            outcomes = [t["outcome"] for t in evidence["tests"]]
            assert "error" not in outcomes, (number, run)
            assert outcomes.count("passed") > 0, (number, run)
            # vLLM came from the bundle's own release cache, not from this machine's install.
            assert str(tmp_path / "work") in evidence["environment"]["vllm_path"]
            # the base release runs every claim: those of an improvement fail there
            if run["role"] != "base":
                assert run["pytest_exit"] == 0, (number, run)
    bench = summary["bench"]["52078"]
    assert bench["device"] == "cpu" and bench["verdict"] in {
        "supported",
        "not distinguishable from noise",
        "contradicted",
    }
    report = (out / "reports" / "52078.md").read_text()
    assert "C4" in report
    # The matrix step: C1 fails on 0.28.0 (claims run whatever their range on the base) with
    # aten.ge 2, holds on 0.29.0 with 1, releases run side by side, each from its unpacked tree.
    assert "C1: discriminates: 0.28.0 fails (aten.ge 1–2), 0.29.0 holds (aten.ge 1)" in log
    matrix = json.loads((out / "matrix-52078" / "matrix.json").read_text())
    assert [(r["version"], r["claims_on_any_release"]) for r in matrix["releases"]] == [
        ("0.28.0", True),
        ("0.29.0", False),
    ]
    environment = json.loads((out / "matrix-52078" / "evidence-0.28.0.json").read_text())[
        "environment"
    ]
    assert environment["claim_ranges_ignored"] is True
    assert environment["vllm_source"].startswith("unpacked on PYTHONPATH")
    matrix_report = (out / "reports" / "matrix" / "52078.md").read_text()
    assert "aten.ge, most per build(): 2 (0.28.0) → 1 (0.29.0)" in matrix_report
    # The PR is a refactor: no field of any case changes from 0.28.0 to 0.29.0.
    assert "No field of any case changed value between consecutive releases." in matrix_report
    assert "Unexplained drift: none." in matrix_report


def test_cuda_on_the_cpu_platform_needs_both_settings(monkeypatch):
    import importlib

    # the package exports a function of that name
    env = importlib.import_module("gdn_review.harness.environment")
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cpu")
    monkeypatch.delenv(env.CUDA_ON_CPU_PLATFORM, raising=False)
    assert not env.cuda_on_cpu_platform()
    monkeypatch.setenv(env.CUDA_ON_CPU_PLATFORM, "1")
    assert env.cuda_on_cpu_platform()
    monkeypatch.setenv("VLLM_TARGET_DEVICE", "cuda")
    assert not env.cuda_on_cpu_platform()  # vLLM's own CUDA platform: nothing to say


def test_matrix_plans_from_the_cache_where_no_vllm_is_installed():
    from gdn_review.kb import load_kb
    from gdn_review.matrix import matrix_files, release_plan

    record = next(r for r in load_kb(ROOT / "kb").values() if r.key == 52078)
    planned = release_plan.plan(record, None, ["0.33.0", "0.28.0", "0.29.0"])
    assert [(p.version, p.role, p.installed) for p in planned] == [
        ("0.28.0", "base", False),
        ("0.29.0", "head", False),
        ("0.33.0", "later", False),
    ]
    with pytest.raises(matrix_files.MatrixError, match="no release ends the default range"):
        release_plan.plan(record, None)  # no index answered and no release at hand
    assert release_plan.plan(record, None, newest="0.34.0")[-1] == release_plan.Planned(
        "0.34.0", "later", False
    )
