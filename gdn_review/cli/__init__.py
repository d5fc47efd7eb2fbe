"""The command line: thin click commands that parse, call one stage, print and pick the exit code.

``gdn-review`` is ``main``; ``python -m gdn_review.cli`` runs it too.
"""

from gdn_review.cli.main import entry, main

__all__ = ["entry", "main"]
