"""Random valid batches for invariant checks.

A batch is ordered as vLLM's runner orders it: decode rows (speculating or
not) first, then prefills, then zero-length padding. ``draw_batch`` states the
shape of a valid batch once, over two sources of choices: Hypothesis (the
generated suite, ``random_batches``) and a seeded ``random.Random`` (the
standalone modules of ``gdn-review export``, ``seeded_batches``, which copy
these functions verbatim).
"""

from __future__ import annotations

import random


def draw_batch(integer, choice, speculative_tokens: list[int], max_rows: int) -> dict:
    """A valid batch, chosen by ``integer(low, high)`` and ``choice(options)``."""
    k = choice([None, *sorted(speculative_tokens)])
    drafts = "given" if k is None else choice(["given", "given", "given", "none"])
    count = integer(1, max_rows)
    decodes = integer(0, count)
    rows = []
    for _ in range(decodes):
        context = integer(1, 64)
        if k is not None and drafts == "given":
            drafted = integer(0, k)
            accepted = integer(1, drafted + 1)
            rows.append(
                {
                    "seq_len": context + drafted + 1,
                    "query_len": drafted + 1,
                    "drafted": drafted,
                    "accepted": accepted,
                }
            )
        else:
            rows.append({"seq_len": context + 1, "query_len": 1, "prefilling": False})
    for _ in range(count - decodes):
        query = integer(2, 16)
        rows.append({"seq_len": integer(0, 64) + query, "query_len": query})
    return {
        "speculative_tokens": k,
        "drafts": drafts,
        "rows": rows,
        "padded_rows": integer(0, max_rows - count),
        "max_num_seqs": max(8, max_rows),
    }


def seeded_batches(
    seed: int, count: int, speculative_tokens: list[int], max_rows: int
) -> list[dict]:
    """``count`` valid batches from ``random.Random(seed)``: the same on every run."""
    rng = random.Random(seed)
    return [
        draw_batch(rng.randint, rng.choice, speculative_tokens, max_rows)
        for _ in range(count)
    ]


def random_batches(speculative_tokens: list[int], max_rows: int):
    """A Hypothesis strategy of valid batches."""
    from hypothesis import strategies as st

    @st.composite
    def batches(draw):
        return draw_batch(
            lambda low, high: draw(st.integers(low, high)),
            lambda options: draw(st.sampled_from(options)),
            speculative_tokens,
            max_rows,
        )

    return batches()
