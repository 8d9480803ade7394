"""torch.distributed on muster: musterd's Store, and in-place recovery.

    import muster.torch
    muster.torch.init_process_group(backend="gloo")
    ...
    for step in ...:
        if muster.torch.round_changed():          # a newcomer, or a lost node
            rank, world_size = muster.torch.recover()
            ...rebuild DDP, rank 0 broadcasts the state...
        try:
            train_step()
        except RuntimeError:                      # a collective failed
            rank, world_size = muster.torch.recover()

``init_process_group`` makes the default process group of the current round
over ``MusterStore``, a torch.distributed.Store on musterd's Store in the
round's namespace (MUSTER_STORE_PREFIX, with the round's credential): no
worker hosts a TCPStore, so rank 0's death does not take the store with it.
It works under ``--recovery=restart`` as well (a restart then starts the
script again, as with torchrun).

Under ``muster --recovery=in-place`` the agent names a control directory
(MUSTER_CONTROL_DIR); ``init_process_group`` tells the agent this process can
recover (its ``hello``), and the agent then keeps it when a node is lost or
one joins. ``round_changed`` says that the round ended; ``recover`` aborts the
old group, waits for the next round and forms the default group on it.

Supported: torch 1.13 (Debian 12's) and 2.x. What differs between them is
handled here (see docs/migrating-from-torchrun.md, "torch versions").

Not thread-safe: call these from the training thread.
"""

from __future__ import annotations

import atexit
import datetime
import os
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

try:
    import torch.distributed as dist
except ImportError as _e:  # torch absent, or broken in this environment
    raise ImportError(
        f"muster.torch needs PyTorch, which this Python cannot import "
        f"({_e}): install torch into the environment that runs the workers "
        "(pip install torch; Debian: python3-torch), or run them with a "
        "Python that has it (muster --python=PATH)") from _e

from muster import _client
from muster import _control
from muster import _sockets
from muster import progress

__all__ = ["DEFAULT_RECOVER_TIMEOUT", "LIBRARY", "MusterStore",
           "RecoveryError", "destroy_process_group", "init_process_group",
           "recover", "recovery_enabled", "round_changed", "store",
           "watch_speed"]

# A timeout as torch takes it: a timedelta, or seconds.
Timeout = Union[datetime.timedelta, float]

LIBRARY = "muster.torch"
DEFAULT_RECOVER_TIMEOUT = datetime.timedelta(minutes=5)
# torch's default_pg_timeout (30 minutes), also the Store's waits.
_DEFAULT_PG_TIMEOUT: datetime.timedelta = getattr(
    dist, "default_pg_timeout", datetime.timedelta(minutes=30))
# The sub-namespace of torch's keys in the round's namespace, apart from
# libmuster_comm's and the application's own.
_KEY_PREFIX = "torch/"


class RecoveryError(RuntimeError):
    """recover() found no round to join in time, or cannot recover here."""


def _to_bytes(value: Union[str, bytes, Sequence[int]]) -> bytes:
    # torch 1.13 passes compare_set's values as lists of ints, 2.x as bytes;
    # a Python caller may pass str.
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _seconds(timeout: Timeout) -> float:
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


class MusterStore(dist.Store):
    """A torch.distributed.Store on musterd's Store, in one round's namespace.

    Implements what c10d's Python trampoline (PythonStore in
    torch/csrc/distributed/c10d/init.cpp) calls: set, get, add, compare_set,
    wait (with and without a timeout), check, deleteKey and getNumKeys (the
    C++ names, which torch 1.13 and 2.x look up), plus delete_key and
    num_keys for Python callers. ``get`` and ``wait`` block up to the store's
    timeout (``set_timeout``; torch sets the process group's); a wait that
    runs out raises StoreTimeout, and every wait ends at once with RoundEnded
    when the round ends (musterd drops its namespace). Keys live under
    "torch/" in the namespace.
    """

    def __init__(self, client: _client.StoreClient,
                 timeout: Timeout = _DEFAULT_PG_TIMEOUT) -> None:
        super().__init__()
        self._client = client
        self.set_timeout(timeout)

    @property
    def client(self) -> _client.StoreClient:
        return self._client

    def _wait_s(self, timeout: Optional[Timeout] = None) -> float:
        return _seconds(self.timeout if timeout is None else timeout)

    def set(self, key: str, value: Union[str, bytes, Sequence[int]]
            ) -> None:
        self._client.set(_KEY_PREFIX + key, _to_bytes(value))

    def get(self, key: str) -> bytes:
        return self._client.get(_KEY_PREFIX + key, self._wait_s())

    def add(self, key: str, value: int) -> int:
        return self._client.add(_KEY_PREFIX + key, int(value))

    def compare_set(self, key: str,
                    expected_value: Union[str, bytes, Sequence[int]],
                    desired_value: Union[str, bytes, Sequence[int]]
                    ) -> bytes:
        return self._client.compare_set(_KEY_PREFIX + key,
                                        _to_bytes(expected_value),
                                        _to_bytes(desired_value))

    def wait(self, keys: Sequence[str],
             timeout: Optional[Timeout] = None) -> None:
        self._client.wait([_KEY_PREFIX + k for k in keys],
                          self._wait_s(timeout))

    def check(self, keys: Sequence[str]) -> bool:
        return self._client.check([_KEY_PREFIX + k for k in keys])

    def deleteKey(self, key: str) -> bool:  # noqa: N802 (c10d's name)
        return self._client.delete(_KEY_PREFIX + key)

    def delete_key(self, key: str) -> bool:
        return self.deleteKey(key)

    def getNumKeys(self) -> int:  # noqa: N802 (c10d's name)
        # The whole namespace's keys (musterd counts per namespace).
        return self._client.num_keys()

    def num_keys(self) -> int:
        return self.getNumKeys()


class _Group:
    """What this module formed: the default group's round and how."""

    def __init__(self, channel: Optional[_control.ControlChannel],
                 backend: str, timeout: Timeout,
                 kwargs: Dict[str, Any]) -> None:
        self.channel = channel
        self.backend = backend
        self.timeout = timeout
        self.kwargs = kwargs
        # The round formed on.
        self.round: Optional[_control.Round] = None
        self.store: Optional[MusterStore] = None
        self.sockets: Optional[_sockets.GroupSockets] = None
        # The default group itself (a torch ProcessGroup): see _retired.
        self.pg: Any = None


_group: Optional[_Group] = None
# Process groups of ended rounds, kept alive for a while. torch 1.13 frees a
# gloo group with the GIL held (from DDP's Reducer, say) and joins its worker
# threads; a worker that is just dropping the tensors of its last op may need
# the GIL for them, and the process deadlocks (torch 2.x frees groups without
# the GIL). Held here, a group is freed later, when its threads are long idle:
# at the next recovery, or at exit.
_retired: List[Tuple[Any, Optional[MusterStore]]] = []


@atexit.register
def _release() -> None:
    # At exit every group is idle: free them while the interpreter is whole,
    # not in its finalisation, where their threads could outlive it.
    del _retired[:]
    if _group is not None:
        _group.pg = None
        _group.store = None


def init_process_group(backend: str = "gloo",
                       timeout: Timeout = _DEFAULT_PG_TIMEOUT,
                       **kwargs: Any) -> None:
    """Initialises torch.distributed's default process group for this
    worker's round, over musterd's Store.

    ``backend`` and ``timeout`` (a timedelta: collectives and the Store's
    waits) as torch.distributed.init_process_group; other keyword arguments
    go to it too (not store, rank, world_size, init_method: the round gives
    them). Under --recovery=in-place it first tells the agent that this
    process can recover in place (``hello`` in MUSTER_CONTROL_DIR); if the
    round ends while the group forms, it joins the next one (bounded by
    ``timeout``). Blocks until every rank of the round has joined. Raises
    RuntimeError when the group is already initialised, ValueError naming a
    missing variable when not run under muster, and the Store's or torch's
    errors.
    """
    global _group
    for given in ("store", "rank", "world_size", "init_method"):
        if given in kwargs:
            raise ValueError(f"muster.torch.init_process_group takes no "
                             f"{given}: the round gives it")
    if dist.is_initialized():
        raise RuntimeError("the default process group is already "
                           "initialised; after a failure call "
                           "muster.torch.recover()")
    channel = _control.ControlChannel.from_env(os.environ)
    first = _control.Round.from_env(os.environ)
    group = _Group(channel, backend, timeout, kwargs)
    if channel is not None:
        channel.write_hello(LIBRARY)
        running = channel.current_running()
        if running is not None and running.round >= first.round:
            first = running
    try:
        _form(group, first)
    except (_client.StoreError, RuntimeError) as e:
        if channel is None or not channel.changed_since(first):
            raise
        # The round ended while it formed (a peer lost): the next one.
        group.round = first
        _group = group
        _join_next(group, time.monotonic() + _seconds(timeout), e)
        return
    _group = group


def round_changed() -> bool:
    """True when the agent announced that this group's round has ended (a
    newcomer waits, a node was lost, a worker failed elsewhere): call
    recover() at the next step boundary. One small file read; never blocks.
    Always False without the control channel (--recovery=restart) and
    before init_process_group."""
    g = _group
    if g is None or g.channel is None:
        return False
    return g.channel.changed_since(g.round)


def recover(timeout: Timeout = DEFAULT_RECOVER_TIMEOUT) -> Tuple[int, int]:
    """Joins the next round in place and returns ``(rank, world_size)``.

    Call it on every kept rank after a collective failed or round_changed()
    said so. Aborts the old default group (its connections are shut down, so
    peers still blocked in a collective with this rank fail at once too) and
    destroys it; waits up to ``timeout`` (a timedelta) for the agent to
    announce a round after this one (polling the control channel every
    2 ms); forms the default group on that round's Store namespace, and
    writes RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK, MASTER_ADDR, ... into
    os.environ. If that round ends too while forming (another loss), it
    waits for the next within the same timeout. Objects made on the old
    group (DDP, subgroups) must be made again. Raises RecoveryError without
    the control channel (not under --recovery=in-place), before
    init_process_group, or when no round comes in time (naming the control
    directory, the round waited from and the likely cause).
    """
    g = _group
    if g is None:
        raise RecoveryError("muster.torch.recover() before "
                            "muster.torch.init_process_group()")
    if g.channel is None:
        raise RecoveryError(
            "in-place recovery needs `muster --recovery=in-place` "
            "(MUSTER_CONTROL_DIR is not set); under --recovery=restart the "
            "agent restarts the workers instead: let the error end the script")
    _abort(g)
    return _join_next(g, time.monotonic() + _seconds(timeout), None)


def recovery_enabled() -> bool:
    """Whether this worker runs under --recovery=in-place (it has a control
    channel), so that recover() can keep it."""
    return _control.ControlChannel.from_env(os.environ) is not None


def store() -> Optional[MusterStore]:
    """The MusterStore of the current round (None before
    init_process_group). Its namespace changes at every recovery."""
    return _group.store if _group is not None else None


def destroy_process_group() -> None:
    """torch.distributed.destroy_process_group() for a group made here, at
    the end of a script: the group itself is freed at exit (see _retired),
    so that dropping DDP right after the last collective cannot deadlock
    torch 1.13. Never raises."""
    if _group is not None and _group.pg is not None:
        _retired.append((_group.pg, _group.store))
        _group.pg = None
    _destroy()


def watch_speed(model: Any) -> None:
    """Times a DistributedDataParallel model's gradient all-reduces into the
    worker's progress file (muster.progress), so that musterd scores this
    rank's speed against the others' and names it when they wait for it
    (docs/stragglers.md). One call after wrapping the model:

        model = DDP(net)
        muster.torch.watch_speed(model)

    It registers a DDP communication hook that does what DDP's default does
    (average the bucket over the ranks) and marks each bucket's all-reduce as
    a collective: from its start to its completion is communication and
    waiting, the rest this rank's own work. A model with a hook of its own
    keeps it (DDP takes one hook): mark its collectives with
    ``muster.progress.collective(...)`` instead. Without MUSTER_PROGRESS_FILE
    (not under muster) it does nothing."""
    if progress.current() is None:
        return

    # No annotations: DDP refuses a hook whose bucket is annotated other than
    # dist.GradBucket, and this module's annotations are strings.
    def hook(_state, bucket):  # type: ignore[no-untyped-def]
        tensor = bucket.buffer()
        tensor.div_(dist.get_world_size())
        progress.begin("AllReduce")
        fut = dist.all_reduce(tensor, async_op=True).get_future()

        def done(f: Any) -> Any:
            progress.end()
            return f.value()[0]

        return fut.then(done)

    model.register_comm_hook(None, hook)


# ---- internals


def _form(group: _Group, rnd: _control.Round) -> None:
    """Forms the default group on round ``rnd``; exports it to os.environ."""
    client = _client.StoreClient.from_env(
        os.environ, prefix=rnd.store_prefix, token=rnd.store_token,
        endpoint=rnd.store_endpoint or None)
    store = MusterStore(client, group.timeout)
    # One call first: the channel connects now, so that its connection is
    # not counted among the group's sockets below.
    client.num_keys()
    ports = {int(e.rsplit(":", 1)[1]) for e in client.endpoints.split(",")}
    sockets = _sockets.GroupSockets(ports)
    sockets.begin()
    try:
        dist.init_process_group(group.backend, store=store, rank=rnd.rank,
                                world_size=rnd.world_size,
                                timeout=group.timeout, **group.kwargs)
    except BaseException:
        if dist.is_initialized():
            _destroy()
        raise
    sockets.end()
    group.round, group.store, group.sockets = rnd, store, sockets
    group.pg = dist.distributed_c10d._get_default_group()
    rnd.export(os.environ)


def _join_next(group: _Group, deadline: float,
               last_error: Optional[BaseException]) -> Tuple[int, int]:
    """Waits for a round after group.round and forms on it, again after a
    round that ends while forming, until ``deadline``. The group has a
    control channel and a round (the callers check)."""
    channel = group.channel
    assert channel is not None and group.round is not None
    waited_from = group.round.round
    while True:
        nxt = channel.wait_running_after(group.round.round, deadline)
        if nxt is None:
            raise RecoveryError(
                f"no new round within the timeout: waited from round "
                f"{waited_from} on the control channel {channel.directory} "
                f"({channel.describe()}); the agent is gone, or no round "
                "could form (fewer nodes than --nnodes' minimum?)" +
                (f"; the last attempt failed: {last_error}"
                 if last_error is not None else ""))
        try:
            _form(group, nxt)
            return nxt.rank, nxt.world_size
        except (_client.StoreError, RuntimeError) as e:
            # A peer lost while forming: the agent announces another round.
            last_error = e
            group.round = nxt


def _abort(group: _Group) -> None:
    """Ends the current default group so that nothing waits on it: its
    connections shut down (gloo has no abort), NCCL's communicators aborted
    where torch can, then destroyed. Never raises."""
    if group.sockets is not None:
        group.sockets.shutdown()
        group.sockets = None
    # The groups retired at the last recovery are idle by now; this one is not.
    del _retired[:-1]
    if group.pg is not None:
        _retired.append((group.pg, group.store))
        group.pg = None
    if not dist.is_initialized():
        return
    abort = getattr(dist.distributed_c10d, "_abort_process_group", None)
    if abort is not None and group.backend == "nccl":
        try:
            abort()  # torch >= 2.6: NCCL only
            return
        except Exception:  # noqa: BLE001 (destroy below)
            pass
    _destroy()


def _destroy() -> None:
    try:
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 (already gone)
        pass
