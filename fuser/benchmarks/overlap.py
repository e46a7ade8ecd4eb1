"""Stream parallelism's overlap (seed 004): a matmul run by ATen and a pointwise kernel
fuser generates, over C chunks of rows, with the chunk axis `ParallelType.stream`. Each
iteration runs on a worker stream, so chunk i's pointwise kernel runs beside chunk i+1's
matmul. `bench --overlap` times the loop beside its parts on the same inputs: the whole
matmul alone, the pointwise fusion alone, and the same fusion without the stream axis
(one matmul, then one kernel).

What bounds the overlap: cuBLAS's GEMM chunks hold every SM (one CTA an SM, its whole
register file), so chunk i's pointwise kernel runs only in chunk i+1's wave tails. Levers
measured on an H100 (2026-11-28, loop / sum of the parts at the four SHAPES): none 0.966 /
0.981 / 0.983 / 1.14; the GEMMs under an SM carveout of 8-48 SMs (cuBLASLt's
`torch._C._set_sm_carveout_experimental`) 0.975-1.05 / 0.985-1.07 / 0.99-1.13 / 1.09-1.13;
the GEMMs chained on one stream (one at a time, so a carveout's SMs stay free) with the
pointwise kernels on two side streams, at normal or high priority: 0.97-1.08 / 0.98-1.30 /
1.00-1.39 / 1.18-1.44. A carved-out GEMM slows by about the SMs it gives up (32 of 132:
388 -> 454 µs) and the pointwise kernel on the freed SMs does not make it back.
Two more runs of today's loop (H100, 2026-12-06), loop / sum at the four SHAPES: 0.99 /
0.96 / 0.97 / 1.14 and 0.98 / 0.97 / 0.95 / 1.13. The last shape's sixteen 512-row GEMMs
run slower chunked than whole (the loop is 1.13 of the fusion without the stream axis)."""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable

import torch

from fuser import DataType, FusionDefinition, ParallelType

from . import host_time_per_call, kernel_time

#: (chunks, rows per chunk, K, N): bf16 GEMMs from compute-bound (large K) to ones whose
#: pointwise part weighs as much as the matmul (small K, wide N)
SHAPES = ((4, 2048, 4096, 4096), (8, 1024, 4096, 4096), (8, 2048, 1024, 8192), (16, 512, 512, 8192))


def define(stream: bool) -> FusionDefinition:
    """gelu(x @ w) * 2 on x [C, S, K] bf16, w [K, N]; with `stream`, over C on streams."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        m = fd.ops.matmul(x, w)
        computed = [m]
        g = _gelu_times_two(fd, m, computed)
        fd.add_output(g)
        if stream:
            for t in computed:  # every tensor the loop computes says so, as in nvFuser
                t.axis(0).parallelize(ParallelType.stream)
    return fd


def _gelu_times_two(fd: FusionDefinition, m, computed: list | None = None):
    """bf16(2 * tanh-GELU(float(m))) (PyTorch's approximate='tanh'); appends each tensor
    it defines to `computed`."""
    out = computed if computed is not None else []

    def op(t):
        out.append(t)
        return t

    x = op(fd.ops.cast(m, DataType.Float))
    cube = op(fd.ops.mul(op(fd.ops.mul(x, x)), x))
    inner = op(fd.ops.mul(op(fd.ops.add(x, op(fd.ops.mul(cube, 0.044715)))), 0.7978845608028654))
    gelu = op(fd.ops.mul(op(fd.ops.mul(x, 0.5)), op(fd.ops.add(op(fd.ops.tanh(inner)), 1.0))))
    return op(fd.ops.cast(op(fd.ops.mul(gelu, 2.0)), DataType.BFloat16))


@dataclass
class OverlapRow:
    shape: tuple[int, int, int, int]
    loop_us: float
    matmul_us: float
    pointwise_us: float
    sequential_us: float
    #: the host's time to issue one call of the loop (µs), and whether that bounds it
    loop_host_us: float = 0.0
    host_bound: bool = False
    #: the loop's wall time per call, back to back (what a caller waits: host or GPU, the slower)
    loop_wall_us: float = 0.0

    @property
    def parts_us(self) -> float:
        return self.matmul_us + self.pointwise_us


def run(shapes=SHAPES, iters: int = 20, repeats: int = 5, rounds: int = 3) -> list[OverlapRow]:
    """Time each shape's loop, its parts and the unparallelised fusion (CUDA), in `rounds`
    round-robin rounds (medians): a GPU warmed by one variant's timing (clocks drop under a
    long GEMM run) slows whichever variant comes next, so no variant always comes last."""
    rows = []
    for c, s, k, n in shapes:
        x = torch.randn(c, s, k, device="cuda", dtype=torch.bfloat16) / k ** 0.5
        w = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        loop, seq = define(True), define(False)
        want = (torch.nn.functional.gelu((x @ w).float(), approximate="tanh") * 2).bfloat16()
        for fd in (loop, seq):
            got = fd.execute([x, w])[0]
            torch.testing.assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2)
        m = x @ w
        pw = _pointwise()
        pw.execute([m])
        variants: dict[str, Callable[[], object]] = {
            "loop": lambda: loop.execute([x, w]), "matmul": lambda: torch.matmul(x, w),
            "pointwise": lambda: pw.execute([m]), "sequential": lambda: seq.execute([x, w])}
        got: dict[str, list[float]] = {name: [] for name in (*variants, "wall")}
        for r in range(rounds):
            order = list(variants)[r % len(variants):] + list(variants)[:r % len(variants)]
            for name in order:
                got[name].append(kernel_time(variants[name], iters=iters, repeats=repeats).us)
            got["wall"].append(host_time_per_call(variants["loop"], calls=iters, repeats=repeats, warmup=2))
        med = {name: statistics.median(v) for name, v in got.items()}
        host = _issue_us(variants["loop"])
        rows.append(OverlapRow((c, s, k, n), med["loop"], med["matmul"], med["pointwise"], med["sequential"],
                               host, host > med["loop"], med["wall"]))
    return rows


def _issue_us(fn: Callable[[], object], calls: int = 15) -> float:
    """The host's time to issue one call on an idle GPU (median, µs). Timed loops of many
    calls overstate it: once the launch queue is full the host waits for the GPU."""
    got = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        got.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(got)


def _pointwise() -> FusionDefinition:
    with FusionDefinition() as fd:
        m = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.BFloat16)
        fd.add_output(_gelu_times_two(fd, m))
    return fd


def table(rows: list[OverlapRow], device: str) -> str:
    head = ("C x S x K x N", "stream loop", "matmul alone", "pointwise alone", "sum of parts", "loop / sum",
            "no stream axis", "loop host", "loop wall", "wall / sum")
    lines = [f"stream-parallel matmul + pointwise on {device} (bf16; µs per call)",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append(f"| {' x '.join(map(str, r.shape))} | {r.loop_us:.1f} | {r.matmul_us:.1f} | "
                     f"{r.pointwise_us:.1f} | {r.parts_us:.1f} | {r.loop_us / r.parts_us:.2f} | {r.sequential_us:.1f} | "
                     f"{r.loop_host_us:.1f}{' (host-bound)' if r.host_bound else ''} | {r.loop_wall_us:.1f} | "
                     f"{r.loop_wall_us / r.parts_us:.2f} |")
    lines.append("GPU times (CUDA events, medians of round-robin rounds over the variants; the host issues each "
                 "timed loop while the GPU is held busy); loop host: "
                 "the host's time to issue one call on an idle GPU; loop wall: per call of back-to-back calls "
                 "with one synchronize at the end, what a caller waits")
    return "\n".join(lines)
