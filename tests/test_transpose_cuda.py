"""Transpose kernels (issue 11, item 1) on the GPU: every case of tests/test_codegen_transpose.py
plus tail sizes, size-1 and zero-size dims, misaligned, non-contiguous and expanded inputs,
every float dtype and int32 / int64 / bool copies, and batches past the grid's y limit.

Each runs through fd.execute with every output a generated kernel allocates poisoned first
(NaN / -7 / True, then -7 / 7 / False on the second call), and matches the reference
executor on the same inputs: bit for bit where the fusion copies, with the dtype's
tolerance where it computes. Every segment the segmenter schedules `transpose` must have run
a generated kernel (the transpose kernel: its name is in the CUDA the call ran); then the
case runs again on new inputs through the cached kernel.
"""
from __future__ import annotations

import hashlib
import os
from types import SimpleNamespace

import pytest
import torch

from fuser import DataType, FusionDefinition
import fuser.kernel as kernels_mod
from fuser.runtime.reference import run_reference
from fuser.runtime.tolerance import assert_close

from kernel_writes import poison_
from test_codegen_transpose import CASES, Case, copy_t, define, rand

pytestmark = pytest.mark.gpu

@pytest.fixture(autouse=True)
def _seed(request):
    """Fresh random inputs per test, reproducible from its id (FUSER_TEST_SEED varies them)."""
    salt = os.environ.get("FUSER_TEST_SEED", "0")
    digest = hashlib.sha256(f"{salt}:{request.node.nodeid}".encode()).digest()
    torch.manual_seed(int.from_bytes(digest[:8], "little"))


@pytest.fixture
def poison(monkeypatch):
    """Poison every output a generated kernel allocates (a skipped store shows as a
    mismatch; tests/kernel_writes.py); `.round` picks the poison."""
    real = kernels_mod.GeneratedKernel.allocate_outputs
    state = SimpleNamespace(round=0, allocations=0)

    def poisoned(self):
        state.allocations += 1
        return poison_(real(self), state.round)

    monkeypatch.setattr(kernels_mod.GeneratedKernel, "allocate_outputs", poisoned)
    return state


def ran_segments(fd: FusionDefinition) -> list[tuple[str, bool]]:
    """(scheduler, ran a generated kernel) for each segment of the last execute of `fd`."""
    return [(str(r.group.scheduler), bool(r.kernel)) for r in fd._entry.last_runner.runs]


def compare(case: Case, got, want, what: str) -> None:
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        if case.exact:
            assert g.dtype == w.dtype and g.shape == w.shape, f"{what} output {k}: {g.dtype} {g.shape} vs {w.dtype} {w.shape}"
            assert torch.equal(g, w), f"{what} output {k}: not bit-for-bit the reference's values"
        else:
            assert_close(g, w, what=f"{what} output {k}")


def check(case: Case, poison) -> list[tuple[str, bool]]:
    """Run `case` on the GPU twice (fresh inputs, different poison) against the reference;
    every transpose segment must run the transpose kernel. Returns the first call's segments."""
    pytest.importorskip("pycuda")
    inputs = case.inputs("cuda")
    fd = define(case, inputs)
    for round_ in (0, 1):
        poison.round = round_
        if round_:
            inputs = case.inputs("cuda")
        got = fd.execute(inputs)
        segs = ran_segments(fd)
        compare(case, got, run_reference(fd.fusion, inputs), f"{case.name} (call {round_ + 1}) {segs}")
        missing = [s for s, ran in segs if s == "transpose" and not ran]
        assert not missing, f"{case.name}: a transpose segment ran on the reference executor: {segs}"
        if case.scheduler == "transpose":
            assert ("transpose", True) in segs, f"{case.name}: no transpose kernel ran: {segs}"
            assert "fuser_transpose" in fd.last_cuda_code()
        if round_ == 0:
            first = segs
    return first


# --- the code generation cases ---------------------------------------------------------------------


RUN = [c for c in CASES if not c.big]


@pytest.mark.parametrize("case", RUN, ids=[c.name for c in RUN])
def test_transpose_kernel_matches_reference(case, poison):
    check(case, poison)


def test_int64_indexing_past_2_31_elements(poison):
    case = next(c for c in CASES if c.name == "int64_index_bf16")
    if torch.cuda.get_device_properties(0).total_memory < 24 * 2**30:
        pytest.skip("needs 24 GB")
    check(case, poison)


# --- tails, size-1 and zero-size dims ---------------------------------------------------------------

TAIL_SHAPES = [(32, 32), (33, 32), (32, 33), (63, 65), (64, 64), (65, 97), (127, 1025), (1000, 33), (4097, 40),
               (96, 4099), (2048, 96)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", TAIL_SHAPES, ids=[f"{m}x{n}" for m, n in TAIL_SHAPES])
def test_tail_tiles(shape, dtype, poison):
    check(Case(f"copy_{shape}", copy_t([1, 0]), lambda d: [rand(*shape, dtype=dtype, device=d)], exact=True), poison)


SIZE_ONE = [(1, 64, 96), (64, 1, 96), (5, 64, 1, 96), (64, 96, 1)]


@pytest.mark.parametrize("shape", SIZE_ONE, ids=["x".join(map(str, s)) for s in SIZE_ONE])
def test_size_one_dims(shape, poison):
    """Symbolic dims of extent 1 around the transposed pair (the last two dims of extent > 1 swap)."""
    n = len(shape)
    dims = list(range(n))
    big = [d for d in dims if shape[d] > 1]
    dims[big[-2]], dims[big[-1]] = dims[big[-1]], dims[big[-2]]
    check(Case(f"size_one_{shape}", copy_t(dims), lambda d: [rand(*shape, device=d)], exact=True), poison)


@pytest.mark.parametrize("shape", [(0, 64, 96), (64, 0), (0, 0)], ids=["batch0", "rows0", "both0"])
def test_zero_size_dims(shape, poison):
    n = len(shape)
    dims = list(range(n))
    dims[-1], dims[-2] = dims[-2], dims[-1]
    case = Case(f"empty_{shape}", copy_t(dims), lambda d: [rand(*shape, device=d)], exact=True, scheduler="any")
    inputs = case.inputs("cuda")
    fd = define(case, inputs)
    (got,) = fd.execute(inputs)
    assert got.shape == inputs[0].permute(dims).shape and got.numel() == 0


# --- layouts: misaligned, non-contiguous, expanded ----------------------------------------------------


def _misaligned(*shape, dtype=torch.float32):
    """A contiguous tensor whose data starts one element into its storage (no vectors)."""
    def make(device):
        n = 1
        for s in shape:
            n *= s
        return rand(n + 1, dtype=dtype, device=device)[1:].view(shape)
    return make


LAYOUTS = [
    Case("misaligned_fp32", copy_t([1, 0]), lambda d: [_misaligned(512, 768)(d)], exact=True),
    Case("misaligned_bf16", copy_t([1, 0]), lambda d: [_misaligned(512, 768, dtype=torch.bfloat16)(d)], exact=True),
    Case("transposed_view_copy_bf16", copy_t([0, 1]), lambda d: [rand(700, 900, dtype=torch.bfloat16, device=d).t()],
         exact=True),
    Case("strided_rows_fp32", copy_t([1, 0]), lambda d: [rand(300, 1000, device=d)[:, 7:907]], exact=True),
    Case("every_other_column_fp16", copy_t([1, 0]), lambda d: [rand(300, 1000, dtype=torch.float16, device=d)[:, ::2]],
         exact=True),
    Case("permuted_3d_view_fp32", copy_t([1, 2, 0]), lambda d: [rand(40, 50, 60, device=d).permute(1, 2, 0)],
         exact=True),
    Case("expanded_batch_fp32", copy_t([0, 2, 1]), lambda d: [rand(1, 96, 128, device=d).expand(6, 96, 128)],
         exact=True),
]


@pytest.mark.parametrize("case", LAYOUTS, ids=[c.name for c in LAYOUTS])
def test_input_layouts(case, poison):
    check(case, poison)


# --- every dtype: a plain transpose copy is bit for bit ------------------------------------------------

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
          torch.int32, torch.int64, torch.bool]


@pytest.mark.parametrize("shape", [(96, 160), (4099, 33), (3, 250, 130)], ids=["aligned", "odd", "batched"])
@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d).split(".")[-1] for d in DTYPES])
def test_copy_every_dtype(dtype, shape, poison):
    dims = list(range(len(shape)))
    dims[-1], dims[-2] = dims[-2], dims[-1]
    check(Case(f"copy_{dtype}", copy_t(dims), lambda d: [rand(*shape, dtype=dtype, device=d)], exact=True), poison)


def test_cast_on_the_tile_every_float_dtype(poison):
    """A cast to and from every float dtype on the tile, against the reference executor."""
    for dtype in (torch.float64, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        def build(fd, inputs, dtype=dtype):
            x = fd.from_pytorch(inputs[0])
            y = fd.ops.cast(fd.ops.permute(x, [1, 0]), DataType.Float)
            from fuser.ir.dtype import from_torch

            fd.add_output(fd.ops.cast(fd.ops.mul(y, 0.75), from_torch(dtype)))
        check(Case(f"cast_{dtype}", build, lambda d, dtype=dtype: [rand(257, 190, dtype=dtype, device=d)]), poison)


def test_batch_past_the_grid_y_limit(poison):
    """More batch indices than gridDim.y holds: the blocks loop over them."""
    case = next(c for c in CASES if c.name == "big_batch_fp32")
    check(case, poison)
    src = define(case, case.inputs("meta")).cuda_code_for(case.inputs("meta"))
    assert "gridDim.y" in src


def test_one_definition_many_sizes(poison):
    """One definition on several sizes (each a new input signature, each its own kernel)."""
    pytest.importorskip("pycuda")
    case = Case("copy", copy_t([1, 0]), lambda d: [rand(256, 320, device=d)], exact=True)
    fd = define(case, case.inputs("cuda"))
    for shape in [(256, 320), (320, 256), (1000, 77), (64, 4096), (33, 33)]:
        x = rand(*shape, device="cuda")
        (got,) = fd.execute([x])
        assert ("transpose", True) in ran_segments(fd), shape
        assert torch.equal(got, run_reference(fd.fusion, [x])[0]), shape
