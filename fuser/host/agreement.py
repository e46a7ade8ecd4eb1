"""The ranks' agreement before a sharded call: every rank tells the others whether it could
start the call and what inputs it was given, so that a rank that fails raises on every rank
instead of leaving the others waiting in a collective. Ranks of one host agree through
shared memory; ranks on several hosts through a process group."""
from __future__ import annotations

import datetime
import os
import time
import zlib
from typing import Any

import torch

from fuser.options import disabled


class _GroupChannel:
    """What the ranks agree over when they do not share a host (or FUSER_DISABLE=
    shared_agreement): under NCCL a communicator of its own, whose allgather of two numbers
    per rank runs on a side stream (none of it behind the data collectives or the compute
    queued on the caller's stream); under gloo the default group. Either is posted first
    and collected before the call's first communication, so the host issues the call's
    local work meanwhile. (The allgather needs an SM: behind a GEMM that holds every SM the
    host waits for the GEMM, which made a cached call's GPU time host + GPU on an H200.)"""

    def __init__(self, device: torch.device | None) -> None:
        import torch.distributed as dist

        from fuser.multidevice.communicator import NCCL_TIMEOUT_S, TIMEOUT_S

        self.size = dist.get_world_size()
        self.timeout_s = TIMEOUT_S
        self.nccl = dist.get_backend() == "nccl"
        self.device = device
        self.every: list[torch.Tensor] = []  # gloo: every rank's (flag, fingerprint), once collected
        self.work: Any = None
        self.posted = 0.0
        if self.nccl:
            self.group = dist.new_group(backend="nccl", timeout=datetime.timedelta(seconds=NCCL_TIMEOUT_S))
            self.stream = torch.cuda.Stream(device)
            self.host = torch.empty(2 * (self.size + 1), dtype=torch.int64, pin_memory=True)
            self.on_device = torch.empty(2 * (self.size + 1), dtype=torch.int64, device=device)
            self.done = torch.cuda.Event()
        else:
            self.group = None

    def post(self, flag: int, fingerprint: int) -> None:
        """Send this rank's (flag, fingerprint) to every rank (gloo: and receive theirs)."""
        import torch.distributed as dist

        if not self.nccl:
            mine = torch.tensor([flag, fingerprint], dtype=torch.int64)
            self.every = [torch.empty_like(mine) for _ in range(self.size)]
            self.work = dist.all_gather(self.every, mine, group=self.group, async_op=True)
            return
        self.posted = time.monotonic()
        host, dev = self.host, self.on_device
        host[0], host[1] = flag, fingerprint
        with torch.cuda.stream(self.stream):
            dev[:2].copy_(host[:2], non_blocking=True)
            dist.all_gather_into_tensor(dev[2:], dev[:2], group=self.group)
            host[2:].copy_(dev[2:], non_blocking=True)
            self.done.record(self.stream)

    def collect(self) -> list[tuple[int, int]]:
        """Every rank's (flag, fingerprint), in rank order, once every rank has posted;
        raises when one has not within the communication timeout."""
        if not self.nccl:
            try:
                self.work.wait()  # (gloo raises after the group's timeout)
            except Exception as err:
                raise RuntimeError(f"not every rank came to this call of a sharded fusion: {err}") from err
            return [(int(t[0]), int(t[1])) for t in self.every]
        if not self.done.query():
            deadline = self.posted + self.timeout_s
            spins = 0
            while not self.done.query():  # microseconds when the ranks are in step: spin, then doze
                spins += 1
                if spins > 2000:
                    if time.monotonic() > deadline:
                        raise _late(self.timeout_s)
                    time.sleep(50e-6)
        got = self.host[2:].tolist()
        return [(got[2 * k], got[2 * k + 1]) for k in range(self.size)]



def _late(timeout_s: float) -> RuntimeError:
    return RuntimeError(f"not every rank came to this call of a sharded fusion within {timeout_s:.0f} s "
                        "(FUSER_COMM_TIMEOUT): a rank stopped, or runs other fusions")


class _SharedChannel:
    """What ranks of one host agree over: a shared-memory file in which each rank writes one
    64-bit word per call (the call's number, its flag and fingerprint) and reads the
    others'. No GPU work and no network: a call never waits for kernels queued before it.
    Words alternate between two rows by call parity: a rank can only write call n + 2 once
    every rank has written n + 1, which each does after reading call n."""

    _CALL = (1 << 31) - 1

    def __init__(self, path: str, size: int, rank: int, timeout_s: float) -> None:
        import ctypes
        import mmap

        fd = os.open(path, os.O_RDWR)
        try:
            self.map = mmap.mmap(fd, 16 * size)
        finally:
            os.close(fd)
        # one aligned 8-byte word per rank and row: written and read whole (never torn)
        self.words = (ctypes.c_uint64 * (2 * size)).from_buffer(self.map)
        self.size, self.rank, self.timeout_s = size, rank, timeout_s
        self.calls = 0
        self.posted = 0.0  # (when this rank posted its last word: a collect's deadline runs from it)

    @classmethod
    def make(cls, store: Any, key: str, size: int, rank: int, timeout_s: float) -> "_SharedChannel | None":
        """Every rank's channel, or None on every rank when the file cannot be made or
        opened on one of them (a collective over `store`, under `key`: every rank of one
        host calls this at the same call)."""
        import tempfile

        path = ""
        if rank == 0:
            try:
                fd, path = tempfile.mkstemp(prefix="fuser-agreement-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
                os.ftruncate(fd, 16 * size)
                os.close(fd)
            except OSError:
                path = ""
        try:
            path = _every(store, key + "path", path, size, rank, timeout_s)[0]
            got: _SharedChannel | None = None
            if path:
                try:
                    got = cls(path, size, rank, timeout_s)
                except Exception:  # (every rank must still say whether it opened it)
                    got = None
            opened = _every(store, key + "opened", "1" if got is not None else "0", size, rank, timeout_s)
        finally:
            if rank == 0 and path:
                os.unlink(path)  # (every rank has it mapped, or gave up on it)
        return got if all(o == "1" for o in opened) else None

    def post(self, flag: int, fingerprint: int) -> None:
        """Write this rank's word for the next call."""
        self.calls += 1
        self.posted = time.monotonic()
        n = self.calls & self._CALL
        self.words[(n & 1) * self.size + self.rank] = (n << 33) | (flag << 32) | (fingerprint & 0xFFFFFFFF)

    def collect(self) -> list[tuple[int, int]]:
        """Every rank's (flag, fingerprint) for this call, once every rank has written it;
        raises when one has not within the communication timeout, or has written a later
        call's (the ranks fell out of step after an earlier timeout)."""
        n = self.calls & self._CALL
        base = (n & 1) * self.size
        words = self.words
        got = []
        for r in range(base, base + self.size):
            spins, nap = 0, 20e-6
            while (w := words[r]) >> 33 != n:
                if 0 < ((w >> 33) - n) & self._CALL < 1 << 30:
                    raise RuntimeError(f"rank {r - base} is at a later call of a sharded fusion than rank "
                                       f"{self.rank}: the ranks fell out of step (after an earlier timeout)")
                spins += 1
                if spins > 200:  # microseconds when the ranks are in step: spin, then doze longer
                    if time.monotonic() > self.posted + self.timeout_s:
                        raise _late(self.timeout_s)
                    time.sleep(nap)
                    nap = min(2 * nap, 1e-3)
            got.append(w)
        return [((w >> 32) & 1, w & 0xFFFFFFFF) for w in got]


def _boot_id() -> str:
    """This machine's boot id (two hosts may share a name), where Linux gives one."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return ""


def host_id() -> str:
    """This machine as ranks compare it: host name and boot id."""
    import socket

    return f"{socket.gethostname()}:{_boot_id()}"


def this_job(cache: dict[str, Any]) -> None:
    """Empty `cache` (state kept per job: "world", its default group; "failed", a setup's
    error) when the default group is not the one it was kept for (the job was destroyed
    and started again); raise the setup error it holds."""
    import torch.distributed as dist

    world = dist.distributed_c10d._get_default_group()
    if cache.get("world") is not world:
        cache.clear()
        cache["world"] = world
    if "failed" in cache:
        raise cache["failed"]


def _every(store: Any, key: str, mine: str, size: int, rank: int, timeout_s: float) -> list[str]:
    """Every rank's `mine`, in rank order, through the default store (waiting at most
    `timeout_s` for the others)."""
    store.set(f"{key}/{rank}", mine)
    keys = [f"{key}/{r}" for r in range(size)]
    store.wait(keys, datetime.timedelta(seconds=timeout_s))
    return [store.get(k).decode() for k in keys]


#: the agreement channels made for the current job (kind -> channel; "world": its default
#: group; "failed": the error of a handshake that failed), and how many handshakes this
#: process made (the same on every rank: it names a handshake's keys)
_CHANNELS: dict[str, Any] = {}
_MADE = [0]


def _channel(inputs: Any) -> Any:
    """The channel the ranks agree over, made at the first call (every rank makes it then):
    shared memory where every rank shares a host, else a process group (NCCL on the device
    of the call's first CUDA input, that rank's GPU, else the current one). The ranks
    first exchange their host and the channel they want over the default store; ranks
    that want different channels (FUSER_DISABLE=shared_agreement on some) all raise. A
    handshake that fails leaves the job without a channel: every later sharded call
    raises its error at once (the ranks' handshakes would no longer pair up)."""
    import torch.distributed as dist

    from fuser.multidevice.communicator import TIMEOUT_S

    want = "group" if disabled("shared_agreement") else "shared"
    this_job(_CHANNELS)
    got = _CHANNELS.get(want)
    if got is not None:
        return got
    _MADE[0] += 1
    key = f"fuser/agreement/{_MADE[0]}/"
    size, rank = dist.get_world_size(), dist.get_rank()
    try:
        store = dist.distributed_c10d._get_default_store()
        every = _every(store, key + "want", f"{want} {host_id()}", size, rank, TIMEOUT_S)
        kinds, hosts = {e.split(" ", 1)[0] for e in every}, {e.split(" ", 1)[1] for e in every}
        if len(kinds) > 1:
            raise RuntimeError("the ranks want different agreement channels: FUSER_DISABLE=shared_agreement must be "
                               "set on every rank or on none")
        if want == "shared" and len(hosts) == 1:
            got = _SharedChannel.make(store, key, size, rank, TIMEOUT_S)
    except Exception as err:
        failed = RuntimeError(f"the ranks could not set up their agreement at their first sharded call within "
                              f"{TIMEOUT_S:.0f} s (FUSER_COMM_TIMEOUT): {err}")
        _CHANNELS["failed"] = failed
        raise failed from err
    if got is None:  # (also where the ranks could not share memory: the group's channel serves both)
        got = _CHANNELS.get("group")
        if got is None:
            device = next((x.device for x in inputs if isinstance(x, torch.Tensor) and x.is_cuda), None)
            if device is None and torch.cuda.is_available():
                device = torch.device("cuda", torch.cuda.current_device())
            got = _CHANNELS["group"] = _GroupChannel(device)
    _CHANNELS[want] = got
    return got


def _fingerprint(inputs: Any) -> int:
    """A digest of the inputs' kinds, dtypes and local shapes, equal on ranks whose calls
    agree (addresses and alignment may differ; Python's hash is salted per process)."""
    parts = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            parts.append(f"{tuple(x.shape)}:{x.dtype}")
        else:
            parts.append(type(x).__name__)
    return zlib.crc32("|".join(parts).encode())


def agree(inputs: Any, failure: BaseException | None, defer: bool = False) -> None:
    """Every rank tells the others whether it could start this call and what it was
    given; then each raises if any rank failed or the ranks' inputs differ in shape or
    dtype, so that no rank waits in a collective for one that never comes
    (FUSER_DISABLE=rank_agreement skips it). With `defer` (a call that can start), the
    answer is checked where the call first communicates (`communication.settle`)."""
    import torch.distributed as dist

    from .communication import defer_agreement, settle

    settle(stale=True)  # an earlier call's, left when that call raised before communicating
    if (disabled("rank_agreement") or not dist.is_initialized() or dist.get_world_size() == 1
            or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())):
        # (a capture records the collectives; replays run no host code to agree with)
        if failure is not None:
            raise failure
        return
    channel = _channel(inputs)
    channel.post(0 if failure is None else 1, _fingerprint(inputs))
    if defer and failure is None:
        defer_agreement(lambda: _check(channel.collect(), None))
        return
    _check(channel.collect(), failure)


def _check(every: list[tuple[int, int]], failure: BaseException | None) -> None:
    """Raise this rank's failure, or the failure another rank reported, or the ranks'
    disagreement on their inputs."""
    import torch.distributed as dist

    rank = dist.get_rank()
    if failure is not None:
        note = f" (on rank {rank}; the other ranks stop too)"
        try:
            failure.args = (f"{failure.args[0]}{note}",) + tuple(failure.args[1:]) if failure.args else (note,)
        except Exception:
            pass
        raise failure
    failed = [k for k, (flag, _) in enumerate(every) if flag]
    if failed:
        raise RuntimeError(f"rank {failed[0]} failed before its communications (see its error); rank {rank} stops "
                           "instead of waiting for it")
    prints = [p for _, p in every]
    if len(set(prints)) > 1:
        odd = next(k for k, p in enumerate(prints) if p != prints[0])
        raise ValueError(f"the ranks' inputs differ in shape or dtype (rank 0 and rank {odd} disagree): each rank "
                         "passes its own block of every sharded input, and the same replicated inputs")


__all__ = ["agree"]
