"""A/B latency: the statistics on synthetic samples, and `gdn-review bench` on the real builders."""

from __future__ import annotations

import json
import random
import sys

import pytest

from gdn_review.common import interrupts, release
from gdn_review.run import bench
from tests.conftest import ROOT


def samples(center: float, spread: float, count: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [int(rng.gauss(center, spread)) for _ in range(count)]


@pytest.mark.parametrize(
    "head_center, expected",
    [(900, bench.SUPPORTED), (1000, bench.NOISE), (1100, bench.CONTRADICTED)],
)
def test_the_interval_decides_the_verdict(head_center, expected):
    base = samples(1000, 20, 300, 1)
    head = samples(head_center, 20, 300, 2)
    low, high = bench.bootstrap_ratio([base], [head], 500, random.Random(0))
    assert low <= head_center / 1000 * 1.02 and high >= head_center / 1000 * 0.98
    assert bench.verdict(low, high) == expected


def test_noisy_samples_give_a_wide_interval_and_no_verdict():
    base = samples(1000, 400, 30, 3)
    head = samples(970, 400, 30, 4)
    low, high = bench.bootstrap_ratio([base], [head], 500, random.Random(0))
    assert high - low > 0.1 and bench.verdict(low, high) == bench.NOISE


def test_pooled_ratio_is_the_geometric_mean_over_cases():
    base = [[100] * 5, [1000] * 5]
    head = [[90] * 5, [1100] * 5]
    assert bench._median_ratio(base, head) == pytest.approx((0.9 * 1.1) ** 0.5)


def _bench(*args: str):
    """`gdn-review bench` in a fresh process, from the project's root."""
    return interrupts.run_child(
        [sys.executable, "-m", "gdn_review.cli", "bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_bench_command_times_both_releases_and_writes_evidence(tmp_path):
    """The base from the release cache, the head the installed release."""
    evidence = tmp_path / "bench.json"
    head = str(release.installed())
    options = f"--record 52078 --releases 0.29.0,{head} --case single_request --max-seconds 2"
    done = _bench(*options.split(), "--evidence", str(evidence))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert (
        "single_request" in done.stdout
        and "head/base" in done.stdout
        and "verdict: " in done.stdout
    )
    data = json.loads(evidence.read_text(encoding="utf-8"))
    result = data["bench"]["52078"]
    assert (result["base"], result["head"], result["device"]) == ("0.29.0", head, "cpu")
    row = result["cases"][0]
    assert (
        row["samples"][0] >= 20
        and row["base_median_us"] > 0
        and row["ci95"][0] <= row["ratio"] <= row["ci95"][1]
    )
    assert result["verdict"] in {bench.SUPPORTED, bench.NOISE, bench.CONTRADICTED}
    sources = {release: env["vllm_source"] for release, env in result["environments"].items()}
    assert (
        sources["0.29.0"].startswith("unpacked on PYTHONPATH")
        and sources[head] == "installed distribution"
    )


def test_an_unknown_case_is_bad_input():
    done = _bench("--record", "52078", "--case", "no_such_case")
    assert done.returncode == 2 and "no case no_such_case" in done.stderr


def test_a_workers_platform_follows_its_device_unless_a_bundle_runs_cuda_on_the_cpu_platform():
    from gdn_review.run.bench import platform_for

    assert platform_for("cpu", {"VLLM_TARGET_DEVICE": "cuda"}) == "cpu"
    assert platform_for("cuda", {}) == "cuda"
    assert platform_for("cuda", {"VLLM_TARGET_DEVICE": "cpu"}) == "cuda"
    assert (
        platform_for("cuda", {"VLLM_TARGET_DEVICE": "cpu", "GDN_REVIEW_CUDA_ON_CPU_PLATFORM": "1"})
        == "cpu"
    )
