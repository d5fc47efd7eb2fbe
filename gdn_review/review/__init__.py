"""`gdn-review review DIFF`: the KB against a vLLM release with a change applied, before the change
merges (see orchestrate)."""
