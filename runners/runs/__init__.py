"""One side's code run in a sandbox: its stage, its launch, the live session of calls, fresh calls
from a zygote, job arrays and batch scripts.
"""
