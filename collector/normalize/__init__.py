"""Normalizers: one module per source kind, raw API object -> sanitized wire records."""
