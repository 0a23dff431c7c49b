"""A thread and a child process that spin forever; count() says how far they got."""
import multiprocessing as mp
import threading

shared = mp.Value("q", 0, lock=False)
spins = [0]


def _thread():
    while True:
        spins[0] += 1


def _child(v):
    while True:
        v.value += 1


threading.Thread(target=_thread, daemon=True).start()
mp.get_context("fork").Process(target=_child, args=(shared,), daemon=True).start()


def count():
    return spins[0] + shared.value
