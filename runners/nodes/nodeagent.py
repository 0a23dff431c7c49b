"""One node's sandbox of a multi-node run, driven from the leader node over a pipe.

On a SLURM allocation the leader's engine starts `paragrade node-sandbox` on another node of the
job as a step of its own (`srun --overlap -w NODE`). That trusted process reads one sandbox spec,
starts the sandbox with this node's backend (its cgroup, limits and CPU accounting are this
node's), then answers one request per line, on srun's own stdin/stdout (SLURM authenticates
that channel): `cpu`, `alive`, `freeze`, `kill`, `wait`. When the channel closes (the leader is
gone) the sandbox is killed. The sandbox's output never mixes into the channel: it is collected
here and handed back with the ending.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import threading
from pathlib import Path
from typing import IO, Any

from runners.sandbox.base import ExitInfo, Limits, Mount, Running, SandboxSpec, WallClock


class AgentLost(RuntimeError):
    """The channel to a node's agent broke: the node (or SLURM's step on it) is gone."""


def spec_to_json(spec: SandboxSpec) -> str:
    return json.dumps(dataclasses.asdict(spec), default=str)


def spec_from_json(text: str) -> SandboxSpec:
    raw = json.loads(text)

    def mount(m: dict[str, Any]) -> Mount:
        return Mount(Path(m["host"]), str(m["inside"]), bool(m["writable"]))

    lim = raw["limits"]
    limits = Limits(**{**lim, "cpus": tuple(int(c) for c in lim["cpus"])})
    return SandboxSpec(argv=[str(a) for a in raw["argv"]], mounts=[mount(m) for m in raw["mounts"]],
                       workdir=mount(raw["workdir"]), env={str(k): str(v) for k, v in
                                                           raw["env"].items()},
                       limits=limits, netns=raw.get("netns"), hostname=raw.get("hostname"))


def serve(backend: str, stdin: IO[str], stdout: IO[str]) -> int:
    """The agent's side: start the sandbox the first line describes, then answer requests."""
    from runners.sandbox import create_executor
    from runners.settings import get_settings

    def say(obj: object) -> None:
        stdout.write(json.dumps(obj) + "\n")
        stdout.flush()

    spec = spec_from_json(stdin.readline())
    running = create_executor(get_settings(), backend).start(spec)
    say({"started": True})
    try:
        for line in stdin:
            req = json.loads(line)
            op = req.get("op")
            if op == "cpu":
                say({"cpu": running.cpu_seconds()})
            elif op == "alive":
                say({"alive": running.alive()})
            elif op == "freeze":
                say({"ok": running.freeze(bool(req.get("frozen")))})
            elif op == "kill":
                running.kill()
                say({"ok": True})
            elif op == "wait":
                info = running.wait(float(req["timeout"]) if req.get("timeout") is not None
                                    else None)
                say({"info": None if info is None else dataclasses.asdict(info)})
                if info is not None:
                    return 0
    finally:
        running.kill()
        running.wait(10)
    return 0


class RemoteRunning(Running):
    """A node's sandbox seen from the leader: each call is one request to its agent."""

    def __init__(self, argv: list[str], spec: SandboxSpec) -> None:
        self.clock = WallClock(spec.limits.wall_s)
        self.info = ExitInfo(returncode=None)
        self._lock = threading.Lock()
        self._ended: ExitInfo | None = None
        self._proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, bufsize=1,
                                      start_new_session=True)
        reply = self._ask(spec_to_json(spec))
        if reply.get("started") is not True:
            raise AgentLost("the node's agent did not start the sandbox")

    def _ask(self, request: str | dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            assert self._proc.stdin is not None and self._proc.stdout is not None
            try:
                text = request if isinstance(request, str) else json.dumps(request)
                self._proc.stdin.write(text + "\n")
                self._proc.stdin.flush()
                line = self._proc.stdout.readline()
            except (OSError, ValueError) as exc:
                raise AgentLost(f"the node's agent is gone ({exc})") from exc
            if not line:
                raise AgentLost("the node's agent is gone")
            answer = json.loads(line)
            assert isinstance(answer, dict)
            return answer

    def alive(self) -> bool:
        if self._ended is not None:
            return False
        try:
            return bool(self._ask({"op": "alive"})["alive"])
        except AgentLost:
            return False

    def cpu_seconds(self) -> float | None:
        if self._ended is not None:
            return self._ended.cpu_s
        try:
            value = self._ask({"op": "cpu"})["cpu"]
        except AgentLost:
            return None
        return None if value is None else float(value)

    def freeze(self, frozen: bool) -> bool:
        try:
            ok = bool(self._ask({"op": "freeze", "frozen": frozen})["ok"])
        except AgentLost:
            return False
        if ok:
            self.clock.pause() if frozen else self.clock.resume()
        return ok

    def kill(self) -> None:
        try:
            self._ask({"op": "kill"})
        except AgentLost:
            self._proc.kill()

    def wait(self, timeout: float | None = None) -> ExitInfo | None:
        if self._ended is not None:
            return self._ended
        try:
            raw = self._ask({"op": "wait", "timeout": timeout})["info"]
        except AgentLost:
            self._proc.kill()
            self._proc.wait()
            self._ended = ExitInfo(returncode=None, node_lost="its agent")
            return self._ended
        if raw is None:
            return None
        self._ended = ExitInfo(**raw)
        self.info.__dict__.update(raw)
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
        return self._ended

