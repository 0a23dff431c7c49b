"""Attack: burn the CPU whenever this side is not being timed, to slow the baseline down."""
import threading
import time

in_call = [False]


def _burn():
    while True:
        if in_call[0]:
            time.sleep(0.0005)  # keep out of the way of the own timed call


threading.Thread(target=_burn, daemon=True).start()


def total(n, workers=1):
    in_call[0] = True
    try:
        return sum(i * 0.001 for i in range(n))
    finally:
        in_call[0] = False
