"""The evidence file: its format, reading and checking it, writing it whole, and the parts it holds.

Every stage reads and writes evidence through this module; no other module
opens an evidence file. A file holds the tests of the latest ``run`` (or
``mutate``'s baseline, or a release of the matrix), the ``reach`` of each
record's own lines that those tests traced (``mutation.own_reach``; written with
the tests, never carried over), and parts that other commands add:
``mutation`` (``mutate``: per record, the release it ran on) and ``diff``
(an open PR's diff side: per record, the release the diff was applied onto).
``bench`` keeps a file of its own (``bench`` part, no tests).
A command that rewrites a file takes the parts it does not produce first
(``take_parts``) and puts back, per record, those measured on the same vLLM
release as its new tests (``carry_over``); a part of another release is
dropped and the command says so.

Each part names the record it measured by the sha256 of the record's file as
it was when the part ran (``record_sha256``: the tests' per record at the
top, a mutation record's, a diff side's, a bench result's), so a report can
say which parts an edit of the record left stale. Evidence written before
these hashes has none: unknown, never stale.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Callable

from gdn_review.common.files import atomic_write
from gdn_review.common.vocabulary import NOT_MEASURED, VERDICTS, MutantStatus, Outcome, SkipKind

FORMAT = "gdn-review-evidence/3"
# Format 1 had one outcome, "error", for whatever raised outside a test's call (a fixture,
# the platform, VllmConfig): read as "could not run". Format 2 tells apart where an exception
# came from (harness.origin, run.plugin): could not run and error in the check, never a verdict.
# Format 3 gives each skipped test its ``skip_kind``; ``upgraded`` reads those of formats 1 and 2
# from the words their harness began a skip's reason with (OLDER_SKIP_KINDS; any other: a plain
# skip), never "absent": they cannot tell a release that lacks an open PR's addition from an
# adaptation it refuses, so such a claim reads not applicable, not pending.
OLDER_FORMATS = ("gdn-review-evidence/1", "gdn-review-evidence/2")
OLDER_SKIP_KINDS = (SkipKind.NEEDS_CUDA, SkipKind.NOT_APPLICABLE)
DEFAULT_PATH = Path(".gdn-review") / "evidence.json"
BENCH_PATH = Path(".gdn-review") / "bench.json"  # `gdn-review bench`'s own file
PARTS = ("mutation", "diff")  # what other commands add to a file of tests

# A failed test's ``failure``: what it measured (an assertion on measured values, or the
# exception a case expects), or what the code under test raised on its own.
MEASURED = "measured"
SHA256 = re.compile(r"[0-9a-f]{64}")


class EvidenceError(Exception):
    """An evidence file that cannot be read or is not evidence (bad input)."""


# --- Writing --------------------------------------------------------------------


def record_sha256(path: Path) -> str | None:
    """The sha256 (hex) of a record's file as it is now; None where it cannot be read."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def write(path: Path, data: dict) -> None:
    """Write an evidence document whole or not at all (``format`` set here, an old one upgraded)."""
    old = data.get("format") in OLDER_FORMATS
    document = {**(upgraded(data) if old else data), "format": FORMAT}
    atomic_write(Path(path), json.dumps(document, indent=1, sort_keys=True, default=str) + "\n")


def promote(staged: Path, path: Path) -> None:
    """Make a staged evidence file (written aside while a run was going) the file at ``path``, in
    one rename."""
    import os

    os.replace(staged, path)


def add_part(path: Path, kind: str, key, part: dict) -> None:
    """Put one record's part (``diff``) into the file at ``path``, replacing that record's."""
    data = read(path)
    data.setdefault(kind, {})[str(key)] = part
    write(path, data)


def set_mutation(path: Path, section: dict) -> None:
    """Replace the ``mutation`` part of the file at ``path`` (``mutate``'s results)."""
    data = read(path)
    data["mutation"] = section
    write(path, data)


def bench_document(results: dict[str, dict], finished_at: str, environment: dict) -> dict:
    """A file of bench results: no tests, a ``bench`` part per record (``results`` keyed by
    record)."""
    return {"finished_at": finished_at, "environment": environment, "tests": [], "bench": results}


# --- Reading --------------------------------------------------------------------


def read(path: Path) -> dict:
    """The document in an evidence file, its format checked; EvidenceError names the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EvidenceError(
            f"{path}: no such evidence file (run `gdn-review run` or pytest "
            "on generated_tests/ first)"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise EvidenceError(f"{path}: cannot read evidence: {error}") from None
    if not isinstance(data, dict) or data.get("format") not in (FORMAT, *OLDER_FORMATS):
        raise EvidenceError(f"{path}: not gdn-review evidence (expected format {FORMAT!r})")
    if not isinstance(data.get("tests"), list):
        raise EvidenceError(f"{path}: evidence has no 'tests' list")
    return upgraded(data)


def upgraded(data: dict) -> dict:
    """An older format's document in today's words (format 1's "error"; a skip's kind)."""
    if data.get("format") == FORMAT:
        return data
    tests = []
    for test in data.get("tests", []):
        if isinstance(test, dict) and test.get("outcome") == "error":
            reason = test.get("reason") or "raised outside the test's call"
            cannot = Outcome.COULD_NOT_RUN
            test = {**test, "outcome": cannot, "reason": f"{cannot}: {reason}"}
        if isinstance(test, dict) and test.get("outcome") == Outcome.SKIPPED:
            first = str(test.get("reason") or "").partition(":")[0]
            kind = first if first in OLDER_SKIP_KINDS else SkipKind.OTHER
            test = {"skip_kind": kind, **test}
        tests.append(test)
    return {**data, "tests": tests, "format": FORMAT}


def read_if_any(path: Path) -> dict | None:
    """The document in ``path``, or None where there is none or it is not evidence."""
    try:
        return read(path)
    except EvidenceError:
        return None


def release_of(data: dict) -> str | None:
    """The vLLM release a document's tests ran on (None: not said)."""
    return (data.get("environment") or {}).get("vllm_version")


def with_bench(path: Path, say: Callable[[str], None] = lambda line: None) -> tuple[Path, ...]:
    """The evidence files a report reads: ``path``, plus the last `gdn-review bench` results where
    there are some."""
    if BENCH_PATH.exists() and Path(path) != BENCH_PATH:
        say(f"with latency evidence from {BENCH_PATH} (gdn-review bench)")
        return (Path(path), BENCH_PATH)
    return (Path(path),)


def tests_release(path: Path) -> str:
    """The vLLM release the tests of the file at ``path`` ran on; EvidenceError when it does not
    say."""
    release = release_of(read(path))
    if not release:
        raise EvidenceError(f"{path}: the evidence does not name the vLLM release it ran on")
    return str(release)


def take_tests(path: Path) -> dict | None:
    """The document of a session's file that is cut up per record (``record_slice``); the file is
    removed.

    None where the session wrote none (it crashed before its end).
    """
    data = read_if_any(path)
    Path(path).unlink(missing_ok=True)
    return data


def tests_of(path: Path) -> list[dict]:
    """The test entries of the file at ``path``."""
    return read(path)["tests"]


def record_slice(data: dict, key) -> dict:
    """A document cut down to one record's tests (and its claim and risk index)."""
    prefix = f"{key}:"
    tests = [t for t in data.get("tests", []) if t.get("record") == key]
    broke = any(t["outcome"] in {Outcome.FAILED, *NOT_MEASURED} for t in tests)
    ran_alone = 1 if broke else (0 if tests else 5)
    return {
        **data,
        # pytest's code as if the session had held this record alone: 1 when a test failed.
        "pytest_exit_status": ran_alone,
        "tests": tests,
        "claims": {k: v for k, v in data.get("claims", {}).items() if k.startswith(prefix)},
        "risks": {k: v for k, v in data.get("risks", {}).items() if k.startswith(prefix)},
    }


# --- Parts carried from one file to the next --------------------------------------


def take_parts(path: Path) -> dict:
    """The parts of the file at ``path`` that other commands added; the file is removed.

    A command that writes new tests calls it first: evidence left by an earlier
    run must never pass for this one's, and its parts go back with ``carry_over``.
    """
    data = read_if_any(path)
    Path(path).unlink(missing_ok=True)
    if data is None:
        return {}
    return {kind: data[kind] for kind in PARTS if isinstance(data.get(kind), dict)}


def carry_over(path: Path, parts: dict) -> list[str]:
    """Put ``parts`` (from ``take_parts``) back into the new file at ``path``; what was kept or
    dropped, as lines.

    Of a kind the new run produced itself, only the records it did not measure are carried over.
    """
    if not parts or not Path(path).exists():
        return []
    data = read(path)
    release = release_of(data)
    lines = []
    for kind, old in parts.items():
        records = old.get("records") if kind == "mutation" else old
        if not isinstance(records, dict):
            continue
        new = data.get(kind) if isinstance(data.get(kind), dict) else None
        have = set((new or {}).get("records", {}) if kind == "mutation" else (new or {}))
        kept, dropped = [], []
        for number, info in records.items():
            if number in have:
                continue
            same = isinstance(info, dict) and info.get("release") == release
            (kept if same else dropped).append((number, info))
        for number, info in dropped:
            was = info.get("release") if isinstance(info, dict) else "?"
            lines.append(
                f"evidence: dropped the {kind} results of record {number} (vLLM "
                f"{was}; this run is on {release})"
            )
        if not kept:
            continue
        if kind == "mutation":
            data["mutation"] = _merged_mutation(old, new, kept)
        else:
            data[kind] = {**(new or {}), **dict(kept)}
        since = min(str(info.get("finished_at", "?")) for _, info in kept)
        tested = {str(test.get("record")) for test in data.get("tests", [])}
        names = ", ".join(number for number, _ in kept if number in tested)
        if names:
            lines.append(
                f"evidence: kept the {kind} results of {names} (vLLM {release}; from {since})"
            )
        if untested := ", ".join(number for number, _ in kept if number not in tested):
            lines.append(
                f"evidence: the {kind} results of {untested} stay in the file, but this run has no "
                "test of it: its record is gone from the KB or was not selected"
            )
    write(path, data)
    return lines


def _merged_mutation(old: dict, new: dict | None, kept: list[tuple[str, dict]]) -> dict:
    """A mutation part holding the new run's records and the ``kept`` records of the old one."""
    section = new or {key: value for key, value in old.items() if key not in ("records", "mutants")}
    section.setdefault("records", {})
    section.setdefault("mutants", [])
    numbers = {number for number, _ in kept}
    for number, info in kept:
        section["records"][number] = {
            **info,
            "finished_at": info.get("finished_at") or old.get("finished_at"),
        }
    section["mutants"] += [
        m for m in old.get("mutants", []) if isinstance(m, dict) and str(m.get("record")) in numbers
    ]
    return section


# --- Several files read as one --------------------------------------------------


@dataclasses.dataclass
class Evidence:
    """Evidence files merged: each test keeps the index of the file (``environment``) it came
    from."""

    tests: list[dict]
    environments: list[dict]
    finished_at: list[str]
    mutants: list[dict] = dataclasses.field(default_factory=list)  # results of `gdn-review mutate`
    mutation: dict = dataclasses.field(default_factory=dict)  # record -> release, gone hunks, notes
    # record -> device -> `gdn-review bench` result
    bench: dict = dataclasses.field(default_factory=dict)
    diff: dict = dataclasses.field(default_factory=dict)  # record -> the open PR's diff side
    # record -> which cases execute its PR's own lines (mutation.own_reach; written with the tests)
    reach: dict = dataclasses.field(default_factory=dict)
    # Per file (as environments): record -> the sha256 of its file when the tests ran ({}: unknown).
    record_hashes: list[dict] = dataclasses.field(default_factory=list)

    def tests_record_hash(self, environment: int, key) -> str | None:
        """The sha256 of record ``key``'s file when the tests of file ``environment`` ran (None:
        unknown)."""
        hashes = (
            self.record_hashes[environment] if 0 <= environment < len(self.record_hashes) else {}
        )
        return hashes.get(str(key))


def load(paths: list[Path]) -> Evidence:
    """Read and check evidence files and merge them; EvidenceError names the file and the field."""
    merged = Evidence([], [], [])
    for path in paths:
        _merge(merged, read(path), path)
    return merged


def _merge(merged: Evidence, data: dict, path: Path) -> None:
    index = len(merged.environments)
    record_hashes = data.get("record_sha256") or {}
    if not isinstance(record_hashes, dict) or any(
        _hash_problem(v) or v is None for v in record_hashes.values()
    ):
        raise EvidenceError(
            f"{path}: 'record_sha256' must map each record to the sha256 "
            "(hex) of its file when the tests ran"
        )
    merged.record_hashes.append({str(number): digest for number, digest in record_hashes.items()})
    merged.environments.append(data.get("environment") or {})
    merged.finished_at.append(str(data.get("finished_at", "")))
    for position, test in enumerate(data["tests"]):
        if problem := _test_problem(test):
            raise EvidenceError(f"{path}: tests[{position}]: {problem}")
        merged.tests.append({**test, "risks": list(test.get("risks") or []), "environment": index})
    section = data.get("mutation")
    if section is not None:
        _merge_mutation(merged, section, path, index)
    for number, side in (data.get("diff") or {}).items():
        if problem := _diff_problem(side):
            raise EvidenceError(f"{path}: diff.{number}: {problem}")
        merged.diff[str(number)] = side
    for number, part in (data.get("reach") or {}).items():
        if not isinstance(part, dict) or not isinstance(part.get("state", ""), str):
            raise EvidenceError(f"{path}: reach.{number}: expected an object with a 'state'")
        if "state" in part:  # judged (a part only traced, by a run that stopped early, is not)
            merged.reach[str(number)] = part
    for number, result in (data.get("bench") or {}).items():
        if not (
            isinstance(result, dict)
            and isinstance(result.get("pooled"), dict)
            and isinstance(result.get("cases"), list)
        ):
            raise EvidenceError(
                f"{path}: bench.{number}: expected a `gdn-review bench` result (pooled, cases)"
            )
        if problem := _hash_problem(result.get("record_sha256")):
            raise EvidenceError(f"{path}: bench.{number}: {problem}")
        # Per device; a later file wins. The file's time is the result's (reports say its age).
        finished = result.get("finished_at") or str(data.get("finished_at", ""))
        merged.bench.setdefault(str(number), {})[result.get("device") or "cpu"] = {
            **result,
            "finished_at": finished,
        }


def _merge_mutation(merged: Evidence, section, path: Path, index: int) -> None:
    if not isinstance(section, dict) or not isinstance(section.get("mutants"), list):
        raise EvidenceError(f"{path}: 'mutation' must be an object with a 'mutants' list")
    for position, mutant in enumerate(section["mutants"]):
        if problem := _mutant_problem(mutant):
            raise EvidenceError(f"{path}: mutation.mutants[{position}]: {problem}")
        merged.mutants.append({**mutant, "environment": index})
    for number, info in (section.get("records") or {}).items():
        if not isinstance(info, dict):
            raise EvidenceError(f"{path}: mutation.records.{number}: expected an object")
        if problem := _hash_problem(info.get("record_sha256")):
            raise EvidenceError(f"{path}: mutation.records.{number}: {problem}")
        finished = info.get("finished_at") or section.get("finished_at")
        merged.mutation[str(number)] = {**info, "finished_at": finished}


# --- What a well-formed part looks like -------------------------------------------


def _hash_problem(value) -> str | None:
    """What is wrong with a part's ``record_sha256`` (absent or null: unknown, which is fine)."""
    if value is None or (isinstance(value, str) and SHA256.fullmatch(value)):
        return None
    return "'record_sha256' must be a sha256 in hex (the record file's, when the part ran)"


def _diff_problem(side) -> str | None:
    """What is wrong with one record's diff side (written by `gdn-review run` from a review of the
    PR's diff)."""
    if not isinstance(side, dict) or not isinstance(side.get("claims"), dict):
        return "expected an object with 'claims' (claim id -> verdict, reason, measured)"
    for key in ("release", "diff", "finished_at"):
        if not isinstance(side.get(key), str):
            return f"{key!r} must be a string"
    if not re.fullmatch(r"[0-9]+\.[0-9]+\.[0-9]+", side["release"]):
        return f"'release': {side['release'][:40]!r} is not a release (X.Y.Z)"
    if not re.fullmatch(r"[0-9T:+.Z-]{10,40}", side["finished_at"]):
        return f"'finished_at': {side['finished_at'][:40]!r} is not a time"
    if not re.fullmatch(r"[0-9a-f]{0,64}", str(side.get("diff_sha256", ""))):
        return "'diff_sha256': not a sha256 in hex"
    if problem := _hash_problem(side.get("record_sha256")):
        return problem
    if not isinstance(side.get("moved", 0), int) or isinstance(side.get("moved", 0), bool):
        return "'moved' must be a count"
    name = re.compile(r"[A-Za-z0-9_.-]{1,80}")
    for index, row in enumerate(side.get("unexplained") or []):
        if not (
            isinstance(row, dict)
            and isinstance(row.get("case"), str)
            and name.fullmatch(row["case"])
            and isinstance(row.get("fields"), list)
            and all(isinstance(f, str) and name.fullmatch(f) for f in row["fields"])
        ):
            return f"unexplained[{index}]: expected a case id and its field names"
    for claim_id, row in side["claims"].items():
        if (
            not isinstance(row, dict)
            or row.get("verdict") not in (*VERDICTS, Outcome.NOT_RUN)
            or not isinstance(row.get("reason", ""), str)
        ):
            return f"claims.{claim_id}: expected an object with a verdict ({', '.join(VERDICTS)})"
        if not isinstance(row.get("measured", ""), str) or not isinstance(
            row.get("failing", []), list
        ):
            return f"claims.{claim_id}: 'measured' must be a string and 'failing' a list"
    return None


def _mutant_problem(mutant) -> str | None:
    from gdn_review.kb.subjects import is_record_key  # only a report reads: the plugin stays light

    if not isinstance(mutant, dict):
        return f"expected an object, got {type(mutant).__name__}"
    if not is_record_key(mutant.get("record")) or not isinstance(mutant.get("id"), str):
        return "'record' (a PR number or a contract id) and 'id' (string) are required"
    if mutant.get("status") not in set(MutantStatus):
        return (
            f"unknown status {mutant.get('status')!r} (expected one of {', '.join(MutantStatus)})"
        )
    if not isinstance(mutant.get("killed_by", {}), dict) or not isinstance(
        mutant.get("risks", []), list
    ):
        return "'killed_by' must be an object and 'risks' a list"
    return None


def _test_problem(test) -> str | None:
    """What is wrong with one test entry, or None."""
    from gdn_review.kb.subjects import is_record_key  # only a report reads: the plugin stays light

    if not isinstance(test, dict):
        return f"expected an object, got {type(test).__name__}"
    if not is_record_key(test.get("record")):
        return f"'record' must be a PR number or a contract id, got {test.get('record')!r}"
    for key in ("nodeid", "claim", "outcome"):
        if not isinstance(test.get(key), str):
            return f"{key!r} must be a string, got {test.get(key)!r}"
    if test["outcome"] not in set(Outcome):
        return f"unknown outcome {test['outcome']!r} (expected one of {', '.join(sorted(Outcome))})"
    risks = test.get("risks", [])
    if risks is not None and not (
        isinstance(risks, list) and all(isinstance(r, str) for r in risks)
    ):
        return f"'risks' must be a list of ids, got {risks!r}"
    for key in ("measured", "expected"):
        if test.get(key) is not None and not isinstance(test[key], dict):
            return f"{key!r} must be an object, got {test[key]!r}"
    for key in ("case", "property", "device", "reason", "skip_kind"):
        if test.get(key) is not None and not isinstance(test[key], str):
            return f"{key!r} must be a string, got {test[key]!r}"
    return None
