"""`execute(..., profile=True)` and `fd.profile()`: nvFuser's FusionProfile and KernelProfile
(segments, per-segment time, bytes and bandwidth), measured around fuser's runtime."""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch


@dataclass
class KernelProfile:
    """One segment of a profiled execute: a generated kernel or a reference-executor run."""

    name: str
    segment_id: int
    scheduler: str
    device: int = -1
    stream: int = 0
    correlation_id: int = 0
    compile_time_ms: float = 0.0
    time_ms: float = 0.0
    effective_bandwidth_gbs: float = 0.0
    percentage_peak_bandwidth: float = 0.0
    grid_str: str = ""
    block_str: str = ""
    cluster_str: str = ""
    shared_mem_str: str = ""
    registers: int = 0
    input_bytes: int = 0
    output_bytes: int = 0


@dataclass
class FusionProfile:
    """A profiled execute as nvFuser reports it (its field names, `percentage_peak_bandwith`
    spelling included)."""

    fusion_id: int
    segments: int
    host_time_ms: float
    cuda_evt_time_ms: float
    kernel_time_ms: float
    compile_time_ms: float = 0.0
    input_bytes: int = 0
    output_bytes: int = 0
    effective_bandwidth_gbs: float = 0.0
    percentage_peak_bandwith: float = 0.0
    kernel_profiles: list[KernelProfile] = field(default_factory=list)
    verbose: bool = False


def _nbytes(values: Any) -> int:
    return sum(x.numel() * x.element_size() for x in values if isinstance(x, torch.Tensor))


def _peak_gbs(device: torch.device) -> float:
    """The device's theoretical memory bandwidth (GB/s), 0 where torch does not say."""
    if device.type != "cuda":
        return 0.0
    props = torch.cuda.get_device_properties(device)
    clock_khz = getattr(props, "memory_clock_rate", 0)
    bus_bits = getattr(props, "memory_bus_width", 0)
    return 2.0 * clock_khz * 1e3 * bus_bits / 8 / 1e9


class _Timer:
    """Host time on the CPU; CUDA events on the GPU (read after one synchronize)."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def start(self) -> Any:
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def stop(self, begin: Any) -> Callable[[], float]:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            return lambda: begin.elapsed_time(end)
        t = (time.perf_counter() - begin) * 1e3
        return lambda: t


class _SegmentTimer:
    """The runner's observer during a profiled execute: each segment's run (its kernel's
    launch, or its reference-executor run) timed, with the bytes it read and wrote."""

    def __init__(self, device: torch.device) -> None:
        self.timer = _Timer(device)
        self.seen: dict[int, tuple[Callable[[], float], int, int]] = {}

    def start(self, k: int) -> Any:
        return self.timer.start()

    def stop(self, k: int, token: Any, args: Any, outs: Any) -> None:
        self.seen[k] = (self.timer.stop(token), _nbytes(args), _nbytes(outs))


@contextlib.contextmanager
def observe_segments(runner: Any, device: torch.device) -> Iterator[dict]:
    """While an execute runs on `runner`, time each segment. Yields {group index: (elapsed
    fn, in bytes, out bytes)}."""
    observer = _SegmentTimer(device)
    runner.observer = observer
    try:
        yield observer.seen
    finally:
        runner.observer = None


def build_profile(fusion_id: int, runner: Any, seen: dict, host_ms: float, total: Callable[[], float],
                  device: torch.device, inputs: Any, outputs: Any) -> FusionProfile:
    """The FusionProfile of one execute from what `observe_segments` saw. A segment whose
    kernel was compiled during the call is not timed alone: it gets the remaining time,
    reported as compile time."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    total_ms = total()
    peak = _peak_gbs(device)
    index = device.index if device.type == "cuda" and device.index is not None else -1
    profiles = []
    measured = {k: (elapsed(), ib, ob) for k, (elapsed, ib, ob) in seen.items()}
    unseen = [k for k in range(len(runner.runs)) if k not in measured]
    rest = max(total_ms - sum(t for t, _, _ in measured.values()), 0.0)
    for k, r in enumerate(runner.runs):
        kernel = r.kernel
        name = getattr(kernel, "name", None) or (f"kernel{k}" if kernel else f"reference_segment{k}")
        t, ib, ob = measured.get(k, (rest / max(len(unseen), 1), 0, 0))
        bw = (ib + ob) / (t * 1e6) if t > 0 else 0.0
        profiles.append(KernelProfile(
            name=name, segment_id=k, scheduler=r.group.scheduler.value, device=index,
            compile_time_ms=t if k in unseen else 0.0, time_ms=t, effective_bandwidth_gbs=bw,
            percentage_peak_bandwidth=100.0 * bw / peak if peak else 0.0, input_bytes=ib, output_bytes=ob,
        ))
    in_bytes, out_bytes = _nbytes(inputs), _nbytes(outputs)
    bw = (in_bytes + out_bytes) / (total_ms * 1e6) if total_ms > 0 else 0.0
    return FusionProfile(
        fusion_id=fusion_id, segments=len(runner.runs), host_time_ms=host_ms,
        cuda_evt_time_ms=total_ms, kernel_time_ms=sum(p.time_ms for p in profiles),
        compile_time_ms=sum(p.compile_time_ms for p in profiles), input_bytes=in_bytes, output_bytes=out_bytes,
        effective_bandwidth_gbs=bw, percentage_peak_bandwith=100.0 * bw / peak if peak else 0.0,
        kernel_profiles=profiles,
    )


__all__ = ["FusionProfile", "KernelProfile", "observe_segments", "build_profile"]
