"""A client of musterd's Store service (proto/muster/v1/store.proto), bound to
one round's namespace.

What rendezvous/src/grpc_store*.cc does for C++ workers, for Python ones:
the endpoint list of MUSTER_STORE_ENDPOINT ("H:P" or "H1:P1,H2:P2" of
replicas), the round's credential (MUSTER_STORE_TOKEN, sent as
``authorization: Bearer``), TLS (MUSTER_STORE_TLS_CA/CERT/KEY), and following
the leader: a standby refuses with UNAVAILABLE and names the leader in the
``muster-leader`` trailer; an unreachable replica makes the client try the
others for up to ``failover_timeout``.

One unary call per op: torch's Store calls are synchronous, one at a time per
calling thread, so the Store.Stream's pipelining would buy nothing here.

No torch here: muster.torch wraps this in a torch.distributed.Store.
Thread-safe (grpc channels are; the endpoint choice is under a lock).
"""

import math
import threading
import time

import grpc

from muster.v1 import store_pb2
from muster.v1 import store_pb2_grpc

DEFAULT_PORT = 29400
# A call that does not wait gets this long; a waiting one its wait plus the
# margin (rendezvous/src/grpc_store_stream.h: kCallTimeout, kWaitMargin).
CALL_TIMEOUT_S = 30.0
WAIT_MARGIN_S = 5.0
_INT64_MAX = (1 << 63) - 1
_LEADER_TRAILER = "muster-leader"


class StoreError(RuntimeError):
    """A Store call failed. ``code`` is the grpc.StatusCode."""

    def __init__(self, message, code=None):
        super().__init__(message)
        self.code = code


class StoreTimeout(StoreError):
    """A waiting call ran out of time (keys not set)."""


class RoundEnded(StoreError):
    """The namespace was dropped: its round has ended (ABORTED)."""


def parse_endpoints(text):
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
        host, port = part, DEFAULT_PORT
        if part.startswith("["):
            close = part.find("]")
            if close < 0:
                raise ValueError(f"bad store endpoint '{part}': no ']'")
            host, rest = part[:close + 1], part[close + 1:]
            if rest:
                if not rest.startswith(":"):
                    raise ValueError(f"bad store endpoint '{part}'")
                port = rest[1:]
        elif part.count(":") == 1:
            host, port = part.split(":")
        try:
            port = int(port)
        except ValueError:
            raise ValueError(f"bad store endpoint '{part}': the port "
                             f"'{port}' is no number") from None
        if not 0 < port < 65536:
            raise ValueError(f"bad store endpoint '{part}': port {port} is "
                             "out of range")
        out.append(f"{host or '127.0.0.1'}:{port}")
    return out


def _timeout_ms(timeout_s):
    """The request's timeout_ms: 0 = do not wait, at least 1 ms otherwise."""
    if timeout_s is None or timeout_s <= 0:
        return 0
    if math.isinf(timeout_s):
        return _INT64_MAX
    return max(1, math.ceil(timeout_s * 1000))


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise StoreError(f"cannot read {what} {path}: {e.strerror}") from None


class _Channels:
    """The channels of one set of endpoints and TLS files, shared by the
    clients of every round (a new round changes the prefix and the token,
    not the servers)."""

    _lock = threading.Lock()
    _cache = {}

    @classmethod
    def get(cls, target, tls):
        with cls._lock:
            key = (target, tls)
            if key not in cls._cache:
                cls._cache[key] = cls._make(target, tls)
            return cls._cache[key]

    @staticmethod
    def _make(target, tls):
        options = [
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            ("grpc.keepalive_time_ms", 10000),
            ("grpc.keepalive_timeout_ms", 10000),
        ]
        ca, cert, key = tls
        if not ca:
            channel = grpc.insecure_channel(target, options=options)
        else:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(ca, "MUSTER_STORE_TLS_CA"),
                private_key=_read(key, "MUSTER_STORE_TLS_KEY") if key else None,
                certificate_chain=(_read(cert, "MUSTER_STORE_TLS_CERT")
                                   if cert else None))
            channel = grpc.secure_channel(target, creds, options=options)
        return channel, store_pb2_grpc.StoreStub(channel)


class StoreClient:
    """musterd's Store in namespace ``prefix``.

    Timeouts are seconds (float; math.inf waits for ever). Errors raise
    StoreError (RoundEnded when the round's namespace was dropped, StoreTimeout
    when a wait ran out), each naming the call, the key and the endpoint; the
    token never appears in one.
    """

    def __init__(self, endpoint, prefix, token="", tls_ca="", tls_cert="",
                 tls_key="", failover_timeout=15.0):
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
        self._metadata = (("authorization", "Bearer " + token),) if token else ()
        self._failover_timeout = failover_timeout
        self._lock = threading.Lock()
        self._current = 0

    @classmethod
    def from_env(cls, env, prefix=None, token=None, endpoint=None):
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
    def endpoints(self):
        return ",".join(self._endpoints)

    # ---- the ops

    def set(self, key, value):
        self._call("Set", key, store_pb2.SetRequest(
            prefix=self.prefix, key=key, value=value), 0)

    def get(self, key, timeout):
        """The value at ``key``, waiting up to ``timeout`` s for it (0: none,
        then StoreError with NOT_FOUND when absent)."""
        return self._call("Get", key, store_pb2.GetRequest(
            prefix=self.prefix, key=key,
            timeout_ms=_timeout_ms(timeout)), timeout).value

    def add(self, key, delta):
        return self._call("Add", key, store_pb2.AddRequest(
            prefix=self.prefix, key=key, delta=delta), 0).value

    def compare_set(self, key, expected, desired):
        """Sets ``key`` to ``desired`` when its value is ``expected`` (an
        absent key matches b""); returns the value stored now."""
        return self._call("CompareSet", key, store_pb2.CompareSetRequest(
            prefix=self.prefix, key=key, expected=expected,
            desired=desired), 0).value

    def wait(self, keys, timeout):
        self._call("Wait", ",".join(keys), store_pb2.WaitRequest(
            prefix=self.prefix, keys=keys,
            timeout_ms=_timeout_ms(timeout)), timeout)

    def check(self, keys):
        """Whether every key exists (no wait)."""
        try:
            self._call("Wait", ",".join(keys), store_pb2.WaitRequest(
                prefix=self.prefix, keys=keys, timeout_ms=0), 0)
            return True
        except StoreTimeout:
            return False

    def delete(self, key):
        return self._call("Delete", key, store_pb2.DeleteRequest(
            prefix=self.prefix, key=key), 0).deleted

    def num_keys(self):
        return self._call("NumKeys", "", store_pb2.NumKeysRequest(
            prefix=self.prefix), 0).count

    # ---- one call, following the leader

    def _target(self):
        with self._lock:
            return self._current, self._endpoints[self._current]

    def _follow(self, failed_index, leader):
        """Makes the leader (or, without one, the next replica) current."""
        with self._lock:
            if leader:
                if leader not in self._endpoints:
                    self._endpoints.append(leader)
                self._current = self._endpoints.index(leader)
            elif self._current == failed_index:
                self._current = (failed_index + 1) % len(self._endpoints)

    def _call(self, method, keys, request, wait_s):
        what = f"{method} '{keys}'" if keys else method
        deadline_s = (CALL_TIMEOUT_S if not wait_s or wait_s <= 0 else
                      (wait_s if not math.isinf(wait_s) else 10 * 365 * 86400)
                      + WAIT_MARGIN_S)
        give_up = time.monotonic() + self._failover_timeout
        backoff = 0.05
        leader_hops = 0
        while True:
            index, target = self._target()
            _, stub = _Channels.get(target, self._tls)
            try:
                return getattr(stub, method)(request, timeout=deadline_s,
                                             metadata=self._metadata)
            except grpc.RpcError as e:
                code, details = e.code(), e.details() or ""
                leader = ""
                for k, v in (e.trailing_metadata() or ()):
                    if k == _LEADER_TRAILER:
                        leader = v.decode() if isinstance(v, bytes) else v
                if code != grpc.StatusCode.UNAVAILABLE:
                    raise self._error(what, target, code, details, wait_s)
                if leader and leader_hops < 3:
                    # A standby's refusal: the op was not applied.
                    leader_hops += 1
                    self._follow(index, leader)
                    continue
                # Unreachable, or the connection broke: an Add may have been
                # applied already, and repeating it could count twice.
                if method == "Add" or time.monotonic() + backoff > give_up:
                    raise self._error(what, target, code, details, wait_s,
                                      unreachable=True)
                self._follow(index, "")
                time.sleep(backoff)
                backoff = min(backoff * 2, 0.5)

    def _error(self, what, target, code, details, wait_s, unreachable=False):
        if code == grpc.StatusCode.ABORTED:
            return RoundEnded(f"{what} in store namespace '{self.prefix}': "
                              f"{details}", code)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            if details == "Deadline Exceeded":  # gRPC's own, not musterd's
                return StoreTimeout(
                    f"the store at {target} did not answer {what} within "
                    f"{wait_s or 0:.3g} s (+ a margin)", code)
            return StoreTimeout(f"{what}: {details}", code)
        if unreachable:
            return StoreError(
                f"{what} on the store at {self.endpoints} failed: {details} "
                "(is musterd running and reachable? `muster doctor "
                f"--rdzv-endpoint={target}` says why not)", code)
        if code == grpc.StatusCode.UNAUTHENTICATED or \
                code == grpc.StatusCode.PERMISSION_DENIED:
            return StoreError(
                f"{what} on the store at {target} was refused: {details} "
                "(a worker needs its round's MUSTER_STORE_TOKEN)", code)
        return StoreError(f"{what} on the store at {target} failed "
                          f"({code.name}): {details}", code)
