"""What every stage shares: atomic file writes, a fast exit after vLLM was imported, the release
cache of vLLM's sources."""
