"""Tensor-parallel benchmarks on the GPUs of one host (issue: multi-GPU):

    torchrun --nproc-per-node 2 -m fuser.benchmarks.tensor_parallel

1. The Megatron MLP (fuser/examples/tensor_parallel.py), forward and backward, bf16: fuser's
   sharded fusions against the same layer in eager PyTorch on each rank's blocks with
   torch.distributed's allreduce, and against the whole layer on one GPU.
2. Overlap: a row-parallel linear whose allreduce is pipelined with the matmul over chunks
   of rows (a stream-parallel axis), against the same fusion without the stream axis.

Times are GPU times per call (CUDA events around back-to-back calls), the slowest rank's,
medians of rounds."""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
from typing import Callable, Iterator

import torch
import torch.distributed as dist

from fuser import DataType, FusionDefinition, ParallelType
from fuser.examples import tensor_parallel as tp
from fuser.host.graphs import LoopGraphs
from fuser.multidevice import Communicator, DeviceMesh


def _time(fn: Callable[[], object], iters: int, rounds: int = 5) -> float:
    """The slowest rank's GPU time per call (ms), median of `rounds`."""
    for _ in range(3):
        fn()
    got = []
    for _ in range(rounds):
        dist.barrier()
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(iters):
            fn()
        b.record()
        torch.cuda.synchronize()
        t = torch.tensor([a.elapsed_time(b) / iters], device="cuda")
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        got.append(float(t))
    return statistics.median(got)


def _block(t: torch.Tensor, axis: int, comm: Communicator) -> torch.Tensor:
    return t.chunk(comm.size(), axis)[comm.rank()].contiguous()


def mlp(comm: Communicator, T: int, H: int, iters: int) -> dict[str, float]:
    """Forward and backward times (ms) of the tensor-parallel MLP: fuser, eager + NCCL, and
    the whole layer on one GPU (eager and fuser)."""
    d, dev, dt = comm.size(), comm.device, torch.bfloat16
    mesh = DeviceMesh(torch.arange(d))
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(T, H, device=dev, dtype=dt, generator=g)
    w1 = torch.randn(4 * H, H, device=dev, dtype=dt, generator=g) / H ** 0.5
    b1 = torch.randn(4 * H, device=dev, dtype=dt, generator=g)
    w2 = torch.randn(H, 4 * H, device=dev, dtype=dt, generator=g) / (4 * H) ** 0.5
    b2 = torch.randn(H, device=dev, dtype=dt, generator=g)
    gy = torch.randn(T, H, device=dev, dtype=dt, generator=g)
    lw1, lb1, lw2 = _block(w1, 0, comm), _block(b1, 0, comm), _block(w2, 1, comm)

    fwd, bwd = tp.mlp_forward(mesh), tp.mlp_backward(mesh)
    y, h = fwd.execute([x, lw1, lb1, lw2, b2])
    want = tp.mlp_reference(x, w1, b1, w2, b2, gy)
    torch.testing.assert_close(y.float(), want["y"].float(), rtol=5e-2, atol=5e-2)

    def eager_fwd() -> tuple:
        hh = torch.nn.functional.linear(x, lw1, lb1)
        a = torch.nn.functional.gelu(hh.float(), approximate="tanh").to(dt)
        part = torch.nn.functional.linear(a, lw2)
        dist.all_reduce(part)
        return part + b2, hh

    def eager_bwd(hh: torch.Tensor) -> tuple:
        hf = hh.float()
        t = torch.tanh(0.7978845608028654 * (hf + 0.044715 * hf ** 3))
        a = (0.5 * hf * (1 + t)).to(dt)
        ga = (gy @ lw2).float()
        dgelu = 0.5 * (1 + t) + 0.5 * hf * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * hf * hf)
        gh = (ga * dgelu).to(dt)
        gx = gh @ lw1
        dist.all_reduce(gx)
        return gx, gh.t() @ x, gh.sum(0), gy.t() @ a, gy.sum(0)

    _, hh = eager_fwd()
    bwd_in = [gy, x, h, lw1, lw2]
    got = {
        "fuser fwd": _time(lambda: fwd.execute([x, lw1, lb1, lw2, b2]), iters),
        "eager fwd": _time(eager_fwd, iters),
        "fuser bwd": _time(lambda: bwd.execute(bwd_in), iters),
        "eager bwd": _time(lambda: eager_bwd(hh), iters),
    }
    # the whole layer on one GPU (every rank runs it; the slowest is reported)
    one_fwd, one_bwd = tp.mlp_forward(None), tp.mlp_backward(None)
    y1, h1 = one_fwd.execute([x, w1, b1, w2, b2])
    got["fuser fwd, 1 GPU"] = _time(lambda: one_fwd.execute([x, w1, b1, w2, b2]), iters)
    got["fuser bwd, 1 GPU"] = _time(lambda: one_bwd.execute([gy, x, h1, w1, w2]), iters)

    def eager1() -> torch.Tensor:
        hh1 = torch.nn.functional.linear(x, w1, b1)
        return torch.nn.functional.linear(torch.nn.functional.gelu(hh1.float(), approximate="tanh").to(dt), w2, b2)

    got["eager fwd, 1 GPU"] = _time(eager1, iters)
    return got


def overlap(comm: Communicator, T: int, K: int, N: int, chunks: int, iters: int, trace: bool = False,
            collective: str = "allreduce") -> dict[str, float]:
    """A row-parallel linear [T, K] x [N, K] (K sharded) and its `collective` (allreduce:
    the output replicated; reduce_scatter: sharded over tokens, as under sequence
    parallelism): without a stream axis, and pipelined over `chunks` chunks of rows."""
    d, dev, dt = comm.size(), comm.device, torch.bfloat16
    mesh = DeviceMesh(torch.arange(d))
    g = torch.Generator(device=dev).manual_seed(1)
    x = torch.randn(chunks, T // chunks, K, device=dev, dtype=dt, generator=g)
    w = torch.randn(N, K, device=dev, dtype=dt, generator=g) / K ** 0.5
    lx, lw = _block(x, 2, comm), _block(w, 1, comm)
    scatter = collective == "reduce_scatter"

    def define(stream: bool) -> FusionDefinition:
        with FusionDefinition() as fd:
            xt = fd.define_tensor(shape=[-1, -1, -1], contiguity=[True] * 3, dtype=DataType.BFloat16)
            wt = fd.define_tensor(shape=[-1, -1], contiguity=[True] * 2, dtype=DataType.BFloat16)
            y = fd.ops.linear(xt, wt)
            fd.add_output(y)
            for t, axis in ((xt, 2), (wt, 1)) + (((y, 1),) if scatter else ()):
                t.set_device_mesh(mesh)
                t.outer_split(axis, d)
                t.axis(axis).parallelize(ParallelType.mesh_x)
            if stream:
                y.axis(0).parallelize(ParallelType.stream)
        return fd

    piped, flat = define(True), define(False)
    want = torch.nn.functional.linear(x, w)
    if scatter:
        want = _block(want, 1, comm)
    for fd in (piped, flat):
        (out,) = fd.execute([lx, lw])
        torch.testing.assert_close(out.float(), want.float(), rtol=5e-2, atol=5e-1)
    x2 = lx.reshape(T, -1)  # eager: one [T, K / d] linear, its collective over the token axis

    def eager() -> torch.Tensor:
        part = torch.nn.functional.linear(x2, lw)
        if not scatter:
            dist.all_reduce(part)
            return part
        out = part.new_empty(T // d, N)
        dist.reduce_scatter_tensor(out, part)
        return out

    # (variant: (call, the (variable, name) it runs under, set around its timing))
    calls = {"pipelined": (lambda: piped.execute([lx, lw]), None),
             "pipelined, no graph": (lambda: piped.execute([lx, lw]), ("FUSER_DISABLE", "stream_graphs")),
             "not pipelined": (lambda: flat.execute([lx, lw]), None), "eager": (eager, None)}
    if scatter:  # each chunk's reduce-scatter on the copy engines (no SM; fuser/host/copy_engine.py)
        calls["pipelined, copy engines"] = (lambda: piped.execute([lx, lw]), ("FUSER_ENABLE", "copy_engine"))
    got: dict[str, list[float]] = {k: [] for k in calls}
    for r in range(len(calls)):  # round-robin: no variant always runs on a GPU the previous one heated
        order = list(got)[r:] + list(got)[:r]
        for name in order:
            fn, env = calls[name]
            with _option(env):
                got[name].append(_time(fn, iters, rounds=5))
    med = {k: statistics.median(v) for k, v in got.items()}
    graphs = [g for _, g in piped._entry.last_runner._steps if isinstance(g, LoopGraphs)]
    med["replays"] = sum(g.replays for g in graphs)
    if trace:  # every rank runs the call (it communicates); rank 0 prints
        for name, (fn, env) in calls.items():
            if name.startswith("pipelined") and name != "pipelined, no graph":
                with _option(env):
                    _trace(fn, f"{name}, {collective}, {chunks} chunks", comm.rank() == 0)
    for name, fn in (("pipelined", lambda: piped.execute([lx, lw])), ("not pipelined", lambda: flat.execute([lx, lw]))):
        med[name + " host"] = _issue_ms(fn)
    return med


@contextlib.contextmanager
def _option(env: tuple[str, str] | None) -> Iterator[None]:
    """`name` added to the variable FUSER_DISABLE or FUSER_ENABLE (`env`: (variable, name))
    while inside (read at each call; the same on every rank)."""
    if env is None:
        yield
        return
    var, name = env
    was = os.environ.get(var)
    os.environ[var] = ",".join(filter(None, (was, name)))
    try:
        yield
    finally:
        if was is None:
            del os.environ[var]
        else:
            os.environ[var] = was


def _trace(fn: Callable[[], object], what: str, show: bool) -> None:
    """Print (with `show`) one call's GPU kernels in start order: stream, start and length (µs)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    dist.barrier()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    if not kernels or not show:
        return
    t0 = min(e.time_range.start for e in kernels)
    print(f"\ntrace of one call ({what}):")
    for e in sorted(kernels, key=lambda e: e.time_range.start):
        print(f"  stream {getattr(e, 'device_resource_id', '?')!s:>4} {e.time_range.start - t0:9.1f} "
              f"{e.time_range.elapsed_us():8.1f}  {e.name[:70]}")


def _issue_ms(fn: Callable[[], object], calls: int = 10) -> float:
    """The host's time to issue one call on an idle GPU (ms, median; the slowest rank's)."""
    import time

    got = []
    for _ in range(calls):
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        got.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    t = torch.tensor([statistics.median(got)], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tokens", type=int, default=8192)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="small shapes (a smoke run)")
    p.add_argument("--only", choices=("mlp", "overlap"), help="one of the two tables")
    p.add_argument("--trace", action="store_true", help="print one pipelined call's GPU kernels (rank 0)")
    a = p.parse_args(argv)
    comm = Communicator.instance()
    if comm.backend != "nccl":
        raise SystemExit("the tensor-parallel benchmarks need GPUs (NCCL): start them with torchrun on a GPU host")
    T, H = (512, 256) if a.quick else (a.tokens, a.hidden)
    m = mlp(comm, T, H, a.iters) if a.only != "overlap" else None
    # K = 4H: the MLP's second linear; K = H: attention's output projection (less compute
    # per byte reduced, so more to hide)
    cases = [(4 * H, c, "allreduce") for c in (2, 4, 8)] + [(H, c, "allreduce") for c in (4, 8)] + [
        (4 * H, c, "reduce_scatter") for c in (2, 4, 8)] + [(H, c, "reduce_scatter") for c in (2, 4)]
    rows = [overlap(comm, T, K, H, c, a.iters, a.trace and (K, c) == (4 * H, 4), op)
            for K, c, op in cases] if a.only != "mlp" else []
    if comm.rank() == 0 and m is not None:
        name = torch.cuda.get_device_name()
        print(f"\ntensor-parallel MLP on {comm.size()} x {name}, bf16, tokens {T}, hidden {H} (ms per call, "
              "slowest rank)")
        print("| pass | fuser, sharded | eager + NCCL, sharded | fuser, 1 GPU | eager, 1 GPU |")
        print("|---|---|---|---|---|")
        print(f"| forward | {m['fuser fwd']:.3f} | {m['eager fwd']:.3f} | {m['fuser fwd, 1 GPU']:.3f} | "
              f"{m['eager fwd, 1 GPU']:.3f} |")
        print(f"| backward | {m['fuser bwd']:.3f} | {m['eager bwd']:.3f} | {m['fuser bwd, 1 GPU']:.3f} | — |")
    if comm.rank() == 0 and rows:
        name = torch.cuda.get_device_name()
        print(f"\nrow-parallel linear [{T}, K] x [{H}, K]^T, K sharded, and its collective, on {comm.size()} x "
              f"{name} (ms per call; GPU time of the slowest rank: the median of 4-5 interleaved rounds, "
              f"each the median of 5 runs of {a.iters} calls)")
        print("| collective | K | chunks | pipelined (stream axis) | pipelined, no CUDA graph | pipelined, copy-engine "
              "reduce-scatters (FUSER_ENABLE=copy_engine) | not pipelined | eager linear + collective | pipelined / not | host issue: "
              "pipelined | not pipelined | graph replays |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for (K, c, op), r in zip(cases, rows):
            ce = f"{r['pipelined, copy engines']:.3f}" if "pipelined, copy engines" in r else "—"
            print(f"| {op} | {K} | {c} | {r['pipelined']:.3f} | {r['pipelined, no graph']:.3f} | {ce} | "
                  f"{r['not pipelined']:.3f} | "
                  f"{r['eager']:.3f} | {r['pipelined'] / r['not pipelined']:.2f} | {r['pipelined host']:.3f} | "
                  f"{r['not pipelined host']:.3f} | {r['replays']} |")


if __name__ == "__main__":
    main()
