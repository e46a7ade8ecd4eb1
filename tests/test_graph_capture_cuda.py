"""`fd.execute` inside CUDA graph capture: every kind of segment fuser runs (pointwise,
reductions with grid-wide counters, persistent and inner-outer normalisations, transposes,
slices / pads / cats, index ops, scatter, random numbers, ATen work between kernels, a
fusion first compiled during the capture) records into a `torch.cuda.CUDAGraph` without a
host copy, synchronisation or allocation outside PyTorch's graph pool, and each replay on
fresh input values gives what eager PyTorch gives on them. Random numbers advance with
each replay, as PyTorch's own do under graphs, and torch.manual_seed repeats them.

Each replay first fills the captured outputs with NaN, so a launch the graph lost shows."""
from __future__ import annotations

import math
from typing import Callable, Sequence

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.benchmarks.fusions import FUSIONS, by_name
from fuser.runtime.tolerance import assert_close

pytestmark = pytest.mark.gpu


def _writable(x: torch.Tensor) -> torch.Tensor:
    """The elements of `x` that own memory: expanded (stride 0) dims narrowed to one."""
    for d in range(x.ndim):
        if x.stride(d) == 0 and x.shape[d] > 1:
            x = x.narrow(d, 0, 1)
    return x


def _refill(inputs: Sequence, fresh: Sequence) -> None:
    """Copy `fresh` values into the captured `inputs` in place (their addresses are in the graph)."""
    for x, f in zip(inputs, fresh):
        if isinstance(x, torch.Tensor):
            w = _writable(x)
            w.copy_(f.as_strided(w.shape, f.stride()) if f.shape != w.shape else f)


def _kernels_ran(fd: FusionDefinition) -> int:
    """How many of the last execution's segments ran generated kernels; fails if a segment
    that should have one fell back to the reference executor."""
    n = 0
    for s in fd.last_segments():
        if s.generates_kernel:
            assert s.kernel, f"segment {s.scheduler} fell back to the reference executor"
            n += 1
    return n


def _capture(fd: FusionDefinition, inputs: list, *, warm: bool = True) -> tuple[torch.cuda.CUDAGraph, list]:
    """A graph of `fd.execute(inputs)` (run once on a side stream first unless not `warm`)."""
    if warm:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fd.execute(inputs)
        torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = fd.execute(inputs)
    return graph, outs


def _replay(graph: torch.cuda.CUDAGraph, outs: list) -> None:
    for o in outs:
        if o.dtype.is_floating_point:
            _writable(o).fill_(math.nan)
        elif o.dtype is torch.bool:
            _writable(o).fill_(True)
        else:
            _writable(o).fill_(-7)
    graph.replay()
    torch.cuda.synchronize()


def _check_replays(fd: FusionDefinition, inputs: list, make: Callable[[], list], eager: Callable[[list], list],
                   tol: Callable[[int, torch.Tensor], tuple[float, float]] | None = None, *, warm: bool = True,
                   replays: int = 2) -> None:
    graph, outs = _capture(fd, inputs, warm=warm)
    assert _kernels_ran(fd) > 0
    for _ in range(replays):
        _refill(inputs, make())
        _replay(graph, outs)
        want = eager(inputs)
        assert len(want) == len(outs)
        for k, (g, w) in enumerate(zip(outs, want)):
            rtol, atol = tol(k, w) if tol is not None else (None, None)
            assert_close(g, w, what=f"output {k} after replay", rtol=rtol, atol=atol)


_SHAPES = {"pointwise": [(64, 96), (1000, 1030)], "reduction": [(64, 96), (4, 1 << 18), (3000, 700)],
           "backward": [(64, 96), (2048, 1024)], "shapes": [None]}
_CASES = [(f.name, s if s is not None else f.small_shape) for f in FUSIONS if not f.random
          for s in _SHAPES[f.group] if f.kind == "bandwidth" or s == (64, 96)]


@pytest.mark.parametrize("name,shape", _CASES, ids=[f"{n}-{'x'.join(map(str, s))}" for n, s in _CASES])
def test_benchmark_fusions_replay_like_eager(name, shape):
    bench = by_name(name)
    if len(shape) != len(bench.small_shape):
        shape = bench.small_shape
    fd = bench.fusion_definition()
    inputs = bench.make_inputs("cuda", shape)
    _check_replays(fd, inputs, lambda: bench.make_inputs("cuda", shape), bench.eager,
                   lambda k, w: bench.tolerance(inputs, w, k))


def test_grid_reduction_counters_are_the_graphs_own():
    # a sum over few long rows runs as a grid reduction (arrival counters): the eager
    # launches and the replays, interleaved, each find their counters zeroed
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.sum(x, dims=[1]))
    x = torch.randn(4, 1 << 20, device="cuda")
    graph, (out,) = _capture(fd, [x])
    assert "semaphore" in fd.last_cuda_code()
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        _replay(graph, [out])
        assert_close(out, x.sum(1), rtol=1e-4, atol=2e-2)
        y = torch.randn_like(x)
        (eager,) = fd.execute([y])
        assert_close(eager, y.sum(1), rtol=1e-4, atol=2e-2)


def test_first_execution_compiles_inside_the_capture():
    # no warm-up: segmentation, NVRTC and the module load happen while capturing
    scale = 1.0 + torch.rand(()).item()  # a constant no earlier fusion has: a new kernel
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        y = fd.ops.mul(fd.ops.cast(x, DataType.Float), fd.define_scalar(scale, dtype=DataType.Double))
        fd.add_output(fd.ops.cast(fd.ops.relu(y), DataType.BFloat16))
        fd.add_output(fd.ops.sum(y, dims=[1]))
    x = torch.randn(300, 500, device="cuda", dtype=torch.bfloat16)
    _check_replays(fd, [x], lambda: [torch.randn(300, 500, device="cuda", dtype=torch.bfloat16)],
                   lambda i: [torch.relu(i[0].float() * scale).bfloat16(), (i[0].float() * scale).sum(1)],
                   lambda k, w: (2e-2, 2e-2) if k == 0 else (1e-4, 1e-2), warm=False)


def test_scalar_inputs_are_frozen_into_the_graph_as_pytorch_does():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1], contiguity=[True])
        s = fd.define_scalar(dtype=DataType.Double)
        fd.add_output(fd.ops.add(fd.ops.mul(x, s), fd.ops.maximum(x, 0.25)))
    x = torch.randn(4097, device="cuda")
    _check_replays(fd, [x, 1.5], lambda: [torch.randn(4097, device="cuda")],
                   lambda i: [i[0] * 1.5 + torch.clamp_min(i[0], 0.25)])


def test_slices_pads_cats_and_reshapes_replay_like_eager():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        a = fd.ops.slice(x, [0, 1], [64, 65], [1, 1])
        b = fd.ops.pad(fd.ops.slice(x, [0, 0], [64, 32], [1, 1]), [16, 16], fd.define_scalar(0.5, dtype=DataType.Double))
        c = fd.ops.cat([a, b], dim=1)
        fd.add_output(fd.ops.reshape(fd.ops.exp(c), [64 * 128]))
        fd.add_output(fd.ops.sum(c, dims=[0]))
    x = torch.randn(64, 130, device="cuda")

    def eager(i):
        t = i[0]
        c = torch.cat([t[:, 1:65], torch.nn.functional.pad(t[:, :32], (16, 16), value=0.5)], 1)
        return [c.exp().reshape(-1), c.sum(0)]

    _check_replays(fd, [x], lambda: [torch.randn(64, 130, device="cuda")], eager,
                   lambda k, w: (1e-5, 1e-5) if k == 0 else (1e-4, 1e-3))


def test_index_ops_and_scatter_replay_like_eager():
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        idx = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Int)
        rows = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.Int)
        g = fd.ops.take_along_axis(x, idx, 1)
        fd.add_output(fd.ops.add(g, fd.ops.index_select(x, rows, 0)))
        fd.add_output(fd.ops.scatter(x, idx, fd.ops.neg(x), 1))
    n, m = 257, 96

    def make():
        perm = torch.stack([torch.randperm(m, device="cuda") for _ in range(n)])
        return [torch.randn(n, m, device="cuda"), perm, torch.randint(0, n, (n,), device="cuda")]

    def eager(i):
        x, idx, rows = i
        return [torch.take_along_dim(x, idx, 1) + x[rows], x.scatter(1, idx, -x)]

    _check_replays(fd, make(), make, eager)


def test_aten_work_between_kernels_replays_like_eager():
    # linear runs on ATen (expr_eval), the bias, gelu and row sums as generated kernels
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        w = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=DataType.BFloat16)
        y = fd.ops.cast(fd.ops.linear(x, w), DataType.Float)
        bb = fd.ops.broadcast_in_dim(fd.ops.cast(b, DataType.Float), shape=y.shape(), broadcast_dims=[1])
        z = fd.ops.relu(fd.ops.add(y, bb))
        fd.add_output(fd.ops.cast(z, DataType.BFloat16))
        fd.add_output(fd.ops.sum(z, dims=[1]))

    def make():
        return [torch.randn(128, 256, device="cuda", dtype=torch.bfloat16),
                torch.randn(320, 256, device="cuda", dtype=torch.bfloat16) / 16,
                torch.randn(320, device="cuda", dtype=torch.bfloat16)]

    def eager(i):
        z = torch.relu(torch.nn.functional.linear(i[0], i[1]).float() + i[2].float())
        return [z.bfloat16(), z.sum(1)]

    _check_replays(fd, make(), make, eager, lambda k, w: (2e-2, 2e-2) if k == 0 else (1e-2, 0.5))


def _dropout() -> FusionDefinition:
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        r = fd.ops.rand_like(x)
        keep = fd.ops.lt(r, 0.9)
        fd.add_output(fd.ops.where(keep, fd.ops.mul(x, 1 / 0.9), 0.0))
        fd.add_output(r)
    return fd


def test_random_numbers_advance_per_replay_and_follow_the_seed():
    fd = _dropout()
    x = torch.randn(1024, 1000, device="cuda")
    graph, outs = _capture(fd, [x])
    assert _kernels_ran(fd) == 1
    seen = []
    for _ in range(3):
        x.copy_(torch.randn_like(x))
        _replay(graph, outs)
        out, r = outs
        assert float(r.min()) >= 0.0 and float(r.max()) < 1.0
        # 1M uniforms: mean 0.5 +- 6 standard errors (0.29 / 1000)
        assert abs(float(r.double().mean()) - 0.5) < 6 * 0.29 / 1000
        assert_close(out, torch.where(r < 0.9, x / 0.9, 0.0), rtol=1e-6, atol=1e-6)
        seen.append(r.clone())
    assert not torch.equal(seen[0], seen[1]) and not torch.equal(seen[1], seen[2])
    again = []
    for _ in range(2):
        torch.cuda.manual_seed(1234)
        _replay(graph, outs)
        again.append(outs[1].clone())
    assert torch.equal(again[0], again[1])
    # eager executions beside the graph still draw from the generator as before
    torch.cuda.manual_seed(99)
    a = fd.execute([x])[1]
    torch.cuda.manual_seed(99)
    assert torch.equal(a, fd.execute([x])[1])
