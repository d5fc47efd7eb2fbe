"""The KB's checks carried elsewhere: standalone test modules for vLLM's own CI, and the offline
bundle for a GPU machine."""
