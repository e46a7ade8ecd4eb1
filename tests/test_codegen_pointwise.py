"""Code generation needs no GPU: every pointwise case's kernels, generated from meta
tensors, compile with nvcc for sm_90 (one translation unit for all, one nvcc call)."""
import pytest
import torch

from fuser import FusionDefinition

from cuda_units import compile_all
from pointwise_cases import CASES


def _meta(x):
    return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor) else x


def _code(case):
    with FusionDefinition() as fd:
        case.build(fd)
    return fd.cuda_code_for([_meta(x) for x in case.inputs("cpu")])


@pytest.mark.nvcc
def test_every_case_compiles_for_sm90():
    # zero elements: a no_op segment, no kernel
    cubin = compile_all(_code(case) for case in CASES if not case.name.endswith("_empty"))
    assert cubin[:4] == b"\x7fELF"


def test_code_uses_vector_accesses_and_the_merged_index():
    src = _code(CASES[1])  # gelu bf16 [64, 4096]: 16-byte vectors, contiguous: no division
    assert "fuser::load_vec<__bfloat, 8>" in src and "fuser::store_vec<__bfloat, 8>" in src
    assert " / " not in src.split("fuser::load_vec")[1].split(";")[0]
    bias = _code(CASES[6])  # [33, 127]: 127 is odd, so no vectors; 2D: the bias needs no modulo
    assert "load_vec" not in bias and "%" not in bias and "blockIdx.y" in bias
    plain = _code(CASES[7])  # cast chain: nothing broadcast, one merged axis (1D)
    assert "blockIdx.y" not in plain


def test_int64_index_type_for_huge_tensors():
    case = CASES[0]
    with FusionDefinition() as fd:
        case.build(fd)
    src = fd.cuda_code_for([torch.empty(1 << 16, 1 << 16, dtype=torch.bfloat16, device="meta")])
    assert "typedef long long nvfuser_index_t;" in src
    small = fd.cuda_code_for([torch.empty(4, 4, dtype=torch.bfloat16, device="meta")])
    assert "typedef int nvfuser_index_t;" in small


def test_empty_outputs_need_no_kernel():
    case = next(c for c in CASES if c.name.endswith("_empty"))
    with pytest.raises(RuntimeError, match="schedulers: no_op"):
        _code(case)


def test_axes_mapped_onto_each_other_are_not_lowered():
    # x + x.T: the fusion maps x's two axes onto each other, so indexing by axis class
    # cannot tell them apart; the segment runs on the reference executor instead
    from fuser.lower.lower import NotLowerable
    from fuser.kernel import prepare_pointwise

    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        fd.add_output(fd.ops.add(x, fd.ops.permute(x, dims=[1, 0])))
    with pytest.raises(NotLowerable, match="two axes"):
        prepare_pointwise(fd.fusion, [torch.empty(4, 4, device="meta")])
    x = torch.randn(5, 5)
    (out,) = fd.execute([x])
    assert torch.allclose(out, x + x.t())


@pytest.mark.nvcc
def test_a_scalar_used_as_extent_and_value_gets_two_parameters():
    """`n` sizes the tensor (an index-typed extent) and is added to it (an int64 value):
    two kernel parameters, with distinct names."""
    from fuser import DataType

    with FusionDefinition() as fd:
        n = fd.define_scalar(dtype=DataType.Int)
        f = fd.ops.full(shape=[7, n], fill_value=1.0, dtype=DataType.Float)
        fd.add_output(fd.ops.add(f, n))
    (out,) = fd.execute([5])
    assert torch.equal(out, torch.full((7, 5), 6.0))
    src = fd.cuda_code_for([5])
    head = src.split(") {")[0]
    names = [line.strip().rstrip(",").split()[-1] for line in head.splitlines()[4:]]
    assert len(names) == len(set(names)) and any("long long" in line for line in head.splitlines())
    assert compile_all([src])[:4] == b"\x7fELF"
