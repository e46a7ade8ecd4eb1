"""Reduce-scatters that take no SMs, for stage loops.

A stage loop overlaps chunk i's reduce-scatter with chunk i+1's matmul. NCCL's
reduce-scatter is a kernel: it takes SMs that the matmul's one wave of CTAs needs, so
the matmul runs a second wave (on an H200, a 181 µs chunk GEMM took 260 µs beside NCCL's
reduce-scatter of the chunk before). NCCL 2.28 moves an all-to-all with the GPU's copy
engines instead, using no SM, on a communicator made with the zero-CTA policy and on
buffers in its symmetric windows. A reduce-scatter is then that all-to-all (block j of
each rank's partial sums to rank j) plus a local sum of the d blocks received (the same
GEMM took 224 µs beside it, the sum included; 197 µs in a CUDA graph, which the
loops cannot use: see below).

So a buffer a stage loop's reduce-scatters read their chunks from is allocated here, in
symmetric memory, with a twin of the same size that receives the blocks; a chunk's blocks
land in the twin at the chunk's own offset (no two chunks in flight share bytes). The
evaluator asks for such buffers (`allocate`), and `communication.start` runs a
reduce-scatter whose input lies in one through `receiver`.

Opt-in (FUSER_ENABLE=copy_engine, set alike on every rank). Row-parallel linear, 8192
tokens, 4096 outputs, 2 H200s, GPU ms per call, copy engines / NCCL's kernel, both replayed
from CUDA graphs: K 16384 in 2, 4, 8 chunks 0.903 / 0.927, 0.896 / 0.928, 0.893 / 0.980;
K 4096 in 2, 4 chunks 0.418 / 0.398, 0.423 / 0.375 (the all-to-all moves 16 MB in ~30 µs,
NCCL's kernel reduces it in ~25 µs when it has the SMs; and the local sum waits for SMs the
next matmul holds). Those graphs could hang (see graphs.LoopGraphs.key): the path now runs
without them, which costs host time (1.68 ms against 0.87 for NCCL's graphed loop, K 16384,
4 chunks, in one run of an intermediate form of that change; not yet remeasured).
Used only where every rank can: NCCL at least 2.28 with its zero-CTA policy, symmetric
memory on NCCL's backend, and every rank on one host (the copy engines move data over
NVLink between the GPUs of a host); the ranks decide that together once per job. Where the
ranks use them, loops with reduce-scatters run plainly, never from a CUDA graph
(graphs.LoopGraphs.key says why). The buffers live until a process group shuts down (freeing one
deregisters it with every rank) or the process exits.
"""
from __future__ import annotations

import datetime
import math
from typing import Any

import torch

from fuser.options import enabled

#: the FUSER_ENABLE name (opt-in: see the module's note on when it pays)
NAME = "copy_engine"
#: oldest NCCL with copy-engine collectives
MIN_NCCL = (2, 28)

#: this job's state: "world" (the default group it was decided for), "group" (the zero-CTA
#: group, None where the ranks cannot use copy engines), "failed" (a setup's error)
_STATE: dict[str, Any] = {}
#: the symmetric buffers, flat: (slot, dtype, device index) -> [buffer, twin, their
#: rendezvous handles, an event after their last use (None before any)]
_BUFFERS: dict[Any, list] = {}
#: a buffer's storage address -> its twin (what `receiver` looks up)
_TWINS: dict[int, torch.Tensor] = {}
#: how many decisions this process made (the same on every rank: it names their store keys)
_MADE = [0]


def _local_reason() -> str:
    """Why this rank cannot use copy-engine collectives ('' where it can)."""
    import torch.distributed as dist

    if dist.get_backend() != "nccl":
        return f"backend {dist.get_backend()}"
    try:
        version = tuple(torch.cuda.nccl.version())[:2]
    except Exception as err:  # (a build without NCCL)
        return f"no NCCL version: {err}"
    if version < MIN_NCCL:
        return f"NCCL {version} (copy-engine collectives need {MIN_NCCL})"
    if not hasattr(dist.ProcessGroupNCCL, "NCCL_CTA_POLICY_ZERO"):
        return "torch has no NCCL CTA policy option"
    try:
        import torch.distributed._symmetric_memory as symm_mem

        if not hasattr(symm_mem, "set_backend"):
            return "torch's symmetric memory has no backends to choose"
    except Exception as err:
        return f"no symmetric memory: {err}"
    return ""


def _use_nccl_backend() -> str:
    """Set symmetric memory's backend to NCCL's (once the ranks agreed to: it is global);
    '' where that took, else why not (another backend allocated already)."""
    try:
        import torch.distributed._symmetric_memory as symm_mem

        symm_mem.set_backend("NCCL")
    except Exception as err:
        return f"no symmetric memory on NCCL's backend: {err}"
    return ""


def group() -> Any:
    """The zero-CTA process group of the whole world, made at the first call (every rank
    calls this at the same point of the same host program), or None where some rank
    cannot use copy-engine collectives. A setup that fails raises, now and at later calls."""
    import torch.distributed as dist

    from fuser.multidevice.communicator import NCCL_TIMEOUT_S, TIMEOUT_S

    from .agreement import _every, host_id, this_job

    this_job(_STATE)
    if "group" in _STATE:
        return _STATE["group"]
    _MADE[0] += 1
    size, rank = dist.get_world_size(), dist.get_rank()
    try:
        reason = _local_reason()
        store = dist.distributed_c10d._get_default_store()
        every = _every(store, f"fuser/copy_engine/{_MADE[0]}", f"{host_id()} {reason}",
                       size, rank, TIMEOUT_S)
        hosts = {e.split(" ", 1)[0] for e in every}
        got = None
        if len(hosts) == 1 and not any(e.split(" ", 1)[1] for e in every):
            # every rank can: each switches its backend, and they go on only if all did
            took = _every(store, f"fuser/copy_engine/{_MADE[0]}/backend", _use_nccl_backend() or "ok", size, rank,
                          TIMEOUT_S)
            if any(t != "ok" for t in took):
                _STATE["group"] = None
                return None
            opts = dist.ProcessGroupNCCL.Options()
            opts.config.cta_policy = dist.ProcessGroupNCCL.NCCL_CTA_POLICY_ZERO
            got = dist.new_group(backend="nccl", pg_options=opts, timeout=datetime.timedelta(seconds=NCCL_TIMEOUT_S))
            from .graphs import guard_shutdown

            guard_shutdown()  # the buffers go before any group does
    except Exception as err:
        failed = RuntimeError(f"the ranks could not set up copy-engine reduce-scatters (FUSER_ENABLE=copy_engine "
                              f"must be set on every rank or on none): {err}")
        _STATE["failed"] = failed
        raise failed from err
    _STATE["group"] = got
    return got


def allocate(slot: int, shape: list[int], dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
    """A symmetric buffer of `shape` for the `slot`-th such buffer of a host program (a
    view of the slot's buffer), or None where the ranks do not use copy engines. The
    slot's buffer is made at its first request and remade larger when a request needs
    more, on every rank at once (every rank runs the same program on the same shapes: the
    rendezvous is collective); other requests, from this program or another run after it,
    reuse it, once the stream of its last use has passed it. One caller at a time."""
    import torch.distributed as dist

    n = math.prod(shape)
    if device.type != "cuda" or not enabled(NAME) or dist.get_backend() != "nccl" or dist.get_world_size() == 1 or not n:
        return None
    key = (slot, dtype, device.index)
    got = _BUFFERS.get(key)
    capturing = torch.cuda.is_current_stream_capturing()
    if got is not None and got[0].numel() >= n:
        if got[3] is not None and not capturing:  # (a caller on another stream than the last)
            torch.cuda.current_stream(device).wait_event(got[3])
        return got[0][:n].view(shape)
    if capturing:  # (a rendezvous cannot be captured)
        return None
    from .communication import settle

    settle()  # (the ranks agree on this call before a collective setup)
    g = group()
    if g is None:
        return None
    if got is not None:  # too small: graphs that hold it go, then it does
        from .graphs import release_communicating

        release_communicating()
        torch.cuda.synchronize(device)
        _TWINS.pop(got[0].untyped_storage().data_ptr(), None)
        del _BUFFERS[key]
    import torch.distributed._symmetric_memory as symm_mem

    with torch.cuda.device(device):
        buf = symm_mem.empty(n, dtype=dtype, device=device)
        twin = symm_mem.empty(n, dtype=dtype, device=device)
        handles = (symm_mem.rendezvous(buf, g.group_name), symm_mem.rendezvous(twin, g.group_name))
    _BUFFERS[key] = [buf, twin, handles, None]
    _TWINS[buf.untyped_storage().data_ptr()] = twin
    return buf.view(shape)


def done(x: torch.Tensor) -> None:
    """Mark the buffer `x` (from `allocate`) used up to the current stream's work."""
    ptr = x.untyped_storage().data_ptr()
    for got in _BUFFERS.values():
        if got[0].untyped_storage().data_ptr() == ptr:
            if not torch.cuda.is_current_stream_capturing():
                if got[3] is None:
                    got[3] = torch.cuda.Event()
                got[3].record(torch.cuda.current_stream(x.device))
            return


def active() -> bool:
    """Whether stage loops' reduce-scatters may run on the copy engines now: the option on
    and this job's group up (made, every rank able). Decides nothing (`group` does,
    collectively)."""
    from .agreement import this_job

    if not enabled(NAME):
        return False
    this_job(_STATE)
    return _STATE.get("group") is not None


def receiver(x: torch.Tensor) -> tuple[Any, torch.Tensor] | None:
    """(the zero-CTA group, the view of the twin at `x`'s place) where `x` is a dense view
    inside a buffer `allocate` made; None otherwise."""
    if not _TWINS or not x.is_cuda or not x.is_contiguous():
        return None
    twin = _TWINS.get(x.untyped_storage().data_ptr())
    if twin is None:
        return None
    return _STATE["group"], twin.as_strided(x.shape, x.stride(), x.storage_offset())


def shutting_down(pg: Any) -> None:
    """Drop the buffers when `pg` is the zero-CTA group or the default group (every rank
    shuts those down: a subgroup's shutdown on some ranks only would leave the ranks with
    different buffers, and their next remake's rendezvous unmatched)."""
    import torch.distributed as dist

    if _BUFFERS and (pg is _STATE.get("group") or pg is _STATE.get("world")
                     or (dist.is_initialized() and pg is dist.distributed_c10d._get_default_group())):
        release()


def release() -> None:
    """Drop every symmetric buffer (after the graphs that read them are gone: graphs'
    `release_communicating`); the next call that wants one makes it again. Every rank
    must do it at the same point (the remake is collective)."""
    if _BUFFERS:
        for d in {got[0].device for got in _BUFFERS.values()}:
            torch.cuda.synchronize(d)  # (their last collectives end first)
    _TWINS.clear()
    _BUFFERS.clear()


__all__ = ["NAME", "active", "group", "allocate", "done", "receiver", "release", "shutting_down"]
