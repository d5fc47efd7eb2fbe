"""The record format's versions, and what each reads a tensor stated as plain values as.

A record says which format it is written in (``schema_version``), and the tool reads
it with that format's meaning, so a record means tomorrow what it meant when it was
written. A change that alters what an existing field means (not only a new optional
field) is a new version here, with what it adds (``ADDED``) and ``gdn-review migrate``
(``run.migrate``) to bring records to it by measuring what it states.

- Format 1: an expect's tensor written as its values (``[4]``) compares its values
  (and the shape they imply); one written ``{dtype, values}`` compares its dtype too.
- Format 2 (the dtype rule): a tensor written as its values has its field's usual
  dtype (``USUAL_DTYPES``); any other states ``{dtype, values}`` (and ``shape`` where
  its values do not imply it). A field whose dtype depends on the batch has no usual
  dtype (``BATCH_DEPENDENT_DTYPES``): written as its values it compares its values only,
  as in format 1, and the tools that write expects state its dtype. A tensor whose
  dtype was never measured (a case no release runs yet) is written ``{values}``: its
  values only, never a guessed dtype.

No torch here: ``kb`` (validate), ``generate`` and the export read it; a stored form
is read with a table by ``common.snapshots.explicit_form``.
"""

from __future__ import annotations

CURRENT = 2

# The dtype of each tensor build() returns whose dtype does not depend on the batch,
# by the name it has in a snapshot (a metadata field, a field of one of its parts such
# as ``checkpoint`` or ``nums_dict``, a server field): measured from the real builder
# (vLLM 0.33.0 on CPU, every case of kb/, tests/test_dtype_rule.py). Part of format 2:
# changing an entry changes what format-2 records and snapshots mean (a new version).
USUAL_DTYPES = {
    # GDNAttentionMetadata
    "batch_ptr": "int32",
    "chunk_indices": "int32",
    "chunk_offsets": "int64",
    "has_initial_state": "bool",
    "non_spec_query_start_loc": "int32",
    "non_spec_state_indices_tensor": "int32",
    "num_accepted_tokens": "int32",
    "prefill_has_initial_state": "bool",
    "prefill_query_start_loc": "int32",
    "prefill_state_indices": "int32",
    "spec_query_start_loc": "int32",
    "spec_sequence_masks": "bool",
    "spec_sequence_masks_cpu": "bool",
    "spec_state_indices_tensor": "int32",
    "token_chunk_offset_ptr": "int32",
    # nums_dict[chunk size]
    "mlist": "int64",
    "nums": "int32",
    "offsetlist": "int32",
    # checkpoint (MambaPrefillCheckpoint), flashinfer_checkpoint_plan
    "block_cols": "int64",
    "checkpoint_offsets": "int32",
    "cu_starts": "int64",
    "request_rows": "int64",
    "rows": "int64",
    "state_indices": "int32",
    # server fields (harness.server.server_fields)
    "checkpoint_block_columns": "int64",
    "checkpoint_request_rows": "int64",
    "checkpoint_state_indices": "int32",
    "flashinfer_plan_cu_starts": "int64",
    "flashinfer_plan_rows": "int64",
    # KimiK3KDAMetadata's own (the nvidia subclass's FlashInfer prefill order)
    "flashinfer_prefill_query_start_loc": "int64",
    "flashinfer_prefill_seq_order": "int32",
}

# Fields whose dtype depends on the batch: no usual dtype, so never guessed. Where
# build() sorts the token mask (a batch that mixes spec decodes with other rows,
# argsort) the token indices are int64; where it makes them itself (spec decodes only)
# or FULL-graph staging copies them into its buffers, int32.
_TOKEN_INDICES = (
    "int64 in a batch that mixes spec decodes with other rows (build() argsorts the "
    "token mask), int32 in a batch of spec decodes only or staged into FULL-graph "
    "buffers"
)
BATCH_DEPENDENT_DTYPES = {
    "non_spec_token_indx": _TOKEN_INDICES,
    "spec_token_indx": _TOKEN_INDICES,
}

# What each version adds to the one before, as `validate` and `migrate` say it.
ADDED = {2: "each expected tensor's dtype"}


def usual_dtypes(version: int) -> dict[str, str]:
    """The dtype a tensor written as its values has, by field, in a record of
    ``version`` (format 1: none, its values are compared alone)."""
    return USUAL_DTYPES if version >= 2 else {}
