"""Aborting a process group whose backend cannot abort (gloo in torch 1.13
and 2.x): shut down the TCP connections it opened.

A gloo process group has no abort(): destroying it waits for its work, and a
collective blocked on a live peer waits for the group's timeout (30 minutes
by default). What ncclCommAbort does for NCCL (every pending and later op
fails, here and at the peers) a shutdown(SHUT_RDWR) of the group's sockets
does for gloo: its reads see end-of-file at once, so its ops fail with
"Connection closed by peer", and each peer sees the same on its side of the
connection, so a peer blocked with this rank fails too and recovers.

Which sockets are the group's: those that appeared while it formed (gloo
connects its full mesh in the constructor), less those whose remote end is
a store endpoint (the gRPC client may reconnect meanwhile). Sockets are told
apart by inode, so a file descriptor reused later is never touched. Linux
only (/proc/self/fd); elsewhere ``snapshot`` is empty and aborting does
nothing (the group's timeout then bounds a blocked collective).
"""

from __future__ import annotations

import os
import socket
from typing import Dict, Iterable

__all__ = ["GroupSockets", "socket_inodes"]

_FD_DIR = "/proc/self/fd"


def socket_inodes() -> Dict[int, int]:
    """{inode: fd} of this process's sockets; {} where /proc is absent."""
    out: Dict[int, int] = {}
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return out
    for name in names:
        try:
            target = os.readlink(os.path.join(_FD_DIR, name))
        except OSError:
            continue
        if target.startswith("socket:["):
            out[int(target[8:-1])] = int(name)
    return out


_TCP_LISTEN = "0A"


def _connections_by_inode() -> Dict[int, int]:
    """{inode: remote port} of this process's connected TCP sockets (IPv4
    and IPv6); listening ones are left out (gloo's listener stays as it
    is: only connections carry ops)."""
    out: Dict[int, int] = {}
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) > 9 and cols[3] != _TCP_LISTEN:
                out[int(cols[9])] = int(cols[2].rsplit(":", 1)[1], 16)
    return out


class GroupSockets:
    """The sockets a process group opened: ``begin`` before it forms,
    ``end`` after, ``shutdown`` to abort it."""

    def __init__(self, store_ports: Iterable[int]) -> None:
        self._store_ports = set(store_ports)
        self._before: Dict[int, int] = {}
        self.inodes: Dict[int, int] = {}

    def begin(self) -> None:
        self._before = socket_inodes()

    def end(self) -> None:
        after = socket_inodes()
        remote = _connections_by_inode()
        self.inodes = {
            inode: fd for inode, fd in after.items()
            if inode not in self._before and inode in remote and
            remote[inode] not in self._store_ports
        }

    def shutdown(self) -> int:
        """Shuts down every socket of the group that is still open (checked
        by inode). Returns how many. Never raises."""
        done = 0
        now = socket_inodes()
        for inode, fd in self.inodes.items():
            if now.get(inode) != fd:
                continue  # closed, or the descriptor was reused
            try:
                # A duplicate, so that closing the Python object leaves the
                # group's own descriptor to the group.
                s = socket.socket(fileno=os.dup(fd))
            except OSError:
                continue
            try:
                s.shutdown(socket.SHUT_RDWR)
                done += 1
            except OSError:
                pass  # already shut down
            finally:
                s.close()
        self.inodes = {}
        return done
