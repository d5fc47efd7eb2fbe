"""The two Python steps of a bundle's run.sh: the platform probe first, the summary last.

``probe``: vLLM picks its platform on first use, and its CUDA platform imports
vLLM's compiled kernels, which a bundle does not carry (and which were built
for another torch). Per release, the builder path is probed step by step
(``gdn_review.harness.probe``, a subprocess) on vLLM's CUDA platform; where
that platform cannot load, again with the builder's tensors on the GPU under
vLLM's CPU platform. The mode that worked on every release is written to
``OUT/platform.env`` for the later steps; each probe to ``OUT/probe-V.json``.

``summary``: gathers what the steps wrote (steps.jsonl, probes, each record's
matrix.json, bench.json) into ``OUT/bundle-run.json`` without judging claims
again (the reports in ``OUT/reports`` do that), and prints it.

    python -m gdn_review.export.bundle_run probe BUNDLE OUT
    python -m gdn_review.export.bundle_run summary BUNDLE OUT
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from gdn_review.common import interrupts, release_trees
from gdn_review.common.release_trees import CUDA_ON_CPU_PLATFORM
from gdn_review.kb.subjects import as_key, key_label
from gdn_review.run import evidence_file

RUN_FORMAT = "gdn-review-bundle-run/1"
PROBE_SECONDS = 300
MODES = {
    "cuda": {"VLLM_TARGET_DEVICE": "cuda"},
    "cuda tensors on the cpu platform": {
        "VLLM_TARGET_DEVICE": "cpu",
        CUDA_ON_CPU_PLATFORM: "1",
    },
    "cpu": {"VLLM_TARGET_DEVICE": "cpu"},
}


def _probe_once(bundle: Path, out: Path, version: str, mode: str) -> dict:
    # run.sh unpacked every release
    env = release_trees.environment(release_trees.tree(version, fetch=False))
    env.pop(CUDA_ON_CPU_PLATFORM, None)
    env.update(MODES[mode])
    scratch = out / f".probe-{version}.json"
    command = [
        sys.executable,
        "-m",
        "gdn_review.harness.probe",
        str(bundle / "probe-cases.json"),
        str(scratch),
    ]
    try:
        done = interrupts.run_child(
            command, env=env, capture_output=True, text=True, timeout=PROBE_SECONDS, check=False
        )
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        code = done.returncode
    except subprocess.TimeoutExpired:
        tail, code = [f"no answer in {PROBE_SECONDS} s"], None
    result = _read(scratch) or {
        "steps": [{"step": "probe", "ok": False, "error": " / ".join(tail) or f"exit {code}"}],
        "devices": {},
    }
    scratch.unlink(missing_ok=True)
    return {"mode": mode, "environment_variables": MODES[mode], "exit": code, "result": result}


def _worked(attempt: dict, device: str) -> bool:
    result = attempt["result"]
    if not all(step["ok"] for step in result.get("steps", [])):
        return False
    ran = result.get("devices", {}).get(device)
    return bool(ran) and not ran.get("skipped") and all(step["ok"] for step in ran["steps"])


def probe_releases(bundle: Path, out: Path, cuda: bool, say=print, torch_version: str = "") -> str:
    """Probe every release; write probe-V.json and platform.env (with ``TORCH``: the torch and
    whether CUDA is there, for run.sh to say); return the mode the later steps use."""
    manifest = json.loads((bundle / "bundle.json").read_text(encoding="utf-8"))
    works: dict[str, set[str]] = {mode: set() for mode in MODES}
    for version in manifest["releases"]:
        attempts = []
        for mode in ["cuda", "cuda tensors on the cpu platform"] if cuda else ["cpu"]:
            attempt = _probe_once(bundle, out, version, mode)
            attempts.append(attempt)
            for line in probe_lines(version, attempt):
                say(line)
            if _worked(attempt, "cpu" if mode == "cpu" else "cuda"):
                works[mode].add(version)
                if mode == "cuda":
                    break  # vLLM's own CUDA platform works: nothing to fall back to
        (out / f"probe-{version}.json").write_text(
            json.dumps({"version": version, "attempts": attempts}, indent=1, sort_keys=True) + "\n",
            encoding="utf-8",
        )
    everyone = set(manifest["releases"])
    if cuda and works["cuda"] == everyone:
        mode = "cuda"
    elif cuda and works["cuda tensors on the cpu platform"] | works["cuda"] == everyone:
        mode = "cuda tensors on the cpu platform"
    else:
        mode = "cpu"
    lines = [f"export {name}={value}" for name, value in MODES[mode].items()]
    lines.append(f"DEVICE={'cpu' if mode == 'cpu' else 'cuda'}")
    lines.append(f"MODE='{mode}'")
    lines.append(f"TORCH={shlex.quote(f'{torch_version}, CUDA: {cuda}')}")
    (out / "platform.env").write_text("\n".join(lines) + "\n", encoding="utf-8")
    say(f"mode for the checks and the bench: {mode}")
    return mode


def _read(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _text(path: Path) -> str:
    """A file a step writes, or "" where it wrote none."""
    return path.read_text(encoding="utf-8") if path.exists() else ""


def probe_lines(version: str, attempt: dict) -> list[str]:
    """One line per device of one attempt: the steps that ran, and the first that did not with its
    error."""
    probe, mode = attempt["result"], attempt["mode"]
    failed = next((s for s in probe.get("steps", []) if not s["ok"]), None)
    if failed:
        return [f"vLLM {version} [{mode}]: {failed['step']} failed: {failed['error']}"]
    lines = []
    for device, result in sorted(probe.get("devices", {}).items()):
        if result.get("skipped"):
            lines.append(f"vLLM {version} [{mode}] {device}: not run ({result['skipped']})")
            continue
        ran = [s["step"] for s in result["steps"] if s["ok"]]
        broken = next((s for s in result["steps"] if not s["ok"]), None)
        text = f"vLLM {version} [{mode}] {device}: ran {', '.join(ran) or 'nothing'}"
        if broken:
            text += f"; {broken['step']} failed: {broken['error']}"
        lines.append(text)
    return lines


def summarise(bundle: dict, out: Path) -> dict:
    steps = [json.loads(line) for line in _text(out / "steps.jsonl").splitlines() if line.strip()]
    probes = {version: _read(out / f"probe-{version}.json") for version in bundle["releases"]}
    matrices = {}
    for entry in bundle["records"]:
        matrix = _read(out / f"matrix-{entry['record']}" / "matrix.json")
        matrices[str(entry["record"])] = (
            None
            if matrix is None
            else [
                {
                    "version": r["version"],
                    "role": r["role"],
                    "pytest_exit": r["pytest_exit"],
                    "summary": r["summary"],
                    "evidence": f"matrix-{entry['record']}/{r['evidence']}"
                    if r.get("evidence")
                    else None,
                }
                for r in matrix["releases"]
            ]
        )
    bench = evidence_file.read_if_any(out / "bench.json")
    attempts = [a for p in probes.values() if p for a in p["attempts"]]
    environment = next(
        (a["result"]["environment"] for a in attempts if a["result"].get("environment")), {}
    )
    mode = next(
        (
            line.split("=", 1)[1].strip("'")
            for line in _text(out / "platform.env").splitlines()
            if line.startswith("MODE=")
        ),
        None,
    )
    return {
        "format": RUN_FORMAT,
        "bundle": {key: bundle.get(key) for key in ("created_at", "python", "releases", "bytes")},
        "mode": mode,
        "device": environment.get("cuda_device") or "cpu only",
        "torch": environment.get("torch_version"),
        "python": environment.get("python"),
        "steps": steps,
        "failed_steps": [s["step"] for s in steps if s["exit"] != 0],
        "probes": probes,
        "matrices": matrices,
        "bench": None
        if bench is None
        else {
            number: {
                key: result.get(key)
                for key in ("base", "head", "device", "verdict", "pooled", "cases", "seconds")
            }
            for number, result in bench.get("bench", {}).items()
        },
    }


def main(argv: list[str]) -> int:
    action, bundle_dir, out = argv[0], Path(argv[1]), Path(argv[2])
    if action == "probe":
        import torch

        probe_releases(bundle_dir, out, torch.cuda.is_available(), torch_version=torch.__version__)
        return 0
    bundle = json.loads((bundle_dir / "bundle.json").read_text(encoding="utf-8"))
    summary = summarise(bundle, out)
    (out / "bundle-run.json").write_text(
        json.dumps(summary, indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )
    lines = [
        f"device: {summary['device']}, torch {summary['torch']}, Python "
        f"{summary['python']}; checks ran as: {summary['mode']}"
    ]
    for version in bundle["releases"]:
        for attempt in (summary["probes"][version] or {"attempts": []})["attempts"]:
            lines += probe_lines(version, attempt)
    for number, runs in summary["matrices"].items():
        for run in runs or [{"version": "?", "summary": "no matrix result"}]:
            lines.append(f"{key_label(as_key(number))} on vLLM {run['version']}: {run['summary']}")
    for number, result in (summary["bench"] or {}).items():
        low, high = result["pooled"]["ci95"]
        lines.append(
            f"{key_label(as_key(number))} bench on {result['device']}: head/base "
            f"{result['pooled']['ratio']:.3f} [{low:.3f}, {high:.3f}]: "
            f"{result['verdict']}"
        )
    if summary["failed_steps"]:
        lines.append(f"failed steps: {'; '.join(summary['failed_steps'])}")
    (out / "summary.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
