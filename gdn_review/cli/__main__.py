"""``python -m gdn_review.cli``: the gdn-review command."""

from gdn_review.cli.main import entry

entry()
