"""A client of musterd's Store service (proto/muster/v1/store.proto), bound to
one round's namespace.

What the C++ GrpcStore does for C++ workers, for Python ones: the endpoint
list of MUSTER_STORE_ENDPOINT ("H:P" or "H1:P1,H2:P2" of replicas), the
round's credential (MUSTER_STORE_TOKEN, sent as ``authorization: Bearer``),
TLS (MUSTER_STORE_TLS_CA/CERT/KEY), and following the leader: a standby
refuses with UNAVAILABLE and names the leader in the ``muster-leader``
trailer; an unreachable replica makes the client try the others for up to
``failover_timeout``.

gRPC without grpcio: the calls go over muster._h2 (HTTP/2 in pure Python)
with the messages of muster._wire, so the package needs nothing but the
standard library (a virtual environment's interpreter imports it with no
system package on its path). One unary call per op: torch's Store calls are
synchronous, one at a time per calling thread, so the Store.Stream's
pipelining would buy nothing here.

No torch here: muster.torch wraps this in a torch.distributed.Store.
Thread-safe: each call borrows a connection of its own from a pool (a
waiting Get holds one for its wait; the others make another), and the
endpoint choice is under a lock.
"""

from __future__ import annotations

import math
import os
import ssl
import threading
import time
from typing import (Dict, List, Mapping, Optional, Sequence, Tuple)

from muster import _h2
from muster import _wire
from muster._h2 import StatusCode

__all__ = ["CALL_TIMEOUT_S", "DEFAULT_PORT", "RoundEnded", "StatusCode",
           "StoreClient", "StoreError", "StoreTimeout", "WAIT_MARGIN_S",
           "parse_endpoints"]

DEFAULT_PORT = 29400
# A call that does not wait gets this long; a waiting one its wait plus the
# margin (the C++ Store client's kCallTimeout and kWaitMargin).
CALL_TIMEOUT_S = 30.0
WAIT_MARGIN_S = 5.0
_CONNECT_TIMEOUT_S = 10.0
_INT64_MAX = (1 << 63) - 1
_LEADER_TRAILER = "muster-leader"
_SERVICE = "/muster.v1.Store/"
# Idle connections kept per endpoint.
_POOL_SIZE = 4
# A connection is retired before its stream ids run out (2^31).
_MAX_STREAM_ID = 1 << 30


class StoreError(RuntimeError):
    """A Store call failed. ``code`` is the gRPC status (StatusCode), or
    None for an error found before any call."""

    def __init__(self, message: str,
                 code: Optional[StatusCode] = None) -> None:
        super().__init__(message)
        self.code = code


class StoreTimeout(StoreError):
    """A waiting call ran out of time (keys not set)."""


class RoundEnded(StoreError):
    """The namespace was dropped: its round has ended (ABORTED)."""


def parse_endpoints(text: Optional[str]) -> List[str]:
    """["host:port", ...] from MUSTER_STORE_ENDPOINT's syntax.

    A missing port is 29400, a missing host 127.0.0.1; IPv6 hosts in
    brackets. Raises ValueError naming the bad entry.
    """
    out = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            raise ValueError(
                f"bad store endpoint '{text}': expected HOST:PORT or a "
                "comma-separated list H1:P1,H2:P2 of musterd replicas (an "
                "empty entry)")
        host, port_text = part, str(DEFAULT_PORT)
        if part.startswith("["):
            close = part.find("]")
            if close < 0:
                raise ValueError(f"bad store endpoint '{part}': no ']'")
            host, rest = part[:close + 1], part[close + 1:]
            if rest:
                if not rest.startswith(":"):
                    raise ValueError(f"bad store endpoint '{part}'")
                port_text = rest[1:]
        elif part.count(":") == 1:
            host, port_text = part.split(":")
        try:
            port = int(port_text)
        except ValueError:
            raise ValueError(f"bad store endpoint '{part}': the port "
                             f"'{port_text}' is no number") from None
        if not 0 < port < 65536:
            raise ValueError(f"bad store endpoint '{part}': port {port} is "
                             "out of range")
        out.append(f"{host or '127.0.0.1'}:{port}")
    return out


def _timeout_ms(timeout_s: Optional[float]) -> int:
    """The request's timeout_ms: 0 = do not wait, at least 1 ms otherwise."""
    if timeout_s is None or timeout_s <= 0:
        return 0
    if math.isinf(timeout_s):
        return _INT64_MAX
    return max(1, math.ceil(timeout_s * 1000))


def _tls_context(tls: Tuple[str, str, str]) -> ssl.SSLContext:
    """The client context of MUSTER_STORE_TLS_CA/CERT/KEY (as grpcio's
    ssl_channel_credentials: the CA verifies the server and its name, the
    pair is the client's certificate)."""
    ca, cert, key = tls
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for path, what in ((ca, "MUSTER_STORE_TLS_CA"),
                       (cert, "MUSTER_STORE_TLS_CERT"),
                       (key, "MUSTER_STORE_TLS_KEY")):
        if path:
            try:
                with open(path, "rb"):
                    pass
            except OSError as e:
                raise StoreError(f"cannot read {what} {path}: "
                                 f"{e.strerror}") from None
    try:
        context.load_verify_locations(cafile=ca)
        if cert:
            context.load_cert_chain(cert, key)
    except (ssl.SSLError, ValueError) as e:
        raise StoreError(f"bad TLS files (MUSTER_STORE_TLS_CA={ca}, "
                         f"MUSTER_STORE_TLS_CERT={cert}): {e}") from None
    context.set_alpn_protocols(["h2"])
    return context


class _Pool:
    """Idle connections per (endpoint, TLS files), shared by the clients of
    every round (a new round changes the prefix and the token, not the
    servers). A forked child (a DataLoader worker) starts with none: the
    parent's connections stay the parent's."""

    _lock = threading.Lock()
    _pid = os.getpid()
    _idle: Dict[Tuple[str, Tuple[str, str, str]],
                List[_h2.Connection]] = {}
    _contexts: Dict[Tuple[str, str, str], ssl.SSLContext] = {}

    @classmethod
    def take(cls, target: str, tls: Tuple[str, str, str]
             ) -> _h2.Connection:
        """An idle live connection to ``target``, or a new one (blocks up
        to the connect timeout; raises _h2.RpcError UNAVAILABLE)."""
        with cls._lock:
            if cls._pid != os.getpid():
                cls._idle, cls._pid = {}, os.getpid()
            idle = cls._idle.setdefault((target, tls), [])
            context = cls._contexts.get(tls)
        while True:
            with cls._lock:
                conn = idle.pop() if idle else None
            if conn is None:
                break
            if conn.alive():
                return conn
        if tls[0] and context is None:
            context = _tls_context(tls)
            with cls._lock:
                cls._contexts[tls] = context
        return _h2.Connection(target, _CONNECT_TIMEOUT_S, context)

    @classmethod
    def give_back(cls, target: str, tls: Tuple[str, str, str],
                  conn: _h2.Connection) -> None:
        if conn.closed or conn.next_stream > _MAX_STREAM_ID:
            conn.close()
            return
        with cls._lock:
            idle = cls._idle.setdefault((target, tls), [])
            if len(idle) < _POOL_SIZE:
                idle.append(conn)
                return
        conn.close()


class StoreClient:
    """musterd's Store in namespace ``prefix``.

    Timeouts are seconds (float; math.inf waits for ever). Errors raise
    StoreError (RoundEnded when the round's namespace was dropped, StoreTimeout
    when a wait ran out), each naming the call, the key and the endpoint; the
    token never appears in one.
    """

    def __init__(self, endpoint: str, prefix: str, token: str = "",
                 tls_ca: str = "", tls_cert: str = "", tls_key: str = "",
                 failover_timeout: float = 15.0) -> None:
        if not endpoint:
            raise StoreError(
                "the store endpoint is empty: run under muster (it sets "
                "MUSTER_STORE_ENDPOINT), or set MUSTER_STORE_ENDPOINT to "
                "HOST:PORT of musterd")
        if not prefix:
            raise StoreError(
                "the store prefix is empty: run under muster (it sets "
                "MUSTER_STORE_PREFIX, the round's namespace)")
        if bool(tls_cert) != bool(tls_key):
            raise StoreError("MUSTER_STORE_TLS_CERT and MUSTER_STORE_TLS_KEY "
                             "go together: set both or neither")
        try:
            self._endpoints = parse_endpoints(endpoint)
        except ValueError as e:
            raise StoreError(str(e)) from None
        self.prefix = prefix
        self._tls = (tls_ca or "", tls_cert or "", tls_key or "")
        self._metadata: Tuple[Tuple[str, str], ...] = (
            (("authorization", "Bearer " + token),) if token else ())
        self._failover_timeout = failover_timeout
        self._lock = threading.Lock()
        self._current = 0

    @classmethod
    def from_env(cls, env: Mapping[str, str], prefix: Optional[str] = None,
                 token: Optional[str] = None,
                 endpoint: Optional[str] = None) -> "StoreClient":
        """The client of the round named by ``env`` (os.environ or the
        values of the control channel's ``round`` file)."""
        return cls(
            endpoint if endpoint is not None else env.get(
                "MUSTER_STORE_ENDPOINT", ""),
            prefix if prefix is not None else env.get("MUSTER_STORE_PREFIX",
                                                      ""),
            token=token if token is not None else env.get(
                "MUSTER_STORE_TOKEN", ""),
            tls_ca=env.get("MUSTER_STORE_TLS_CA", ""),
            tls_cert=env.get("MUSTER_STORE_TLS_CERT", ""),
            tls_key=env.get("MUSTER_STORE_TLS_KEY", ""))

    @property
    def endpoints(self) -> str:
        return ",".join(self._endpoints)

    # ---- the ops

    def set(self, key: str, value: bytes) -> None:
        self._call("Set", key, _wire.encode(
            "SetRequest", prefix=self.prefix, key=key, value=value), 0)

    def get(self, key: str, timeout: Optional[float]) -> bytes:
        """The value at ``key``, waiting up to ``timeout`` s for it (0: none,
        then StoreError with NOT_FOUND when absent)."""
        value = self._call("Get", key, _wire.encode(
            "GetRequest", prefix=self.prefix, key=key,
            timeout_ms=_timeout_ms(timeout)), timeout)["value"]
        assert isinstance(value, bytes)
        return value

    def add(self, key: str, delta: int) -> int:
        value = self._call("Add", key, _wire.encode(
            "AddRequest", prefix=self.prefix, key=key, delta=delta),
            0)["value"]
        assert isinstance(value, int)
        return value

    def compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        """Sets ``key`` to ``desired`` when its value is ``expected`` (an
        absent key matches b""); returns the value stored now."""
        value = self._call("CompareSet", key, _wire.encode(
            "CompareSetRequest", prefix=self.prefix, key=key,
            expected=expected, desired=desired), 0)["value"]
        assert isinstance(value, bytes)
        return value

    def wait(self, keys: Sequence[str], timeout: Optional[float]) -> None:
        self._call("Wait", ",".join(keys), _wire.encode(
            "WaitRequest", prefix=self.prefix, keys=list(keys),
            timeout_ms=_timeout_ms(timeout)), timeout)

    def check(self, keys: Sequence[str]) -> bool:
        """Whether every key exists (no wait)."""
        try:
            self._call("Wait", ",".join(keys), _wire.encode(
                "WaitRequest", prefix=self.prefix, keys=list(keys),
                timeout_ms=0), 0)
            return True
        except StoreTimeout:
            return False

    def delete(self, key: str) -> bool:
        return bool(self._call("Delete", key, _wire.encode(
            "DeleteRequest", prefix=self.prefix, key=key), 0)["deleted"])

    def num_keys(self) -> int:
        count = self._call("NumKeys", "", _wire.encode(
            "NumKeysRequest", prefix=self.prefix), 0)["count"]
        assert isinstance(count, int)
        return count

    # ---- one call, following the leader

    def _target(self) -> Tuple[int, str]:
        with self._lock:
            return self._current, self._endpoints[self._current]

    def _follow(self, failed_index: int, leader: str) -> None:
        """Makes the leader (or, without one, the next replica) current."""
        with self._lock:
            if leader:
                if leader not in self._endpoints:
                    self._endpoints.append(leader)
                self._current = self._endpoints.index(leader)
            elif self._current == failed_index:
                self._current = (failed_index + 1) % len(self._endpoints)

    def _call(self, method: str, keys: str, request: bytes,
              wait_s: Optional[float]) -> Dict[str, _wire.Value]:
        what = f"{method} '{keys}'" if keys else method
        deadline_s = (CALL_TIMEOUT_S if not wait_s or wait_s <= 0 else
                      (wait_s if not math.isinf(wait_s) else 10 * 365 * 86400)
                      + WAIT_MARGIN_S)
        give_up = time.monotonic() + self._failover_timeout
        backoff = 0.05
        leader_hops = 0
        while True:
            index, target = self._target()
            try:
                conn = _Pool.take(target, self._tls)
                try:
                    response, _ = conn.call(_SERVICE + method, request,
                                            self._metadata, deadline_s)
                finally:
                    _Pool.give_back(target, self._tls, conn)
                return _wire.decode(method + "Response", response)
            except _h2.RpcError as e:
                code, details = e.code, e.details
                leader = e.trailers.get(_LEADER_TRAILER, "")
                if code != StatusCode.UNAVAILABLE:
                    raise self._error(what, target, code, details,
                                      wait_s) from None
                if leader and leader_hops < 3:
                    # A standby's refusal: the op was not applied.
                    leader_hops += 1
                    self._follow(index, leader)
                    continue
                # Unreachable, or the connection broke: an Add may have been
                # applied already, and repeating it could count twice (unless
                # the server refused the stream: then it was not).
                if ((method == "Add" and not e.unprocessed) or
                        time.monotonic() + backoff > give_up):
                    raise self._error(what, target, code, details, wait_s,
                                      unreachable=True) from None
                self._follow(index, "")
                time.sleep(backoff)
                backoff = min(backoff * 2, 0.5)
            except ValueError as e:  # a response that does not parse
                raise StoreError(f"{what}: a bad response from the store at "
                                 f"{target}: {e}",
                                 StatusCode.INTERNAL) from None

    def _error(self, what: str, target: str, code: StatusCode, details: str,
               wait_s: Optional[float], unreachable: bool = False
               ) -> StoreError:
        if code == StatusCode.ABORTED:
            return RoundEnded(f"{what} in store namespace '{self.prefix}': "
                              f"{details}", code)
        if code == StatusCode.DEADLINE_EXCEEDED:
            if details == "Deadline Exceeded":  # the client's own, not musterd's
                return StoreTimeout(
                    f"the store at {target} did not answer {what} within "
                    f"{wait_s or 0:.3g} s (+ a margin)", code)
            return StoreTimeout(f"{what}: {details}", code)
        if unreachable:
            return StoreError(
                f"{what} on the store at {self.endpoints} failed: {details} "
                "(is musterd running and reachable? `muster doctor "
                f"--rdzv-endpoint={target}` says why not)", code)
        if code in (StatusCode.UNAUTHENTICATED, StatusCode.PERMISSION_DENIED):
            return StoreError(
                f"{what} on the store at {target} was refused: {details} "
                "(a worker needs its round's MUSTER_STORE_TOKEN)", code)
        return StoreError(f"{what} on the store at {target} failed "
                          f"({code.name}): {details}", code)
