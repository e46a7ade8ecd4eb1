"""The device's arena of zeroed arrival counters (fuser.driver.counters), which the grid
reductions and grid barriers of kernels launched on one stream share.

On the CPU: the arena's PTX assembles for sm_90 with the arena's size, and which stream
gets it (the module load stubbed). On the GPU: a kernel's first launch runs no fill kernel
nor memset (the profiler sees only fuser's kernels), kernels of different fusions take
turns on the arena with results matching the reference executor every time, a second
stream and a kernel launched with the arena switched off (FUSER_DISABLE=counter_arena) get
zeroed counters of their own."""
from __future__ import annotations

import subprocess

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.driver import counters
from fuser.frontend.cache import FusionCache
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

from test_codegen_inner_outer import rms_norm_backward

gpu = pytest.mark.gpu

#: arenas a test replaced, kept loaded
_RETIRED: list = []


@pytest.fixture(autouse=True)
def _arena_on(monkeypatch):
    """The arena on, whatever the caller's FUSER_DISABLE says."""
    monkeypatch.delenv("FUSER_DISABLE", raising=False)


def test_the_arena_ptx_assembles_with_its_size(tmp_path):
    from fuser.driver.nvrtc import nvcc_path
    import os

    ptxas = os.path.join(os.path.dirname(nvcc_path()), "ptxas")
    if not os.path.exists(ptxas):
        pytest.skip("no ptxas beside nvcc")
    (tmp_path / "arena.ptx").write_bytes(counters._PTX.rstrip(b"\0"))
    out = subprocess.run([ptxas, "-v", "-arch=sm_90", "-o", str(tmp_path / "arena.cubin"), str(tmp_path / "arena.ptx")],
                         capture_output=True, text=True, check=True)
    assert f"{4 * counters.ARENA_COUNTERS} bytes gmem" in out.stdout + out.stderr
    assert counters._PTX.endswith(b"\0")  # the driver reads PTX as a C string


@pytest.fixture
def stub_loads(monkeypatch):
    """Arenas loaded by a stub: each load gets a new address, and is counted."""
    loads = []

    def load(device_index):
        loads.append(device_index)
        return 0x1000 * len(loads), object()

    monkeypatch.setattr(counters, "_arenas", {})
    monkeypatch.setattr(counters, "_load", load)
    return loads


def test_the_first_stream_to_ask_keeps_the_device_s_arena(stub_loads):
    assert counters.arena_counters(0, 0, 2) == 0x1000
    assert counters.arena_counters(0, 0, counters.ARENA_COUNTERS) == 0x1000
    assert counters.arena_counters(0, 1234, 2) is None  # another stream: counters of its own
    assert counters.arena_counters(1, 1234, 2) == 0x2000  # another device: an arena of its own
    assert counters.arena_counters(1, 0, 2) is None
    assert stub_loads == [0, 1]


def test_more_counters_than_the_arena_holds_get_none_without_loading_it(stub_loads):
    assert counters.arena_counters(0, 0, counters.ARENA_COUNTERS + 1) is None
    assert stub_loads == []


# ----------------------------------------------------------------------------------------------
# GPU


def _outer_sum(fd: FusionDefinition) -> None:
    # few columns and many rows: blocks share the rows (a grid reduction, its counters)
    x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
    fd.add_output(fd.ops.sum(x, dims=[0]))


def _define(build, *args) -> FusionDefinition:
    with FusionDefinition() as fd:
        build(fd, *args)
    return fd


def _rms_inputs(rows=2048, cols=1024):
    return [torch.randn(rows, cols, device="cuda"), torch.randn(rows, cols, device="cuda"),
            torch.rand(rows, 1, device="cuda") + 0.5, torch.randn(cols, device="cuda")]


def _kernels(fd: FusionDefinition):
    return [r.kernel for r in fd._entry.last_runner.runs if r.kernel is not None]


def _counters_of(fd: FusionDefinition) -> list[int]:
    """The counters' address of each of fd's last kernels that counts arrivals, on the
    current stream."""
    stream = torch.cuda.current_stream().cuda_stream
    return [k._semaphores[stream] for k in _kernels(fd) if k._semaphore is not None]


def _run_and_check(fd: FusionDefinition, inputs) -> None:
    got = fd.execute(inputs)
    want = run_reference(fd.fusion, inputs)
    for g, w in zip(got, want):
        assert_close(g, w, what="grid kernel on the counter arena", rtol=1e-4, atol=1e-3)


@gpu
def test_a_first_launch_runs_no_fill_before_the_kernel():
    pytest.importorskip("pycuda")
    from torch.profiler import ProfilerActivity, profile

    # a fresh arena, loaded inside the profile (the old one stays loaded: kernels cached by
    # earlier tests keep its address)
    _RETIRED.append(counters._arenas.pop(torch.cuda.current_device(), None))
    x = torch.randn(16384, 96, device="cuda")
    fd = _define(_outer_sum)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        (got,) = fd.execute([x])
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not names:  # the profiler's CUPTI cannot start beside compute-sanitizer
        pytest.skip("the profiler recorded no CUDA activity (CUPTI unavailable)")
    assert "semaphore" in fd.last_cuda_code()
    assert names and all(n.startswith("fuser_") for n in names), names
    assert_close(got, x.sum(0), what="outer sum", rtol=1e-4, atol=1e-3)
    address = counters._arenas[torch.cuda.current_device()][1]
    assert _counters_of(fd) == [address]


@gpu
def test_kernels_of_several_fusions_take_turns_on_the_arena():
    pytest.importorskip("pycuda")
    outer = _define(_outer_sum)
    rms = _define(rms_norm_backward, DataType.Float)
    addresses = set()
    for _ in range(6):
        for fd, inputs in ((outer, [torch.randn(8192, 200, device="cuda")]), (rms, _rms_inputs())):
            _run_and_check(fd, inputs)
            addresses.update(_counters_of(fd))
    assert "grid_sync" in rms.last_cuda_code() and "grid_arrive" in outer.last_cuda_code()
    arena = counters._arenas[torch.cuda.current_device()]
    if arena[0] == torch.cuda.current_stream().cuda_stream:
        assert addresses == {arena[1]}


@gpu
def test_a_second_stream_and_the_switch_get_counters_of_their_own(monkeypatch):
    pytest.importorskip("pycuda")
    main = torch.cuda.current_stream()
    fd = _define(_outer_sum)
    _run_and_check(fd, [torch.randn(8192, 200, device="cuda")])  # the arena's stream first
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.randn(8192, 200, device="cuda")
        (got,) = fd.execute([x])
        (address,) = _counters_of(fd)
        assert address != counters._arenas[torch.cuda.current_device()][1]
        assert_close(got, x.sum(0), what="outer sum on a second stream", rtol=1e-4, atol=1e-3)
    main.wait_stream(side)
    monkeypatch.setenv("FUSER_DISABLE", "counter_arena")
    FusionCache.reset()  # kernels keep the counters they took on their first launch on a stream
    fresh = _define(_outer_sum)
    x = torch.randn(8192, 200, device="cuda")
    (got,) = fresh.execute([x])
    (address,) = _counters_of(fresh)
    assert address != counters._arenas[torch.cuda.current_device()][1]
    assert_close(got, x.sum(0), what="outer sum with its own counters", rtol=1e-4, atol=1e-3)
