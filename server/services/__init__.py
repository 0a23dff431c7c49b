"""Domain services: the rules, independent of HTTP."""

from runners.protocol import MAX_ROW_ID

__all__ = ["MAX_ROW_ID"]
