"""Serial baseline for threads-io (the speedup reference): one read after the other."""

import os
import socket


def fetch(key: str) -> str:
    """One read from the record service: waits about 10 ms, returns the record (16 hex digits)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.connect(os.environ["PARAGRADE_SERVICE"])
        s.sendall(key.encode() + b"\n")
        answer = s.makefile("rb").readline().decode().strip()
    if not answer or answer.startswith("error"):
        raise RuntimeError(f"the record service refused {key!r}: {answer or 'no answer'}")
    return answer


def is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def fetch_all(keys: list[str]) -> list[str]:
    """Every record, in the order of the keys, one read at a time."""
    return [fetch(k) for k in keys]


def count_primes_threaded(lo: int, hi: int) -> int:
    """Primes in [lo, hi) (the baseline uses no threads)."""
    return sum(1 for n in range(lo, hi) if is_prime(n))
