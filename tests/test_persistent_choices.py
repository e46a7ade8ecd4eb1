"""nvFuser's inner-persistent choices as switches of fuser's, for sweeping
(`bench --sweep persistent_cache_hints_* persistent_block_threads_* persistent_max_warps_*`):
evict-first row loads and stores (lower.reduction.PERSISTENT_CACHE_HINTS), threads a block
(normalization.PERSISTENT_BLOCK_THREADS), and a register cap aimed at fewer warps an SM
(normalization.PERSISTENT_MAX_WARPS). Off by default: the shipped kernels are unchanged.
Generated without a GPU, compiled with nvcc, simulated on the CPU against the reference,
and on the GPU against eager PyTorch."""
from __future__ import annotations

import re

import pytest

from cuda_units import compile_all, ptx_of
from fuser.lower import reduction as lred
from fuser.scheduler import normalization as N
from fuser.scheduler.runtime_info import TARGET_ENV
from test_row_loop import CASES, GPU_CASES, _bench_code, _case_inputs, bench_case_ids, bench_case_on_gpu


@pytest.fixture
def choose(switches):
    def set_(hints: str = "plain", threads: int = N.PERSISTENT_BLOCK_THREADS, warps: int = 0) -> None:
        switches(lred, PERSISTENT_CACHE_HINTS=hints)
        switches(N, PERSISTENT_BLOCK_THREADS=threads, PERSISTENT_MAX_WARPS=warps)

    return set_


@pytest.mark.nvcc
def test_streaming_hints_evict_the_row_first_and_keep_the_weights(choose):
    choose("plain")
    plain = _bench_code("layernorm_fwd_bf16", (16384, 4096))
    assert "load_vec_stream" not in plain and "store_vec_stream" not in plain
    choose("streaming")
    src = _bench_code("layernorm_fwd_bf16", (16384, 4096))
    assert re.search(r"load_vec_stream<__bfloat, 8>\(&r0\[u \* 8\], &T0\[", src)  # the row
    assert re.search(r"fuser::load_vec<__bfloat, 8>\(&r1\[u \* 8\], &T1\[", src)  # the weight, plainly
    assert src.count("store_vec_stream<__bfloat, 8>") == 1  # the output row (mean and rstd: one a row)
    ptx = ptx_of(src)
    assert "st.global.cs.v4.u32" in ptx and "ld.global.cs.v4.u32" in ptx
    assert compile_all([plain, src])[:4] == b"\x7fELF"


@pytest.mark.nvcc
def test_store_hints_evict_only_the_output_rows_first(choose):
    choose("stores")
    src = _bench_code("layernorm_fwd_bf16", (16384, 4096))
    assert "load_vec_stream" not in src  # the row loads plainly
    assert re.search(r"fuser::load_vec<__bfloat, 8>\(&r0\[u \* 8\], &T0\[", src)
    assert src.count("store_vec_stream<__bfloat, 8>") == 1  # the output row
    ptx = ptx_of(src)
    assert "st.global.cs.v4.u32" in ptx and "ld.global.cs" not in ptx
    assert compile_all([src])[:4] == b"\x7fELF"


@pytest.mark.nvcc
def test_load_hints_evict_only_the_row_loads_first(choose):
    choose("loads")  # nvFuser's inner-persistent choice: rows read evict-first, stored plainly
    src = _bench_code("layernorm_fwd_bf16", (16384, 4096))
    assert re.search(r"load_vec_stream<__bfloat, 8>\(&r0\[u \* 8\], &T0\[", src)  # the row
    assert re.search(r"fuser::load_vec<__bfloat, 8>\(&r1\[u \* 8\], &T1\[", src)  # the weight, plainly
    assert "store_vec_stream" not in src
    ptx = ptx_of(src)
    assert "ld.global.cs.v4.u32" in ptx and "st.global.cs" not in ptx
    assert compile_all([src])[:4] == b"\x7fELF"


def test_an_unknown_cache_hint_is_refused(choose):
    choose("evict")
    with pytest.raises(ValueError, match="PERSISTENT_CACHE_HINTS is 'evict'"):
        _bench_code("layernorm_fwd_bf16", (1024, 1024))


@pytest.mark.nvcc
def test_pointwise_stream_loads_evict_only_inputs_read_once(switches):
    from fuser.lower import pointwise as lpw

    plain = _bench_code("bias_relu", (4096, 4096))
    assert "load_vec_stream" not in plain
    switches(lpw, POINTWISE_STREAM_LOADS=True)
    src = _bench_code("bias_relu", (4096, 4096))
    # x [M, N] is read once; the bias [N], read again by every row, loads plainly
    assert re.search(r"fuser::load_vec_stream<__bfloat, 8>\(r0[^;]*&T0\[", src)
    assert re.search(r"fuser::load_vec<__bfloat, 8>\(r1[^;]*&T1\[", src)
    assert "load_vec_stream<__bfloat, 8>(r1" not in src
    ptx = ptx_of(src)
    assert "ld.global.cs.v4.u32" in ptx and "st.global.cs" not in ptx
    assert compile_all([src])[:4] == b"\x7fELF"
    # RoPE reads its input twice (each element and its rotation partner): plain loads
    assert "load_vec_stream" not in _bench_code("rope_fwd_bf16", (1, 32, 8192, 128))


@pytest.mark.nvcc
def test_pointwise_stream_stores_evict_the_output_first(switches):
    from fuser.lower import pointwise as lpw

    plain = _bench_code("gelu_tanh_bf16", (4096, 4096))
    assert "store_vec_stream" not in plain and "fuser::store_vec<__bfloat, 8>" in plain
    switches(lpw, POINTWISE_STREAM_STORES=True)
    src = _bench_code("gelu_tanh_bf16", (4096, 4096))
    assert "fuser::store_vec_stream<__bfloat, 8>" in src and "fuser::store_vec<" not in src
    assert "st.global.cs.v4.u32" in ptx_of(src)


@pytest.mark.nvcc
def test_block_threads_and_warps_shape_the_launch(choose, monkeypatch):
    monkeypatch.setenv(TARGET_ENV, "h200")  # (rows of 128 threads there)
    choose()
    assert "__launch_bounds__(256, 4)" in _bench_code("layernorm_fwd_bf16", (16384, 4096))
    choose(threads=128)
    assert "__launch_bounds__(128, " in _bench_code("layernorm_fwd_bf16", (16384, 4096))
    monkeypatch.setenv(TARGET_ENV, "h100")
    choose()
    assert "__launch_bounds__(256, 8)" in _bench_code("rmsnorm_fwd_bf16", (16384, 4096))
    choose(warps=32)  # 8 warps a block: 4 blocks, so up to 64 registers a thread
    src = _bench_code("rmsnorm_fwd_bf16", (16384, 4096))
    assert "__launch_bounds__(256, 4)" in src
    assert compile_all([src])[:4] == b"\x7fELF"


@pytest.mark.parametrize("hints", ["streaming", "stores", "loads"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_streaming_kernels_simulate_to_the_reference(choose, name, hints):
    from kernel_sim import simulate_fusion

    choose(hints, threads=128)
    fd, xs = _case_inputs(name)
    report = simulate_fusion(fd, xs, resident=3)
    assert report.ok and report.status == "ok", str(report)


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape", GPU_CASES, ids=bench_case_ids(GPU_CASES))
def test_the_choices_match_eager_on_the_gpu(choose, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    choose("streaming", threads=128, warps=32)
    bench_case_on_gpu(name, shape, seed=3)


@pytest.mark.gpu
@pytest.mark.parametrize("hints,seed", [("stores", 4), ("loads", 6)])
@pytest.mark.parametrize("name,shape", GPU_CASES, ids=bench_case_ids(GPU_CASES))
def test_one_sided_hints_match_eager_on_the_gpu(choose, poisoned_kernel_outputs, name, shape, hints, seed):
    pytest.importorskip("pycuda")
    choose(hints)
    bench_case_on_gpu(name, shape, seed=seed)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 1027), (3, 5)])
def test_pointwise_stream_stores_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, shape):
    pytest.importorskip("pycuda")
    from fuser.lower import pointwise as lpw

    switches(lpw, POINTWISE_STREAM_STORES=True)
    bench_case_on_gpu("gelu_tanh_bf16", shape, seed=5)


@pytest.mark.gpu
@pytest.mark.parametrize("name,shape", [("gelu_tanh_bf16", (4096, 4096)), ("gelu_tanh_bf16", (1000, 1027)),
                                        ("gelu_tanh_bf16", (3, 5)), ("bias_relu", (2048, 1000)),
                                        ("bias_relu", (7, 33))])
def test_pointwise_stream_loads_match_eager_on_the_gpu(switches, poisoned_kernel_outputs, name, shape):
    pytest.importorskip("pycuda")
    from fuser.lower import pointwise as lpw

    switches(lpw, POINTWISE_STREAM_LOADS=True)
    bench_case_on_gpu(name, shape, seed=7)
