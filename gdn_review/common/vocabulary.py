"""Every word the tool says of how a test, a skip, a mutant or a claim came out.

A ``StrEnum`` member equals, hashes, prints and writes to JSON as its word. Every stage,
template (Jinja globals) and ``--fail-on`` compares against these, never typed words; a
reason is never read back into a verdict: a skip carries its ``SkipKind``. The export
copies ``SkipKind``: this file keeps vLLM's lines of 88."""

from __future__ import annotations

from enum import StrEnum  # Python 3.11 (numpy and vLLM, pinned, need it too)

ERROR = "error"  # the --fail-on condition of what measured nothing: exit code 3


class Outcome(StrEnum):
    """How a test ended (the evidence's ``tests[].outcome``)."""

    PASSED = "passed"
    FAILED = "failed"
    XFAILED = "xfailed"  # a known deviation, as the record states it
    XPASSED = "xpassed"
    SKIPPED = "skipped"  # why: the test's ``skip_kind`` (SkipKind)
    DESELECTED = "deselected"
    NOT_RUN = "not run"  # expected or collected, never run (a cell: did not run)
    # Measured nothing, so no verdict: set-up raised before the builder under test
    # was entered (platform, VllmConfig, imports), or gdn-review's own code raised.
    COULD_NOT_RUN = "could not run"
    CHECK_ERROR = "error in the check"


RAN = frozenset({Outcome.PASSED, Outcome.FAILED, Outcome.XFAILED, Outcome.XPASSED})
FAILING = frozenset({Outcome.FAILED, Outcome.XPASSED})  # against the test's claim
NOT_MEASURED = (Outcome.COULD_NOT_RUN, Outcome.CHECK_ERROR)
NOT_RUN = frozenset({Outcome.DESELECTED, Outcome.NOT_RUN})


class Verdict(StrEnum):
    """What the evidence says of a claim; ``short``: its word in the history page's
    table, ``counted``: as a review counts a PR's own claims ("3 hold, 1 fail"),
    ``condition``: the ``--fail-on`` condition it trips (None: none)."""

    def __new__(cls, word: str, short="", counted="", condition=None):
        member = str.__new__(cls, word)
        member._value_, member.condition = word, condition
        member.short, member.counted = short or word, counted or word
        return member

    HOLDS = "holds", "", "hold"
    FAILS = "fails", "**fails**", "fail", "fails"
    PENDING = "pending", "", "", "pending"  # an open PR's, waiting for its change
    KNOWN_DEVIATION = "known deviation", "deviates (known)"
    NOT_APPLICABLE = "not applicable", "n/a"
    UNVERIFIED = "unverified", "", "", "unverified"
    COULD_NOT_RUN = "could not run", "", "", ERROR
    CHECK_ERROR = "error in the check", "", "", ERROR
    # It holds, but no case executes the PR's own lines (verdicts.tie_to_change).
    NOT_TIED = "not tied to the change", "", "", "unverified"

    @classmethod
    def of(cls, word: str) -> Verdict | None:
        """The verdict ``word`` names (None: none, as "not run" or "")."""
        return cls._value2member_map_.get(word)


HOLDING = frozenset({Verdict.HOLDS, Verdict.KNOWN_DEVIATION})  # deviates only as stated
VERDICTS = tuple(v for v in Verdict if v is not Verdict.NOT_TIED)  # a run's


class MutantStatus(StrEnum):
    """How a mutant ended (the evidence's ``mutation.mutants[].status``)."""

    KILLED = "killed"
    SURVIVED = "survived"
    NOT_REACHED = "not reached"  # survived: no test executes its edited lines
    TIMEOUT = "timeout"  # the tests hung on it: killed
    ERROR = "error"  # our own code raised running it: neither killed nor survived
    NOT_APPLICABLE = "not applicable"  # its code is not in this release
    EQUIVALENT = "equivalent"  # it cannot change behaviour
    UNREACHABLE = "unreachable here"  # a kb/guard/ note: another device runs it


KILLS = frozenset({MutantStatus.KILLED, MutantStatus.TIMEOUT})
SURVIVORS = frozenset({MutantStatus.SURVIVED, MutantStatus.NOT_REACHED})


class SkipKind:
    """Why a generated test skipped, as the harness says it (``harness.origin.skip``
    marks pytest's skip; the plugin writes the test's ``skip_kind``): a report reads
    the verdict from it, never from the reason. Plain words, not an enum: the export
    copies this class into modules that run without gdn-review."""

    ABSENT = "absent"  # the release lacks what the case needs: pending for an open PR
    NOT_APPLICABLE = "not applicable"  # outside the claim's or case's releases, ...
    REFUSED = "refused"  # an adaptation the release refuses: never pending
    NEEDS_CUDA = "needs CUDA"
    OTHER = "other"  # any other skip (pytest's own, no stored snapshot): unverified
