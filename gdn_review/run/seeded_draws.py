"""A claim's seeded Hypothesis draws depend on its seed and strategy alone.

Hypothesis (since 6.131) mixes into its draws constants it reads from the source of every
loaded module it deems local (outside site-packages): an unpacked vLLM release tree, this
project. A claim's seeded batches then differed between a release unpacked and the same
release installed, and parsing some 600 of vLLM's modules cost a session on an unpacked
release 20 s or more. Hypothesis has no setting for it, so its lookup is replaced (by the
pytest plugin, in every session); a Hypothesis without it is left as it is.
"""

from __future__ import annotations


def draws_from_the_seed_alone() -> None:
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:
        return
    nothing = getattr(providers, "_local_constants", None)
    if nothing is None or len(nothing) or not hasattr(providers, "_get_local_constants"):
        return
    providers._get_local_constants = lambda: nothing
