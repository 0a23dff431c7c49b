"""Domain services: the rules, independent of HTTP."""

MAX_ROW_ID = 2**31 - 1
"""The largest id a row can have: ids are INTEGER columns (32-bit on PostgreSQL)."""
