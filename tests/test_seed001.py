"""Seed 001 (RMSNorm backward, nvFuser issue 2473) on CPU at the report's real shapes:
defines from the report's repro program, executes on inputs laid out as in the report
(expanded and strided), matches eager PyTorch, prints its expanded broadcasts, and its
printed definition re-executes to the same results."""
import re

import pytest
import torch

from fuser import DataType, FusionCache, FusionDefinition
from fuser.examples.rmsnorm_backward import eager_reference, make_inputs, rmsnorm_backward
from fuser.runtime.tolerance import assert_close


@pytest.fixture(scope="module")
def seed():
    torch.manual_seed(2473)
    with FusionDefinition() as fd:
        rmsnorm_backward(fd)
    inputs = make_inputs("cpu")
    outs = fd.execute(inputs)
    return fd, inputs, outs


def test_inputs_are_laid_out_as_in_the_report(seed):
    _, inputs, _ = seed
    assert inputs[0].stride() == (0, 0, 1) and inputs[0].shape == (56, 1024, 1024)
    assert inputs[2].shape == (56, 1, 1024) and inputs[5].shape == (56, 1024, 1)
    assert all(x.abs().sum() > 0 for x in inputs)


def test_matches_eager_pytorch(seed):
    fd, inputs, outs = seed
    expected = eager_reference(inputs)
    assert [o.shape for o in outs] == [(56, 1024), (56, 1024), (1024,), (1024,), (56, 1024, 1024)]
    assert all(o.dtype is torch.bfloat16 for o in outs)
    for k, (got, want) in enumerate(zip(outs, expected)):
        assert_close(got, want, what=f"output {k}")


def test_fusion_ir_shows_expanded_broadcasts(seed):
    fd, _, _ = seed
    ir = fd.fusion_ir()
    # the expanded inputs T0/T1: [bS{1 ex i}, bS{1 ex i}, iS{i}] of bfloat16
    assert re.search(r"T0_g___bfloat\[bS\d+\{1 ex i\d+\}, bS\d+\{1 ex i\d+\}, iS\d+\{i\d+\}\]", ir)
    # broadcast_in_dim of [56, 1024, 1] to [56, 1024, 1024]: an expanded broadcast of 1024
    assert re.search(r"bS\d+\{1 ex 1024\}", ir)
    assert "rS" in ir and "__bfloat2float(" in ir


def test_printed_definition_reexecutes_to_the_same_results(seed):
    fd, inputs, outs = seed
    text = str(fd)
    assert text.startswith(f"\ndef nvfuser_fusion_id{fd.id()}(fd : FusionDefinition) -> None :\n")
    assert "    T12 = fd.ops.broadcast_in_dim(T4, shape=V11, broadcast_dims=[0, 1])" in text
    assert "    S100 = fd.define_scalar(0.000976562, dtype=DataType.Double)" in text
    namespace = {"FusionDefinition": FusionDefinition, "DataType": DataType}
    exec(text, namespace)
    before = FusionCache.get().num_fusions()
    with FusionDefinition() as fd2:
        namespace[f"nvfuser_fusion_id{fd.id()}"](fd2)
    assert fd2.id() == fd.id() and FusionCache.get().num_fusions() == before
    again = fd2.execute(inputs)
    for k, (a, b) in enumerate(zip(again, outs)):
        assert torch.equal(a, b), f"output {k} differs after re-executing the printed definition"


def test_executes_as_one_kernel(seed):
    # the outputs above came through this segmentation (at most two kernels, no
    # intermediate written by one and read by the other): the inner-outer kernel takes the
    # sums over the sequence per batch beside the sums over batch and sequence
    fd, inputs, _ = seed
    seg = fd.segmented_fusion_for(inputs)
    assert [g.scheduler for g in seg.groups] == ["inner_outer_persistent"]
    assert seg.edges == [] and seg.inter_segment_bytes() == 0
