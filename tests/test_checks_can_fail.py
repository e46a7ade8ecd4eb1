"""The written-element check of the GPU kernel tests (tests/kernel_writes.py, issue 32,
item 3), shown to fail on the CPU: on bare tensors, through `checked_run` around a real
transpose kernel interpreted by tests/test_codegen_transpose.py's simulator (correct, then
with a block of its grid left out), and through the conftest fixtures that install it."""
from __future__ import annotations

import pytest
import torch

import fuser.kernel as kernels_mod
from kernel_writes import (POISONS, assert_written, checked_run, complement_like, poison_, storage_bytes, stored,
                           unwritten)


# --- the check on bare tensors ------------------------------------------------------------------------


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.float64,
          torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d).split(".")[-1] for d in DTYPES])
def test_complement_differs_in_every_byte(dtype):
    out = poison_([torch.empty(3, 5, dtype=dtype)])[0]
    shadow = complement_like(out)
    assert shadow.shape == out.shape and shadow.stride() == out.stride() and shadow.dtype == dtype
    assert bool((storage_bytes(out) != storage_bytes(shadow)).all())
    assert unwritten(out, shadow).tolist() == list(range(15))


@pytest.mark.parametrize("dtype", DTYPES, ids=[str(d).split(".")[-1] for d in DTYPES])
def test_an_element_left_unwritten_fails_whatever_its_answer(dtype):
    """Two launches write every element but [1, 2]; the check names it, also where the
    answer there equals the first launch's poison (NaN, -7, True), which a comparison with
    the answer would pass."""
    f, i, b = POISONS[0]
    poison = f if (dtype.is_floating_point or dtype.is_complex) else b if dtype is torch.bool else i
    answer = torch.randn(3, 5).abs().add(0.5).to(dtype) if dtype is not torch.bool else torch.rand(3, 5) < 0.5
    answer[1, 2] = poison
    out = poison_([torch.empty(3, 5, dtype=dtype)])[0]
    shadow = complement_like(out)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 2] = False
    for t in (shadow, out):
        t[mask] = answer[mask]
    with pytest.raises(AssertionError, match=r"output 0 .*1 of 15 stored elements left unwritten.*\[7\]"):
        assert_written([out], [shadow], "fake")
    out[1, 2] = shadow[1, 2] = answer[1, 2]
    assert_written([out], [shadow], "fake")


def test_expanded_and_permuted_outputs_are_checked_through_their_storage():
    base = torch.empty(1, 6)
    expanded = base.expand(4, 6)  # stride 0: one stored row
    permuted = torch.empty(5, 3).t()
    poison_([expanded, permuted])
    assert torch.isnan(base).all() and torch.isnan(permuted).all()
    shadows = [complement_like(expanded), complement_like(permuted)]
    assert shadows[0].stride() == (0, 1) and shadows[1].stride() == permuted.stride()
    for s, o in ((shadows[0], expanded), (shadows[1], permuted)):
        stored(s).copy_(torch.arange(stored(s).numel(), dtype=torch.float32))
        stored(o).copy_(torch.arange(stored(o).numel(), dtype=torch.float32))
    assert_written([expanded, permuted], shadows)
    stored(permuted)[4] = float("nan")
    with pytest.raises(AssertionError, match=r"output 1 .*1 of 15 stored elements left unwritten.*\[4\] nan"):
        assert_written([expanded, permuted], shadows)


# --- the check around a real kernel, interpreted on the CPU ------------------------------------------


def _simulated_run(blocks_missing: int = 0):
    """A stand-in for GeneratedKernel.run: the kernel's IR interpreted on CPU tensors by the
    transpose tests' simulator, with the grid's last `blocks_missing` blocks left out."""
    from test_codegen_transpose import Simulator

    def run(self, inputs, outputs, philox_state=None):
        values = list(self._template)
        for pos, j in self._in_ptrs + self._scalars:
            values[pos] = inputs[j]
        for pos, j in self._out_ptrs + self._out_storage_ptrs:
            values[pos] = outputs[j]
        grid = (self.grid[0] - blocks_missing, *self.grid[1:])
        Simulator(self.kernel, grid, self.block, values).run()

    return run


def _transpose_kernel():
    """(GeneratedKernel, args, the reference's outputs) of a transpose kernel with tails:
    x.T + 1 over a 65 x 97 fp32 x."""
    from fuser.runtime.reference import run_reference
    from fuser.host.lower import example_args
    from test_codegen_transpose import SIMULATED, define

    case = next(c for c in SIMULATED if c.name == "sim_tails_fp32")
    torch.manual_seed(0)
    inputs = case.inputs("cpu")
    fd = define(case, inputs)
    seg = fd.segmented_fusion_for(inputs)
    (group,) = seg.groups
    args = example_args(seg, group, inputs)
    k = kernels_mod.prepare_transpose(group.fusion(), args)
    return k, args, run_reference(group.fusion(), args)


def test_checked_run_passes_a_kernel_that_writes_everything():
    k, args, want = _transpose_kernel()
    outs = poison_(k.allocate_outputs())
    checked_run(_simulated_run())(k, args, outs)
    torch.testing.assert_close(outs[0], want[0])


def test_checked_run_fails_a_kernel_that_skips_a_block():
    k, args, _ = _transpose_kernel()
    assert k.grid[0] > 1
    outs = poison_(k.allocate_outputs())
    with pytest.raises(AssertionError, match=r"kernel fuser_transpose.*output 0 .*stored elements left unwritten"):
        checked_run(_simulated_run(blocks_missing=1))(k, args, outs)


@pytest.fixture
def simulated_launches(monkeypatch):
    """GeneratedKernel.run interprets the kernel on the CPU (set up before the fixture
    under test wraps it)."""
    monkeypatch.setattr(kernels_mod.GeneratedKernel, "run", _simulated_run())


def test_kernel_writes_checked_fixture_wraps_run(simulated_launches, kernel_writes_checked):
    assert kernels_mod.GeneratedKernel.run.__name__ == "run_checked"
    k, args, want = _transpose_kernel()
    outs = k.allocate_outputs()
    k.run(args, outs)
    torch.testing.assert_close(outs[0], want[0])


def test_poisoned_kernel_outputs_fixture_poisons_and_checks(poisoned_kernel_outputs):
    cls = kernels_mod.GeneratedKernel
    assert cls.run.__name__ == "run_checked" and cls.allocate_outputs.__name__ == "poisoned"
    k, _, _ = _transpose_kernel()
    (out,) = k.allocate_outputs()
    assert torch.isnan(out).all()
