"""Benchmarks shared by `python -m fuser bench` (fuser/cli/bench.py) and asv
(asv_bench/benchmarks/kernels.py): the fusions (`fusions`) and the CUDA timing helpers here.

Kernel time is measured with CUDA events around a loop of calls, divided by the number of
calls; the median over several loops is reported. Before each loop the GPU is kept busy
with ``torch.cuda._sleep`` for longer than the host needs to issue the whole loop, so the
events bracket back-to-back GPU work and not Python's per-call overhead. That hides what a
user's loop sees when the host is slower than the GPU, so the host's own time per call is
measured too (`KernelTime.host_us`), and a call whose host time exceeds its GPU time is
host-bound (`KernelTime.host_bound`): in a user's loop it takes the host's time, not the
kernel's. There is no L2 flush between calls: callers rotate over several input sets
(`rotating`) where one set would stay in L2.
"""
from __future__ import annotations

import functools
import itertools
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from .fusions import FUSIONS, GROUPS, BenchFusion, by_name, bytes_moved, define, select, stored_bytes

__all__ = [
    "FUSIONS",
    "GROUPS",
    "BenchFusion",
    "by_name",
    "select",
    "bytes_moved",
    "define",
    "stored_bytes",
    "KernelTime",
    "kernel_time",
    "kernel_time_after_producer",
    "copy_bandwidth",
    "host_time_per_call",
    "rotating",
    "rotation",
]

#: most the GPU is put to sleep ahead of one timed loop
_MAX_SLEEP_MS = 2000.0
_sleep_cycles_per_ms: float | None = None


@dataclass(frozen=True)
class KernelTime:
    """Median GPU time per call (µs) over `repeats` loops of `iters` calls, the host's
    time to issue one call (µs), and whether the host is the bottleneck: it needs longer to
    issue a call than the GPU to run it, so a loop of calls runs at the host's pace."""

    us: float
    host_us: float
    host_bound: bool
    iters: int
    repeats: int


def _cycles_per_ms() -> float | None:
    """How many ``torch.cuda._sleep`` cycles one millisecond is (measured once), or None
    when this torch has no ``_sleep``."""
    global _sleep_cycles_per_ms
    if _sleep_cycles_per_ms is None:
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is None:
            return None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        sleep(1_000_000)  # warm-up
        cycles = 20_000_000
        start.record()
        sleep(cycles)
        end.record()
        end.synchronize()
        _sleep_cycles_per_ms = cycles / max(start.elapsed_time(end), 1e-3)
    return _sleep_cycles_per_ms


def _sleep_cycles(host_ms: float) -> int:
    """GPU sleep cycles that outlast the host's `host_ms` of issuing a timed loop (1.5x, plus
    1 ms, at most _MAX_SLEEP_MS), so that the GPU finds the whole loop queued; 0 where this
    torch cannot sleep the GPU."""
    cpm = _cycles_per_ms()
    return int(min(_MAX_SLEEP_MS, 1.5 * host_ms + 1.0) * cpm) if cpm else 0


def kernel_time(fn: Callable[[], object], *, iters: int = 100, repeats: int = 7, warmup: int = 5) -> KernelTime:
    """GPU time per call of `fn` on the current stream (see the module docstring)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    # the host's time to issue one call (no synchronisation: what it costs to enqueue)
    probe = max(1, min(iters, 10))
    t0 = time.perf_counter()
    for _ in range(probe):
        fn()
    host_est_ms = (time.perf_counter() - t0) * 1e3 / probe
    torch.cuda.synchronize()
    cycles = _sleep_cycles(host_est_ms * iters)

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gpu, host = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        if cycles:
            torch.cuda._sleep(cycles)
        start.record()
        h0 = time.perf_counter()
        for _ in range(iters):
            fn()
        h_ms = (time.perf_counter() - h0) * 1e3
        end.record()
        end.synchronize()
        g_ms = start.elapsed_time(end)
        gpu.append(g_ms / iters)
        host.append(h_ms / iters)
    us, host_us = statistics.median(gpu) * 1e3, statistics.median(host) * 1e3
    return KernelTime(us, host_us, host_us > us, iters, repeats)


def _elements_distinct(t: torch.Tensor) -> bool:
    """Whether no two of `t`'s elements share memory, so that a copy may write into it."""
    span = 1
    for size, stride in sorted((d for d in zip(t.shape, t.stride()) if d[0] > 1), key=lambda d: d[1]):
        if stride < span:
            return False
        span = stride * size
    return True


#: the kernels `kernel_time_after_producer` can rewrite an input with
PRODUCERS = ("copy", "write", "matmul")
#: the inner size of a "matmul" producer: the input is written as [rows, K] @ [K, columns]
MATMUL_PRODUCER_K = 1024


def _rewriter(target: torch.Tensor, producer: str) -> Callable[[], object]:
    """What rewrites `target` as `producer` (one of PRODUCERS; see
    `kernel_time_after_producer`) would."""
    if producer == "copy":
        return functools.partial(target.copy_, target.clone())
    how = "normal_" if producer == "write" else "a matmul"
    if not target.is_floating_point():
        raise ValueError(f"producer={producer!r} rewrites the largest input with {how}, which needs a "
                         f"floating-point tensor; it is {target.dtype}")
    if producer == "write":
        return target.normal_
    if target.dim() == 0 or not target.is_contiguous():
        raise ValueError(f"producer='matmul' writes the largest input as a matmul's output, which needs it "
                         f"contiguous with a dimension; it has shape {list(target.shape)} and strides "
                         f"{list(target.stride())}")
    out = target.view(-1, target.shape[-1])
    k = MATMUL_PRODUCER_K
    # (unit-variance outputs, as a linear layer's)
    a = torch.randn(out.shape[0], k, dtype=target.dtype, device=target.device) / k ** 0.5
    b = torch.randn(k, out.shape[1], dtype=target.dtype, device=target.device)
    return functools.partial(torch.matmul, a, b, out=out)


def kernel_time_after_producer(fn: Callable[[], object], inputs: list, *, iters: int = 50,
                               repeats: int = 5, producer: str = "copy", step: bool = False) -> float | None:
    """GPU time per call of `fn` (µs, the median of single calls between CUDA events; with
    `step`, per producer and call) where each call follows a kernel that rewrites its largest
    tensor input, as a kernel follows the one that made its activation: the input's
    last-written part is in L2 when `fn` starts (`kernel_time` rotates inputs so that none
    is). `producer`: "copy" (from a clone, a read and a write, as most producers), "write"
    (`normal_`, writes only, as `torch.randn` made the anchors' inputs: L2 then holds only the
    input's lines, all dirty) or "matmul" (cuBLAS writes it as a linear layer's output, [rows,
    MATMUL_PRODUCER_K] @ [MATMUL_PRODUCER_K, columns], whose epilogue writes it while L2 also
    holds the operands' tiles: what a norm after a projection reads). `step`: time each producer with its call, so that the dirty
    lines a call leaves in L2, written back when the next producer evicts them, count (in
    the next step's time, alike in steady state); the producer is the same for every setting
    a sweep compares, so differences between settings are the calls' own. None where no input
    can be rewritten (none on the GPU, or each expanded). The GPU sleeps while the host issues
    each loop, as in `kernel_time`: otherwise a call the host issues slower than the producer
    runs is timed from the producer's end, host time included (H200, RMSNorm [2048, 16384]:
    36.8, 60.0 and 67.1 µs in three runs without the sleep)."""
    if producer not in PRODUCERS:
        raise ValueError(f"producer={producer!r}: one of {', '.join(map(repr, PRODUCERS))}")
    tensors = [t for t in inputs if isinstance(t, torch.Tensor) and t.is_cuda and t.numel()
               and _elements_distinct(t)]
    if not tensors:
        return None
    rewrite = _rewriter(max(tensors, key=lambda t: t.numel() * t.element_size()), producer)
    for _ in range(3):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]

    def issue(n: int) -> None:
        for start, end in zip(starts[:n], ends[:n]):
            if step:
                start.record()
                rewrite()
            else:
                rewrite()
                start.record()
            fn()
            end.record()

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    issue(10)  # the host's time to issue one timed step
    host_est_ms = (time.perf_counter() - t0) * 1e3 / min(10, iters)
    torch.cuda.synchronize()
    cycles = _sleep_cycles(host_est_ms * iters)
    got = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        if cycles:
            torch.cuda._sleep(cycles)
        issue(iters)
        torch.cuda.synchronize()
        got.extend(s.elapsed_time(e) for s, e in zip(starts, ends))
    return statistics.median(got) * 1e3


def rotating(call: Callable[[list], object], sets: list[list]) -> Callable[[], object]:
    """`call` on each of the input `sets` in turn, one set a call (a loop then finds no
    input in L2 that the previous call left there, once the sets together exceed it)."""
    if len(sets) == 1:
        only = sets[0]
        return lambda: call(only)
    it = itertools.cycle(sets)
    return lambda: call(next(it))


def rotation(nbytes: int, l2_bytes: int, most: int = 64) -> int:
    """How many input sets of `nbytes` (moved per call) a timed loop rotates over so that
    the sets together move at least 4x the L2 cache (1: one set is that large already)."""
    if l2_bytes <= 0 or nbytes <= 0 or nbytes >= 4 * l2_bytes:
        return 1
    return min(most, -(-4 * l2_bytes // nbytes))


def copy_bandwidth(nbytes: int = 1 << 30, *, iters: int = 20, repeats: int = 5) -> tuple[float, KernelTime]:
    """Device-to-device copy bandwidth in bytes/s: ``dst.copy_(src)`` on `nbytes` buffers,
    counted as 2 * nbytes (read + write) per copy. Returns (bandwidth, timing)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    t = kernel_time(lambda: dst.copy_(src), iters=iters, repeats=repeats)
    src = dst = None  # free the buffers before the caller's next allocation
    torch.cuda.empty_cache()
    return 2 * nbytes / (t.us * 1e-6), t


def host_time_per_call(fn: Callable[[], object], *, calls: int = 2000, repeats: int = 5, warmup: int = 200) -> float:
    """Host wall time per call of `fn` in µs: the median over `repeats` loops of `calls`
    calls of (loop time / calls), with one ``torch.cuda.synchronize`` at the end of each
    loop (counted) and none inside it: the cost of issuing the work."""
    cuda = torch.cuda.is_available()
    for _ in range(warmup):
        fn()
    if cuda:
        torch.cuda.synchronize()
    per_call = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        if cuda:
            torch.cuda.synchronize()
        per_call.append((time.perf_counter_ns() - t0) / calls / 1e3)
    return statistics.median(per_call)
