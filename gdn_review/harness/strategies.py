"""Random valid batches for invariant checks (Hypothesis).

A batch is ordered as vLLM's runner orders it: decode rows (speculating or
not) first, then prefills, then zero-length padding.
"""

from __future__ import annotations


def random_batches(speculative_tokens: list[int], max_rows: int):
    from hypothesis import strategies as st

    @st.composite
    def batches(draw):
        k = draw(st.one_of(st.none(), st.sampled_from(sorted(speculative_tokens))))
        drafts = "given" if k is None else draw(st.sampled_from(["given", "given", "given", "none"]))
        count = draw(st.integers(1, max_rows))
        decodes = draw(st.integers(0, count))
        rows = []
        for _ in range(decodes):
            context = draw(st.integers(1, 64))
            if k is not None and drafts == "given":
                drafted = draw(st.integers(0, k))
                accepted = draw(st.integers(1, drafted + 1))
                rows.append({"seq_len": context + drafted + 1, "query_len": drafted + 1, "drafted": drafted, "accepted": accepted})
            else:
                rows.append({"seq_len": context + 1, "query_len": 1, "prefilling": False})
        for _ in range(count - decodes):
            query = draw(st.integers(2, 16))
            rows.append({"seq_len": draw(st.integers(0, 64)) + query, "query_len": query})
        return {
            "speculative_tokens": k,
            "drafts": drafts,
            "rows": rows,
            "padded_rows": draw(st.integers(0, max_rows - count)),
            "max_num_seqs": max(8, max_rows),
        }

    return batches()
