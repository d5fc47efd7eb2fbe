"""What kb/types.py says of vLLM's releases, read from every cached release's gdn_attn.py (the
schema was written when 0.33.0 was the newest: a release that adds a metadata field, or lands an
open PR's, fails here until the schema says so)."""

from __future__ import annotations

import ast
import typing

import pytest

from gdn_review.common import release, release_cache
from gdn_review.kb import types

GDN_FILE = "vllm/v1/attention/backends/gdn_attn.py"
# kb/types.py's comment: dicts or objects, not plain values (the full snapshots cover them).
NOT_PLAIN = {"nums_dict", "checkpoint", "flashinfer_checkpoint_plan", "aiter_prefill_metadata"}
OPEN_PR_FIELDS = {"spec_decode_src_indices", "non_spec_num_accepted"}  # #40738, #55504


def _words(literal) -> set[str]:
    found = set()
    for argument in typing.get_args(literal):
        found |= _words(argument) if typing.get_origin(argument) is typing.Literal else {argument}
    return found


def _metadata_fields(version: str) -> set[str]:
    folder = release.loaded()[1] if version == "installed" else release_cache.cache_root() / version
    text = (folder / GDN_FILE).read_text(encoding="utf-8")
    (metadata,) = [
        node
        for node in ast.parse(text).body
        if isinstance(node, ast.ClassDef) and node.name == "GDNAttentionMetadata"
    ]
    return {n.target.id for n in metadata.body if isinstance(n, ast.AnnAssign)}


# The installed release, and every release this machine has cached (on a fresh machine, those the
# suite fetched on an earlier run).
RELEASES = ["installed"] + [
    v
    for v in release_cache.cached_versions()
    if (release_cache.cache_root() / v / GDN_FILE).is_file()
]


@pytest.mark.parametrize("version", RELEASES)
def test_every_metadata_field_of_a_release_is_in_the_schema_and_no_open_prs_is_there(version):
    fields = _metadata_fields(version)
    expect_fields = _words(types.ExpectField)
    assert fields - expect_fields - NOT_PLAIN == set(), (
        f"vLLM {version}'s GDNAttentionMetadata has fields kb/types.py's ExpectField lacks"
    )
    assert OPEN_PR_FIELDS <= expect_fields
    assert not fields & OPEN_PR_FIELDS, f"vLLM {version} has an open PR's field: update kb/types.py"
