"""What the evidence says: verdicts per claim and coverage per risk, a report's contents, markdown
that shows untrusted text as text."""
