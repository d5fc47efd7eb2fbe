"""gdn-review: pull-request review reports turned into checked knowledge."""
