"""Leave a process that imported vLLM without waiting for the interpreter's teardown.

Once vLLM is imported, Python's own finalisation (freeing every module and
object, native destructors) takes seconds of CPU after everything of ours is
done; a run that starts a dozen interpreters (matrix, mutate, bench, a bundle)
pays it each time. ``exit_now`` runs the atexit callbacks and flushes the
standard streams as a normal exit would, then ends the process at once.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


def exit_now(code: int) -> NoReturn:
    atexit._run_exitfuncs()  # logging.shutdown, weakref.finalize, temp folders: as at a normal exit
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed or broken pipe: nothing left to write to
    os._exit(code)


# ``[sys.executable, "-c", PYTEST, ARGS...]`` is ``python -m pytest ARGS...`` that
# ends with exit_now. gdn_review is imported only after pytest has run: imported
# before, pytest could not rewrite the asserts of its plugin.
PYTEST = (
    "import sys, pytest\n"
    "code = int(pytest.main(sys.argv[1:]))\n"
    "from gdn_review.common.fast_exit import exit_now\n"
    "exit_now(code)\n"
)


def run_click(command) -> NoReturn:
    """Run a click command as its console script would, then ``exit_now`` if vLLM was imported."""
    code = 0
    try:
        command()
    except SystemExit as done:
        if not (done.code is None or isinstance(done.code, int)):
            raise  # a message to print: leave it to the interpreter
        code = done.code or 0
    if "vllm" not in sys.modules:
        sys.exit(code)
    exit_now(code)
