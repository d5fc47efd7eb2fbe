"""Importers: turn other formats (review reports, gh's JSON of a PR) into draft records."""

from gdn_review.importers.dispatch import write_draft
from gdn_review.importers.review_report import ReportImportError, import_report

__all__ = ["ReportImportError", "import_report", "write_draft"]
