"""Importers: turn other formats (review reports) into draft records."""

from gdn_review.importers.review_report import ReportImportError, import_report, write_draft

__all__ = ["ReportImportError", "import_report", "write_draft"]
