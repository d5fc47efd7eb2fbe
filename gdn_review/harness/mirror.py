"""The builder family's differential: one batch through a subclass and through GDN's.

An invariant claim may name a ``builder`` (an in-tree subclass of
GDNAttentionMetadataBuilder): every batch of the claim, its named cases too, is then
built by that class, in the claim's configuration (both builders must be able to
run it: Kimi-K3's nvidia builder needs ``mamba_cache_mode: none`` on CPU). The
property ``mirrors_gdn`` (harness/properties.py) builds the same batch with GDN's
own builder and compares the claim's ``fields``. The generated module holds the
claim's part of every batch as ``BUILDER_<claim>``::

    {
        "builder": "KimiK3KDAMetadataBuilder",
        "mirror_fields": [...],
        "mamba_cache_mode": "none",
    }

Both builds are the real classes' ``build()`` (``builders.new_builder`` /
``make_builder`` with ``BuilderSettings.builder``); nothing here re-implements one.
"""

from __future__ import annotations

from gdn_review.harness.builders import GDN_BUILDER, builder_class
from gdn_review.harness.strategies import configured


def require_builder(name: str) -> None:
    """Skip (not applicable) where the loaded release has no class ``name``."""
    __tracebackhide__ = True
    builder_class(name)


def with_builder(batch: dict, builder: dict) -> dict:
    """``batch`` as the claim builds it: its builder, the fields mirrors_gdn compares
    and the claim's configuration (``strategies.configured``: the V2 runner's aligned
    indices made for this batch where the configuration hands them)."""
    return configured(batch, builder)


__all__ = ["GDN_BUILDER", "require_builder", "with_builder"]
