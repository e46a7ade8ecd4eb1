"""Inner-persistent kernels whose blocks take groups of rows in turn (`ReductionParams.row_loop`,
fuser/lower/row_loop.py): generated without a GPU, compiled with nvcc for sm_90, and run in
the CPU kernel simulator on grids capped at a few resident blocks (so every block loops),
for each way of loading the rows, against the reference executor."""
from __future__ import annotations

import pytest
import torch

from cuda_units import compile_all
from fuser import DataType, FusionDefinition
from fuser.benchmarks import fusions as F
from fuser.lower import row_loop
from fuser.scheduler import normalization

LOADS = ("direct", "registers", "staged")
LOOP = "for (nvfuser_index_t it = 0;"


@pytest.fixture
def loop(switches):
    """Set the row loop's mode and loads (the `switches` fixture: fresh caches)."""

    def set_(mode: str, loads: str = "direct") -> None:
        switches(row_loop, ROW_LOOP_LOADS=loads)
        switches(normalization, PERSISTENT_ROW_LOOP=mode)

    return set_


def _bench_code(name: str, shape: tuple[int, ...]) -> str:
    f = F.by_name(name)
    return F.define(name).cuda_code_for([x.to("meta") for x in f.inputs(torch.device("cpu"), shape)])


def test_weights_are_loaded_once_before_the_blocks_loop_over_rows(loop):
    loop("weights")
    src = _bench_code("rmsnorm_fwd_bf16", (16384, 4096))
    assert src.count(LOOP) == 1
    start = src.index(LOOP)
    # the weight (T1) before the loop, the rows (T0) in it; the row's index is the loop's
    weight = src.index("fuser::load_vec<__bfloat, 8>(&r1[u * 8], &T1[")
    rows = src.index("fuser::load_vec<__bfloat, 8>(&r0[u * 8], &T0[")
    assert weight < start < rows and src.count("&T1[") == 1
    assert "row * s0_0]" in src[rows:rows + 200]
    # one block reduction a row: its scratch alternates between halves by the row's parity
    assert "__shared__ float smem_Float[512];" in src and "&smem_Float[(it % 2) * 256]" in src


def test_the_mode_decides_which_kernels_loop(loop):
    loop("never")
    assert LOOP not in _bench_code("rmsnorm_fwd_bf16", (16384, 4096))
    loop("weights")
    assert LOOP not in _bench_code("softmax_fwd_bf16", (16384, 4096))  # no input without the rows
    assert LOOP not in _bench_code("rmsnorm_fwd_bf16", (256, 4096))  # one wave of blocks: nothing to gain
    assert LOOP in _bench_code("layernorm_fwd_fp32", (16384, 1024))
    loop("always")
    assert LOOP in _bench_code("softmax_fwd_bf16", (256, 4096))


@pytest.mark.parametrize("loads", LOADS)
def test_every_way_of_loading_the_rows_compiles(loop, loads):
    loop("always", loads)
    sources = [_bench_code(n, s) for n, s in (("rmsnorm_fwd_bf16", (16384, 4096)), ("layernorm_fwd_bf16", (8192, 8192)),
                                              ("layernorm_fwd_fp32", (16384, 1024)), ("softmax_fwd_bf16", (2048, 16384)),
                                              ("dropout_add_layernorm_fwd_bf16", (16384, 4096)))]
    assert all(LOOP in s for s in sources)
    if loads == "staged":
        assert all("fuser::cp_async<16>(" in s for s in sources[:2])
    if loads == "registers":  # the next group's rows into registers of their own
        assert "__bfloat nr0[16];" in sources[0]
    assert compile_all(sources)[:4] == b"\x7fELF"


# --- simulated: every block loops (3 resident), against the reference executor ----------------------


def _rms(fd: FusionDefinition, dt: DataType) -> None:
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
    w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dt)
    xf = fd.ops.cast(x, DataType.Float)
    ms = fd.ops.div(fd.ops.sum(fd.ops.mul(xf, xf), dims=[1], keepdim=True), fd.ops.size(x, 1))
    r = fd.ops.rsqrt(fd.ops.add(ms, fd.define_scalar(1e-5)))
    y = fd.ops.mul(fd.ops.mul(xf, r), fd.ops.cast(w, DataType.Float))
    fd.add_output(fd.ops.cast(y, dt))
    fd.add_output(r)


def _layernorm(fd: FusionDefinition, dt: DataType) -> None:
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
    w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dt)
    b = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dt)
    xf = fd.ops.cast(x, DataType.Float)
    var, mean = fd.ops.var_mean(xf, dims=[1], correction=0, keepdim=True)
    y = fd.ops.mul(fd.ops.sub(xf, mean), fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-5))))
    y = fd.ops.add(fd.ops.mul(y, fd.ops.cast(w, DataType.Float)), fd.ops.cast(b, DataType.Float))
    fd.add_output(fd.ops.cast(y, dt))
    fd.add_output(mean)


def _softmax(fd: FusionDefinition, dt: DataType) -> None:
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
    fd.add_output(fd.ops.softmax(x, dim=1) if hasattr(fd.ops, "softmax") else _softmax_of(fd, x, dt))


def _softmax_of(fd, x, dt):
    xf = fd.ops.cast(x, DataType.Float)
    e = fd.ops.exp(fd.ops.sub(xf, fd.ops.max(xf, dims=[1], keepdim=True)))
    return fd.ops.cast(fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True)), dt)


def _three_sums(fd: FusionDefinition, dt: DataType) -> None:
    """Three float block reductions a row (scratch A, B, A: the next row's first would
    follow this row's last on A), a per-row input [M, 1] and a weight."""
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
    s = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
    w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dt)
    xf = fd.ops.mul(fd.ops.cast(x, DataType.Float), s)
    a = fd.ops.sum(xf, dims=[1], keepdim=True)
    b = fd.ops.sum(fd.ops.mul(xf, xf), dims=[1], keepdim=True)
    c = fd.ops.sum(fd.ops.mul(xf, fd.ops.cast(w, DataType.Float)), dims=[1], keepdim=True)
    y = fd.ops.add(fd.ops.mul(fd.ops.sub(xf, a), b), c)
    fd.add_output(fd.ops.cast(y, dt))


def _dropout_layernorm(fd: FusionDefinition, dt: DataType) -> None:
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=dt)
    w = fd.define_tensor(shape=[-1], contiguity=[True], dtype=dt)
    xf = fd.ops.cast(x, DataType.Float)
    keep = fd.ops.lt(fd.ops.rand_like(xf), fd.define_scalar(0.9))
    h = fd.ops.where(keep, fd.ops.mul(xf, fd.define_scalar(1 / 0.9)), fd.define_scalar(0.0))
    var, mean = fd.ops.var_mean(h, dims=[1], correction=0, keepdim=True)
    y = fd.ops.mul(fd.ops.mul(fd.ops.sub(h, mean), fd.ops.rsqrt(fd.ops.add(var, fd.define_scalar(1e-5)))),
                   fd.ops.cast(w, DataType.Float))
    fd.add_output(fd.ops.cast(y, dt))


_TDT = {DataType.Float: torch.float32, DataType.BFloat16: torch.bfloat16, DataType.Half: torch.float16}

CASES = {
    # rows of 1000 (not a whole number of vectors per thread), a row a block
    "rms_bf16_37x1000": (_rms, DataType.BFloat16, (37, 1000), 1),
    "layernorm_fp32_45x64": (_layernorm, DataType.Float, (45, 64), 2),
    # short rows, more groups than SMs: 16 rows a block over threadIdx.y, the last group
    # partly past the rows
    "layernorm_fp32_2201x64": (_layernorm, DataType.Float, (2201, 64), 2),
    "softmax_fp16_29x333": (_softmax, DataType.Half, (29, 333), 0),
    "three_sums_bf16_23x256": (_three_sums, DataType.BFloat16, (23, 256), 1),
    "dropout_layernorm_bf16_19x256": (_dropout_layernorm, DataType.BFloat16, (19, 256), 1),
}


def _case_inputs(name: str) -> tuple[FusionDefinition, list[torch.Tensor]]:
    build, dt, (m, n), n_col_inputs = CASES[name]
    torch.manual_seed(hash(name) % 1000)
    t = _TDT[dt]
    xs = [torch.randn(m, n, dtype=t)]
    if build is _three_sums:
        xs.append(torch.rand(m, 1) + 0.5)
    xs += [torch.randn(n, dtype=t) for _ in range(n_col_inputs)]
    with FusionDefinition() as fd:
        build(fd, dt)
    return fd, xs


@pytest.mark.parametrize("loads", LOADS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_looping_blocks_simulate_to_the_reference(loop, name, loads):
    from kernel_sim import simulate_fusion

    loop("always", loads)
    fd, xs = _case_inputs(name)
    src = fd.cuda_code_for([x.to("meta") for x in xs])
    assert LOOP in src
    report = simulate_fusion(fd, xs, resident=3)
    assert report.ok and report.status == "ok", str(report)
    (seg,) = report.segments
    assert seg.scheduler == "inner_persistent" and seg.kernel, str(report)
    threads = 1
    for n in __import__("re").findall(r"__launch_bounds__\((\d+)", src)[:1]:
        threads = int(n)
    assert seg.threads <= 3 * threads  # (the grid was capped: each block took several groups of rows)


def test_the_simulation_fails_where_rows_share_one_scratch_buffer(loop, monkeypatch):
    """The check can fail: without the parity halves, the next row's block reduction writes
    the one buffer while slower warps still read this row's totals from it."""
    from kernel_sim import simulate_fusion

    monkeypatch.setattr(row_loop.RowLoopLowering, "_alternate_scratch", lambda self, rows, it: rows)
    loop("always")
    fd, xs = _case_inputs("rms_bf16_37x1000")
    report = simulate_fusion(fd, xs, resident=3)
    assert not report.ok, str(report)


def test_an_inner_outer_kernel_with_three_row_sums_simulates_to_the_reference(monkeypatch):
    """Its rows' scratch A, B, A: before the halves were chosen by where the next row's first
    reduction lands (not by their count), the next row wrote A while this row read it."""
    from kernel_sim import simulate_fusion

    torch.manual_seed(5)
    xs = [torch.randn(300, 256, dtype=torch.bfloat16), torch.rand(300, 1) + 0.5]
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.BFloat16)
        s = fd.define_tensor(shape=[-1, 1], contiguity=[True, None], dtype=DataType.Float)
        xf = fd.ops.mul(fd.ops.cast(x, DataType.Float), s)
        a = fd.ops.sum(xf, dims=[1], keepdim=True)
        b = fd.ops.sum(fd.ops.mul(xf, xf), dims=[1], keepdim=True)
        c = fd.ops.max(xf, dims=[1], keepdim=True)
        y = fd.ops.add(fd.ops.mul(fd.ops.sub(xf, a), b), c)
        fd.add_output(fd.ops.cast(y, DataType.BFloat16))
        fd.add_output(fd.ops.sum(y, dims=[0]))
    report = simulate_fusion(fd, xs, resident=3)
    assert report.ok and report.status == "ok", str(report)
    assert [s.scheduler for s in report.segments] == ["inner_outer_persistent"], str(report)


def test_load_caps_a_row_loops_grid_at_the_resident_blocks(loop, monkeypatch):
    # no GPU: the compiler and loader are stand-ins reporting 5 resident blocks per SM
    import fuser.driver.kernel_cache as kc
    import fuser.driver.launch as launch
    from fuser.kernel import prepare_kernel
    from fuser.scheduler import SchedulerType

    class Loaded:
        local_size_bytes = 0

        def __init__(self, *args, **kwargs):
            pass

        def max_active_blocks(self, threads: int, shared_mem: int = 0) -> int:
            return 5

    monkeypatch.setattr(kc, "get_cubin", lambda *a, **k: b"\x7fELF")
    monkeypatch.setattr(launch, "CompiledKernel", Loaded)
    f = F.by_name("rmsnorm_fwd_bf16")
    inputs = [x.to("meta") for x in f.inputs(torch.device("cpu"), (16384, 4096))]
    loop("never")
    plain = prepare_kernel(SchedulerType.inner_persistent, F.define(f.name).fusion, inputs)
    plain.load()
    assert plain.grid == (16384, 1, 1) and not plain.kernel.grid_strided
    loop("weights")
    k = prepare_kernel(SchedulerType.inner_persistent, F.define(f.name).fusion, inputs)
    assert k.params.row_loop and k.kernel.grid_strided and not k.kernel.grid_sync
    k.load()
    sms = k.info.device_limits.sm_count
    rounds = -(-16384 // (5 * sms))  # every block as many rounds
    assert k.grid == (-(-16384 // rounds), 1, 1) and k.grid[0] <= 5 * sms


# --- on the GPU: the benchmark norms with every block looping, against eager PyTorch ------------------

def bench_case_ids(cases) -> list[str]:
    """pytest ids of (bench fusion, shape) cases: NAME@MxN."""
    return [f"{n}@{'x'.join(map(str, s))}" for n, s in cases]


GPU_CASES = [(n, s) for n in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16", "rmsnorm_fwd_fp32",
                              "layernorm_fwd_fp32", "dropout_add_layernorm_fwd_bf16")
             for s in ((16384, 4096), (2048, 16384), (20000, 1024), (1000, 4096), (3, 4096))
             if not (n.startswith("dropout") and s[1] == 16384)]


@pytest.mark.gpu
@pytest.mark.parametrize("loads", LOADS)
@pytest.mark.parametrize("name,shape", GPU_CASES, ids=bench_case_ids(GPU_CASES))
def test_looping_norms_match_eager_on_the_gpu(loop, poisoned_kernel_outputs, name, shape, loads):
    pytest.importorskip("pycuda")
    loop("always", loads)
    fd = bench_case_on_gpu(name, shape, seed=1)
    assert LOOP in fd.last_cuda_code()


def bench_case_on_gpu(name: str, shape: tuple[int, ...], seed: int):
    """Run bench fusion `name` at `shape` on fresh CUDA inputs and check it against eager
    PyTorch (or, drawing random numbers, the reference executor) with the bench's per-dtype
    tolerances; every segment must have run a generated kernel. Returns the definition."""
    from fuser.cli.bench import _check, _generator_state, fuser_segments

    f = F.by_name(name)
    torch.manual_seed(seed)
    inputs = f.make_inputs("cuda", shape)
    fd = f.fusion_definition()
    state = _generator_state(f, inputs)
    got = fd.execute(inputs)
    ok, msg = _check(f, got, inputs, fd, state)
    assert ok, msg
    segments = fuser_segments(fd)
    assert segments and all(kernel for _, kernel in segments), segments
    return fd


def test_the_kernel_ir_dump_says_a_row_loop_is_grid_strided(loop, monkeypatch, capsys):
    monkeypatch.setenv("FUSER_DUMP", "kernel_ir")
    loop("always")
    _bench_code("rmsnorm_fwd_bf16", (4096, 1024))
    dumped = capsys.readouterr().err
    assert "grid-strided" in dumped and "grid sync" not in dumped
