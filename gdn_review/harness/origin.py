"""Where an exception comes from decides what it means: behaviour, not run, our fault.

- Raised by vLLM's code under test (the builder's constructor, its entry point, a
  function a case names as its target, anything they call): **behaviour**. The
  harness runs that code inside ``under_test``, which marks the exception; it counts
  against the claim like a failed assertion (a case may expect it with ``raised:``).
- Raised while the harness sets the builder up (importing vLLM, the release's
  ``VllmConfig``, the kv-cache spec, the inputs): **could not run**. ``setting_up``
  turns it into ``CouldNotRun``, with vLLM's message and the frame it came from.
- Anything else raised while a check runs is gdn-review's own fault (a harness or
  template bug): **error in the check** (the pytest plugin decides that, from these
  marks: only it sees the whole test).

``gdn-review export`` copies this file into each exported module, so it imports only
the standard library.
"""

from __future__ import annotations

import contextlib
import os
import traceback

# The attribute ``under_test`` sets on an exception that vLLM's code under test raised.
UNDER_TEST = "gdn_review_under_test"
# The attribute ``skip`` sets on its skip: why the test skipped (a SkipKind).
SKIP_KIND = "gdn_review_skip_kind"


def last_frame(error: BaseException) -> str:
    """Where ``error`` was raised: ``path:line in function`` of vLLM's innermost frame
    in its traceback (or in the exceptions it was raised from or while handling:
    pydantic re-raises a validator's error as its own), else of the innermost frame."""
    innermost = None
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        frames = traceback.extract_tb(error.__traceback__)
        innermost = innermost or (frames[-1] if frames else None)
        for frame in reversed(frames):
            if short_path(frame.filename).startswith("vllm/"):
                return f"{short_path(frame.filename)}:{frame.lineno} in {frame.name}"
        error = error.__cause__ or error.__context__
    if innermost is None:
        return "(no traceback)"
    return f"{short_path(innermost.filename)}:{innermost.lineno} in {innermost.name}"


def short_path(filename: str) -> str:
    """``vllm/platforms/cpu.py`` of ``/…/site-packages/vllm/platforms/cpu.py``."""
    parts = filename.replace(os.sep, "/").split("/")
    for root in ("vllm", "gdn_review", "torch", "transformers"):
        if root in parts:
            index = len(parts) - 1 - parts[::-1].index(root)
            return "/".join(parts[index:])
    return parts[-1]


def first_line(error: BaseException) -> str:
    """The message's first line; for a message whose first line only counts (pydantic's
    "1 validation error for VllmConfig"), its second too."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    if len(lines) > 1 and "validation error" in lines[0]:
        return f"{lines[0]}: {lines[1]}"[:400]
    return lines[0][:400]


class CouldNotRun(Exception):
    """The check could not run: something before the builder under test raised.

    ``step`` names what the harness was doing (``VllmConfig``, ``import``, ...);
    the message is vLLM's, with the frame that raised it.
    """

    def __init__(self, step: str, error: BaseException):
        self.step = step
        self.cause = f"{type(error).__name__}: {first_line(error)}"
        self.where = last_frame(error)
        super().__init__(f"could not run: {step} raised {self.cause} (at {self.where})")


@contextlib.contextmanager
def setting_up(step: str):
    """Run set-up (not the code under test): what it raises becomes ``CouldNotRun``.

    pytest's skips and failures pass through (they are not ``Exception``), and so
    does an exception that code under test raised inside (``under_test`` marked it).
    """
    try:
        yield
    except CouldNotRun:
        raise
    except Exception as error:
        if getattr(error, UNDER_TEST, None) is not None:
            raise
        raise CouldNotRun(step, error) from error


@contextlib.contextmanager
def under_test(what: str):
    """Run vLLM's code under test: what it raises is behaviour, marked with ``what``."""
    try:
        yield
    except CouldNotRun:
        raise
    except Exception as error:
        if getattr(error, UNDER_TEST, None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(error, UNDER_TEST, what)
        raise


def raised_by_code_under_test(error: BaseException) -> str | None:
    """What code under test raised ``error`` (``under_test``'s mark), or None."""
    return getattr(error, UNDER_TEST, None)


def skip(kind: str, reason: str):
    """pytest's skip with ``reason``, marked with its ``kind`` (a SkipKind), which the
    plugin records: a report reads the verdict from it, never from the reason."""
    import pytest

    __tracebackhide__ = True
    skipped = pytest.skip.Exception(reason)
    setattr(skipped, SKIP_KIND, kind)
    raise skipped
