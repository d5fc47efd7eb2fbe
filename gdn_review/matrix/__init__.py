"""A record across vLLM releases: the release matrix, its report data, the builder's history page,
finding the releases that carry a line."""
