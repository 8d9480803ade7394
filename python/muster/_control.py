"""The worker side of muster's control channel, v1 (docs/architecture.md,
"Control channel"): the agent writes ``round`` in MUSTER_CONTROL_DIR
(atomically, by rename), the worker writes ``hello`` once.

No torch here. Not thread-safe (muster.torch calls it from the training
thread).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, Mapping, MutableMapping, Optional

__all__ = ["ControlChannel", "POLL_INTERVAL_S", "PROTOCOL_VERSION", "Round"]

PROTOCOL_VERSION = 1
POLL_INTERVAL_S = 0.002  # the contract's 2 ms

# os.environ names of the round's fields (the worker environment contract).
_ENV_FIELDS: Dict[str, str] = {
    "rank": "RANK",
    "world_size": "WORLD_SIZE",
    "local_rank": "LOCAL_RANK",
    "local_world_size": "LOCAL_WORLD_SIZE",
    "group_rank": "GROUP_RANK",
    "group_world_size": "GROUP_WORLD_SIZE",
    "role_rank": "ROLE_RANK",
    "role_world_size": "ROLE_WORLD_SIZE",
    "master_addr": "MASTER_ADDR",
    "master_port": "MASTER_PORT",
    "store_endpoint": "MUSTER_STORE_ENDPOINT",
    "store_prefix": "MUSTER_STORE_PREFIX",
    "round": "MUSTER_ROUND",
    "restart_count": "TORCHELASTIC_RESTART_COUNT",
}
_INT_FIELDS = ("rank", "world_size", "local_rank", "local_world_size",
               "group_rank", "group_world_size", "role_rank", "role_world_size",
               "master_port", "round", "restart_count")


class Round:
    """One round as this worker sees it: the fields of a ``running`` round
    file, or of the environment the worker started with. ``seq`` is None
    when it came from the environment."""

    def __init__(self, fields: Mapping[str, Any],
                 seq: Optional[int] = None) -> None:
        self.fields: Dict[str, Any] = dict(fields)
        self.seq = seq

    @property
    def round(self) -> int:
        return int(self.fields.get("round", 0))

    @property
    def rank(self) -> int:
        return int(self.fields["rank"])

    @property
    def world_size(self) -> int:
        return int(self.fields["world_size"])

    @property
    def store_prefix(self) -> str:
        return str(self.fields.get("store_prefix", ""))

    @property
    def store_endpoint(self) -> str:
        return str(self.fields.get("store_endpoint", ""))

    @property
    def store_token(self) -> str:
        # A secret: never printed (Round has no __repr__ showing it).
        return str(self.fields.get("store_token", ""))

    def __repr__(self) -> str:
        return (f"Round(round={self.round}, rank={self.fields.get('rank')}, "
                f"world_size={self.fields.get('world_size')}, seq={self.seq})")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Round:
        """The worker's first round from its environment. Raises ValueError
        naming a missing or bad variable."""
        fields: Dict[str, Any] = {}
        for field, name in _ENV_FIELDS.items():
            if name in env:
                fields[field] = env[name]
        for need in ("rank", "world_size"):
            if need not in fields:
                raise ValueError(
                    f"{_ENV_FIELDS[need]} is not set: run the script under "
                    "muster (muster --nproc-per-node=N script.py)")
        for field in _INT_FIELDS:
            if field in fields:
                try:
                    fields[field] = int(fields[field])
                except ValueError:
                    raise ValueError(f"{_ENV_FIELDS[field]}="
                                     f"'{fields[field]}' is no integer"
                                     ) from None
        fields["store_token"] = env.get("MUSTER_STORE_TOKEN", "")
        return cls(fields)

    def export(self, environ: MutableMapping[str, str]) -> None:
        """Writes the round into ``environ`` (os.environ), so that the
        environment and torch.distributed agree after a recovery."""
        for field, name in _ENV_FIELDS.items():
            if field in self.fields:
                environ[name] = str(self.fields[field])
        if self.store_token:
            environ["MUSTER_STORE_TOKEN"] = self.store_token
        else:
            environ.pop("MUSTER_STORE_TOKEN", None)


class ControlChannel:
    """The control directory of this worker process."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.round_path = os.path.join(directory, "round")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Optional[ControlChannel]:
        """The channel named by MUSTER_CONTROL_DIR; None without it
        (--recovery=restart, or not under muster)."""
        directory = env.get("MUSTER_CONTROL_DIR", "")
        return cls(directory) if directory else None

    def read(self) -> Optional[Dict[str, Any]]:
        """The ``round`` file as a dict; None when it is missing or cannot be
        parsed (reads as "no change", per the contract)."""
        try:
            with open(self.round_path, "rb") as f:
                data = json.loads(f.read())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def write_hello(self, library: str) -> None:
        """Tells the agent that this process (its pid) can recover in place."""
        body = json.dumps({"version": PROTOCOL_VERSION, "pid": os.getpid(),
                           "library": library})
        _write_atomically(os.path.join(self.directory, "hello"), body)

    def changed_since(self, formed: Optional[Round]) -> bool:
        """Whether the round the group was formed on (a Round) has ended:
        the file's seq differs and it says ``changing``, or ``running`` with
        a later round. One small read; never blocks."""
        data = self.read()
        if data is None or formed is None:
            return False
        if formed.seq is not None and data.get("seq") == formed.seq:
            return False
        state = data.get("state")
        if state == "changing":
            return int(data.get("round", 0)) >= formed.round
        return state == "running" and int(data.get("round", 0)) > formed.round

    def wait_running_after(self, round_number: int,
                           deadline: float) -> Optional[Round]:
        """Polls every 2 ms until the file says ``running`` with a round after
        ``round_number``; returns that Round, or None at ``deadline``
        (time.monotonic())."""
        while True:
            data = self.read()
            if (data is not None and data.get("state") == "running" and
                    int(data.get("round", 0)) > round_number):
                return Round(data, seq=data.get("seq"))
            if time.monotonic() >= deadline:
                return None
            time.sleep(POLL_INTERVAL_S)

    def current_running(self) -> Optional[Round]:
        """The file's round when it says ``running``, else None."""
        data = self.read()
        if data is not None and data.get("state") == "running":
            return Round(data, seq=data.get("seq"))
        return None

    def describe(self) -> str:
        """What the file says now, for error messages (no secrets)."""
        data = self.read()
        if data is None:
            return f"{self.round_path} is missing or unreadable"
        reason = data.get("reason")
        return (f"{self.round_path} says round {data.get('round')} is "
                f"{data.get('state')} (seq {data.get('seq')})" +
                (f": {reason}" if reason else ""))


def _write_atomically(path: str, text: str) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)
