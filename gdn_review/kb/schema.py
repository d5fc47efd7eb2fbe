"""JSON Schema of a record, for editors that validate YAML as it is typed."""

from __future__ import annotations

from gdn_review.kb.models import Record


def record_schema() -> dict:
    schema = Record.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "gdn-review record"
    return schema
