"""Records: typed models, loading with file:line errors, JSON Schema export."""

from gdn_review.kb.completeness import incomplete, is_draft, open_items
from gdn_review.kb.errors import RecordError, RecordErrors
from gdn_review.kb.load import load_kb, load_record, parse_record
from gdn_review.kb.models import Record
from gdn_review.kb.schema import record_schema

__all__ = [
    "incomplete",
    "is_draft",
    "open_items",
    "Record",
    "RecordError",
    "RecordErrors",
    "load_kb",
    "load_record",
    "parse_record",
    "record_schema",
]
