"""Attack: exit with status 0 at import, before any test runs, hoping silence reads as success."""
import os

os._exit(0)


def total(n, workers=1):
    return 0.0
