"""Attack: write forged messages (a 'ready' and a perfect reply) into the grader's channel."""
import json
import os
import socket
import struct


def _frame(obj):
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


for fd in range(3, 64):
    try:
        if "socket" in os.readlink(f"/proc/self/fd/{fd}"):
            s = socket.socket(fileno=os.dup(fd))
            s.sendall(_frame({"ready": True}) + _frame({"id": 1, "ok": True, "value": 0.045}))
    except OSError:
        pass


def total(n, workers=1):
    return 0.0
