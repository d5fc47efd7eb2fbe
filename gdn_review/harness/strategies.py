"""Random valid batches for invariant checks.

A batch is ordered as vLLM's V1 runner orders it (kb/batch_rules.runner_order):
decode rows (speculating or not) first, then one-token resumes, continuing chunks
(shortest first), first chunks, then zero-length padding. ``draw_batch`` states the
shape of a valid batch once, over two sources of choices: Hypothesis (the
generated suite, ``random_batches``) and a seeded ``random.Random`` (the
standalone modules of ``gdn-review export``, ``seeded_batches``, which copy
these functions verbatim).
"""

from __future__ import annotations

import random


def configured(batch: dict, configuration: dict | None) -> dict:
    """``batch`` in an invariant's ``configuration`` (a named case's builder settings):
    the settings added, and where they hand the V2 runner's aligned state indices,
    indices made for this batch's requests (padded ones included: build() reads
    ``aligned_state_indices[: m.num_reqs]``). Request r's are entries (r, 0..k) of the
    block table the harness makes, so the rows each state index selects read as for
    that table."""
    if not configuration:
        return batch
    done = {**batch, **configuration}
    if configuration.get("aligned_state_indices") is not None:
        columns = -(-done.get("max_model_len", 256) // done.get("block_size", 16))
        slots = (batch.get("speculative_tokens") or 0) + 1
        requests = len(batch["rows"]) + batch.get("padded_rows", 0)
        done["aligned_state_indices"] = [
            [r * columns + c + 1 for c in range(slots)] for r in range(requests)
        ]
    return done


def draw_batch(
    integer,
    choice,
    speculative_tokens: list[int],
    max_rows: int,
    configuration=None,
    decodes_only: bool = False,
) -> dict:
    """A valid batch, chosen by ``integer(low, high)`` and ``choice(options)``, in
    ``configuration`` (see ``configured``); ``decodes_only``: no prefill rows."""
    k = choice([None, *sorted(speculative_tokens)])
    drafts = "given" if k is None else choice(["given", "given", "given", "none"])
    count = integer(1, max_rows)
    decodes = count if decodes_only else integer(0, count)
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
    aligned = ((configuration or {}).get("prefix_caching") or {}).get(
        "cache_hit_alignment_tokens"
    )
    resumes, continuing, first = [], [], []
    for _ in range(count - decodes):
        # Every prefilling row kind GDN's classification tells apart: a chunk that
        # resumes a sequence with one token (a decode to GDN's first-chunk rule from
        # 0.31, a prefill beside spec decodes), a longer continuing chunk, and a first
        # chunk (no context; one token for a one-token prompt).
        kind = choice(["one-token resume", "continuing chunk", "first chunk"])
        if aligned:
            # With prefix caching, chunks that start on an aligned token and cross the
            # next aligned token are the ones that take a checkpoint: draw those too.
            query = integer(2, 3 * aligned)
            start = choice([aligned, integer(1, 2 * aligned)])
        else:
            query, start = integer(2, 16), integer(1, 64)
        if kind == "one-token resume":
            resumes.append({"seq_len": start + 1, "query_len": 1, "prefilling": True})
        elif kind == "continuing chunk":
            continuing.append(
                {"seq_len": start + query, "query_len": query, "prefilling": True}
            )
        else:
            query = choice([1, query, query])
            first.append({"seq_len": query, "query_len": query, "prefilling": True})
    # The V1 runner's order (reorder_batch_to_split_decodes_and_prefills, threshold
    # k + 1): decodes, short extends, long extends, then first chunks.
    rows += resumes + sorted(continuing, key=lambda row: row["query_len"]) + first
    batch = {
        "speculative_tokens": k,
        "drafts": drafts,
        "rows": rows,
        "padded_rows": integer(0, max_rows - count),
        "max_num_seqs": max(8, max_rows),
    }
    return configured(batch, configuration)


def seeded_batches(
    seed: int,
    count: int,
    speculative_tokens: list[int],
    max_rows: int,
    configuration: dict | None = None,
) -> list[dict]:
    """``count`` valid batches from ``random.Random(seed)``: the same on every run."""
    rng = random.Random(seed)
    return [
        draw_batch(rng.randint, rng.choice, speculative_tokens, max_rows, configuration)
        for _ in range(count)
    ]


def random_batches(
    speculative_tokens: list[int],
    max_rows: int,
    configuration=None,
    decodes_only: bool = False,
):
    """A Hypothesis strategy of valid batches (in ``configuration``: ``configured``;
    ``decodes_only``: no prefill rows)."""
    from hypothesis import strategies as st

    @st.composite
    def batches(draw):
        return draw_batch(
            lambda low, high: draw(st.integers(low, high)),
            lambda options: draw(st.sampled_from(options)),
            speculative_tokens,
            max_rows,
            configuration,
            decodes_only,
        )

    return batches()


def _decode_row(k: int | None, drafted: int | None = None) -> dict:
    """A decode row of a batch with ``k`` speculative tokens that drafted ``drafted``
    (default k, every draft accepted: the most tokens a decode row has), or a plain
    one-token decode."""
    if k is None:
        return {"seq_len": 17, "query_len": 1, "prefilling": False}
    drafted = k if drafted is None else drafted
    return {
        "seq_len": 17 + drafted,
        "query_len": drafted + 1,
        "drafted": drafted,
        "accepted": drafted + 1,
    }


def _every_row_kind(k: int | None) -> list[dict]:
    """One row of each kind GDN's classification tells apart, in the V1 runner's order:
    decodes (a spec row of each draft count 0..k, or a plain one), a one-token resume,
    continuing chunks (of k + 1 tokens or two, and longer), first chunks (of one token
    and longer)."""
    if k is None:
        decodes = [_decode_row(k)]
    else:
        decodes = [_decode_row(k, drafted) for drafted in range(k + 1)]
    return [
        *decodes,
        {"seq_len": 30, "query_len": 1, "prefilling": True},
        {"seq_len": 40, "query_len": (k or 1) + 1, "prefilling": True},
        {"seq_len": 60, "query_len": 20, "prefilling": True},
        {"seq_len": 1, "query_len": 1, "prefilling": True},
        {"seq_len": 24, "query_len": 24, "prefilling": True},
    ]


def _checkpoint_stride(configuration: dict | None) -> int | None:
    """The token stride prefill checkpoints land on in ``configuration``: a multiple of
    the cache-hit alignment and of the checkpoint alignment (offsets from an aligned
    chunk start). None where it takes none (no alignment or no checkpoint blocks) or
    has no room for a chunk three strides long."""
    caching = (configuration or {}).get("prefix_caching") or {}
    alignment = caching.get("prefill_checkpoint_alignment")
    if not alignment or not caching.get("num_prefill_checkpoint_blocks"):
        return None
    hit = caching.get("cache_hit_alignment_tokens") or alignment
    stride = next(
        n
        for n in range(max(hit, alignment), hit * alignment + 1)
        if n % hit == 0 == n % alignment
    )
    return stride if 3 * stride + 1 <= configuration.get("max_model_len", 256) else None


def _stride_prefills(stride: int, delta: int) -> list[dict]:
    """Prefills ending ``delta`` tokens from a multiple of ``stride``: first chunks of
    one and two strides, and a chunk continuing at the first stride to the third."""
    return [
        {"seq_len": stride + delta, "query_len": stride + delta},
        {"seq_len": 2 * stride + delta, "query_len": 2 * stride + delta},
        {
            "seq_len": 3 * stride + delta,
            "query_len": 2 * stride + delta,
            "prefilling": True,
        },
    ]


# over 80 lines: one list of named edges, read top to bottom, each in the docstring
def boundary_batches(
    speculative_tokens: list[int],
    max_rows: int,
    configuration: dict | None = None,
    decodes_only: bool = False,
) -> dict[str, dict]:
    """The batches at the edges of an invariant's own parameters, by name.

    Random examples reach a bound by luck; these reach it on every run, whatever the
    seed. The bound is vLLM's ``decode_cudagraph_max_bs``: ``max_num_seqs * (k + 1)``,
    capped by ``max_cudagraph_capture_size``; it limits a FULL-graph build's staging and
    ``build_for_cudagraph_capture``, in requests and in tokens. For each k (and no
    speculation): one row; ``max_rows`` rows without and with trailing padding; the
    bound in tokens (``max_num_seqs`` rows of k + 1 tokens) and one above it (the same
    rows, the capture size one below); the bound in requests (``max_num_seqs`` one-token
    rows, the capture size ``max_num_seqs``) and one above it (one row fewer plus a
    padded row, the capture size one below); a decode and a prefill followed by a padded
    row (unless ``decodes_only``). Without speculation and for the largest k, unless
    ``decodes_only``: every row kind beside the others (``_every_row_kind``) and a
    padded row. Where the configuration takes prefill checkpoints
    (``_checkpoint_stride``), for the largest k (or none): prefills ending
    exactly at, one short of and one past the stride's multiples (``_stride_prefills``),
    without and with a padded row behind. Then a batch of only padding. Batches that
    coincide keep one entry, named by every edge they stand on.
    """
    seqs = max(8, max_rows)  # max_num_seqs, as draw_batch's
    stride = _checkpoint_stride(configuration)
    named: dict[str, tuple[list[str], dict]] = {}

    def add(
        edge: str,
        k,
        rows: list[dict],
        padded: int = 0,
        capture: int | None = None,
        requests: int = seqs,
    ):
        batch = {
            "speculative_tokens": k,
            "drafts": "given",
            "rows": rows,
            "padded_rows": padded,
            "max_num_seqs": requests,
        }
        if capture is not None:
            batch["max_cudagraph_capture_size"] = capture
        batch = configured(batch, configuration)
        key = repr(sorted(batch.items()))
        named.setdefault(key, ([], batch))[0].append(edge)

    for k in [None, *sorted(set(speculative_tokens))]:
        bound = seqs * ((k or 0) + 1)
        rows = [_decode_row(k) for _ in range(max_rows)]
        full = [_decode_row(k) for _ in range(seqs)]
        one_token = [_decode_row(k, drafted=0) for _ in range(seqs)]
        add("1 row", k, [_decode_row(k)])
        add(f"{max_rows} rows (max_rows)", k, rows)
        add(f"{max_rows} rows (max_rows) + 1 padded", k, rows, padded=1)
        add(f"{seqs} rows at the capture bound in tokens ({bound})", k, full)
        add(
            f"{seqs} rows one above the capture bound in tokens ({bound - 1})",
            k,
            full,
            capture=bound - 1,
        )
        add(
            f"{seqs} one-token rows at the capture bound in requests ({seqs})",
            k,
            one_token,
            capture=seqs,
        )
        add(
            f"{seqs - 1} one-token rows + 1 padded one above the capture bound in "
            f"requests ({seqs - 1})",
            k,
            one_token[1:],
            padded=1,
            capture=seqs - 1,
        )
        # A first chunk that crosses token 64 (a checkpoint where the configuration has
        # prefix caching), padded behind as a runner pads it.
        prefill = {"seq_len": 100, "query_len": 100}
        if not decodes_only:
            add("a prefill + 1 padded", k, [_decode_row(k), prefill], padded=1)
        # One k (the largest; none without speculation) keeps the set small: the
        # checkpoint rows are the prefills', laid out alike on both paths.
        largest = k == max(speculative_tokens, default=None)
        if not decodes_only and (k is None or largest):
            rows = _every_row_kind(k)
            # A large k has more kinds than max_num_seqs: the scheduler's limit grows.
            requests = max(seqs, len(rows) + 1)
            add("every row kind + 1 padded", k, rows, padded=1, requests=requests)
        if stride and not decodes_only and largest:
            for edge, delta in (("at", 0), ("one short of", -1), ("one past", 1)):
                rows = [_decode_row(k), *_stride_prefills(stride, delta)]
                edge = f"prefills ending {edge} the checkpoint stride ({stride})"
                add(edge, k, rows)
                add(f"{edge} + 1 padded", k, rows, padded=1)
    add("only padding (1 padded row)", None, [], padded=1)
    found = {}
    for edges, batch in named.values():
        k = batch["speculative_tokens"]
        name = "; ".join(edges) + (f", k={k}" if k else ", no speculation")
        found[name] = dict(batch, boundary=name)
    return dict(sorted(found.items()))
