"""Reduction and normalisation fusions the kernel tests run (issue 8, item 6): every
reduction op and dtype, reduced-dim sets, row lengths from 1 to 2**24, zero-size,
non-contiguous, permuted and expanded inputs, keepdim, several reductions and outputs in
one fusion, prologues and epilogues, and the normalisations (softmax, LayerNorm and RMSNorm
forward).

Each case makes fresh random inputs on a device (never all zeros; floats kept away from 0),
records its fusion on handles made from those inputs (`fd.from_pytorch`, so the layout,
strides and expanded axes are the inputs'; or its own `define`), and computes the same
outputs with eager PyTorch (`eager`), which the CPU tests check the case against. The GPU
tests compare generated kernels with the reference executor on the same inputs.

Tolerances (`Case.tolerance`): max/min and integer results are exact; a float result
reduced over `n` elements gets `fuser.benchmarks.fusions.reduction_tolerance(dtype, n,
scale, relative=...)`: the dtype's tolerance, with atol widened by what float accumulation
in another order may differ by for sums of signed terms of magnitude `scale` (serial
chains of up to 4096 elements per thread, then a tree: 4 eps scale sqrt(n min(n, 4096))),
and, for products (`relative`), rtol by 4 eps sqrt(n). `scale` is per output, in the
output's units: `rand`'s RMS for a sum, RMS / n for a mean, 0 where the error is relative
(variances, softmax, normalised rows: the dtype's tolerance covers those).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from fuser import DataType
from fuser.benchmarks.fusions import reduction_tolerance
from fuser.runtime.tolerance import tolerances

FLOATS = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INTS = (torch.int32, torch.int64)
ALL_DTYPES = FLOATS + INTS + (torch.bool,)
#: the row lengths item 6 names; 2**24 only on the GPU
ROW_LENGTHS = (1, 3, 127, 1025, 4097, 65537, 2**24)
_TAG = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float64: "fp64",
        torch.int32: "int32", torch.int64: "int64", torch.bool: "bool"}
#: the schedulers whose segments must run as generated kernels (issue 8: no silent fallback)
KERNEL_SCHEDULERS = ("reduction", "inner_persistent")
#: the root mean square of `rand`'s floats (x + 0.25 sign(x), x normal): the default scale
RAND_RMS = 1.25


@dataclass
class Case:
    """One fusion and its inputs.

    inputs: device -> fresh inputs. ops: (fd, *handles) -> output handles, on handles of
    the inputs (`fd.from_pytorch`, unless `define` (fd, inputs) -> handles is given).
    eager: (*inputs) -> the expected outputs, in eager PyTorch. n: elements reduced into
    each output value (tolerances; an int, or one per output). scale: the magnitude of the
    signed terms summed into each output, in its units (atol; a float, or one per output;
    `rand`'s RMS by default). relative: a product (rtol grows with n). exact: max/min-like
    results, compared exactly. big: too large for the CPU suite (GPU only). reduces:
    whether the fusion has a reduction after squeezes (a reduction or persistent segment
    is expected)."""

    name: str
    inputs: Callable[[Any], list]
    ops: Callable[..., Sequence[Any]]
    eager: Callable[..., Sequence[torch.Tensor]]
    n: int | Sequence[int] = 1
    scale: float | Sequence[float] = RAND_RMS
    relative: bool = False
    exact: bool = False
    big: bool = False
    reduces: bool = True
    define: Callable[[Any, list], list] | None = None

    def build(self, fd, inputs: Sequence[Any]) -> None:
        """Record this case into the open FusionDefinition `fd` for `inputs`."""
        if self.define is not None:
            handles = self.define(fd, list(inputs))
        else:
            handles = [fd.from_pytorch(x) if isinstance(x, torch.Tensor) else fd.define_scalar(x) for x in inputs]
        for out in self.ops(fd, *handles):
            fd.add_output(out)

    def tolerance(self, k: int, want: torch.Tensor) -> tuple[float, float]:
        """(rtol, atol) for output `k`, expected `want`."""
        if self.exact or not (want.dtype.is_floating_point or want.dtype.is_complex):
            return 0.0, 0.0
        n = self.n if isinstance(self.n, int) else self.n[k]
        scale = self.scale if isinstance(self.scale, (int, float)) else self.scale[k]
        if n <= 1:
            return tolerances(want.dtype)
        return reduction_tolerance(want.dtype, n, scale, relative=self.relative)


# ----------------------------------------------------------------------------------------------
# inputs


def rand(*shape, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """Random values, never all zeros: floats normal and pushed away from 0, integers in
    [-50, 50), bools half True."""
    if dtype.is_floating_point:
        x = torch.randn(shape, dtype=torch.float32, device=device)
        return (x + 0.25 * x.sign()).to(dtype)
    if dtype is torch.bool:
        x = torch.rand(*shape, device=device) > 0.5
        if x.numel():
            x.view(-1)[0] = True
        return x
    return torch.randint(-50, 50, shape, dtype=torch.int64, device=device).to(dtype)


def near_one(*shape, dtype=torch.float32, device="cpu", n: int | None = None) -> torch.Tensor:
    """Factors for a product: floats 1 + N(0, 0.5 / sqrt(n)) (the product of n of them stays
    near e^N(0, 0.25)); integers +-1 with a few +-2 per row (no overflow); bools mostly True."""
    n = n or (shape[-1] if shape else 1)
    if dtype.is_floating_point:
        return (1.0 + torch.randn(shape, device=device) * (0.5 / math.sqrt(max(n, 1)))).to(dtype)
    if dtype is torch.bool:
        return sparse_bools(shape, len(shape) - 1, mostly=True, device=device)
    x = torch.where(torch.rand(*shape, device=device) < 0.5, -1, 1).to(torch.int64)
    if x.numel():
        x[..., : min(x.shape[-1], 12)] *= 2
    return x.to(dtype)


def sparse_bools(shape, dim: int, *, mostly: bool, device="cpu") -> torch.Tensor:
    """Bools equal to `mostly` but for one element along `dim` in about half of the
    lines along it (so an any / all / prod over `dim` takes both values)."""
    shape = tuple(shape)
    x = torch.full(shape, mostly, dtype=torch.bool, device=device)
    if x.numel() == 0:
        return x
    rest = shape[:dim] + (1,) + shape[dim + 1:]
    pos = torch.randint(0, shape[dim], rest, device=device)
    flip = torch.rand(rest, device=device) < 0.5
    flip.view(-1)[0] = True
    x.scatter_(dim, pos, torch.where(flip, not mostly, mostly))
    return x


# ----------------------------------------------------------------------------------------------
# eager helpers


def _prod(x, dims, keepdim=False):
    """torch.prod over several dims (torch's takes one); integers and bools give int64.
    Half and bfloat16 multiply in float and round once (fusion numerics: PyTorch's CPU
    kernel multiplies in the narrow type)."""
    out = x.dtype
    if out in (torch.float16, torch.bfloat16):
        x = x.float()
    for d in sorted((d % x.ndim for d in dims), reverse=True):
        x = torch.prod(x, d, keepdim=keepdim)
    return x.to(out) if out in (torch.float16, torch.bfloat16) else x


_EAGER = {
    "sum": lambda x, dims, keepdim=False: torch.sum(x, dims, keepdim=keepdim),
    "prod": _prod,
    "max": lambda x, dims, keepdim=False: torch.amax(x, dims, keepdim=keepdim),
    "min": lambda x, dims, keepdim=False: torch.amin(x, dims, keepdim=keepdim),
}


def _n(shape, dims) -> int:
    return math.prod(shape[d] for d in dims)


def _red(op: str, dims, keepdim=False, dtype=DataType.Null):
    def ops(fd, x):
        return [getattr(fd.ops, op)(x, dims, keepdim=keepdim, dtype=dtype)]

    return ops


def symbolic(fd, inputs):
    """Contiguous inputs declared with symbolic sizes (``shape=[-1, ...]``), as nvFuser's
    benchmarks write them: an extent of 1 stays a real axis to reduce, not a broadcast."""
    from fuser.ir.dtype import from_torch

    handles = []
    for x in inputs:
        assert x.is_contiguous()
        handles.append(fd.define_tensor(shape=[-1] * x.ndim, contiguity=[True] * x.ndim, dtype=from_torch(x.dtype)))
    return handles


def _red_case(name, op, make, dims, shape, *, keepdim=False, big=False, **kw) -> Case:
    """A single `op` over `dims` of one input made by `make(device)`."""
    return Case(
        name, lambda d: [make(d)], _red(op, dims, keepdim),
        lambda x: [_EAGER[op](x, dims, keepdim=keepdim)],
        n=_n(shape, dims), exact=op in ("max", "min"), relative=op == "prod", big=big, **kw,
    )


# ----------------------------------------------------------------------------------------------
# every op and dtype (inner reduction of [33, 1025], 1025 = a vector of 8 bf16 + 1)

OPS_SHAPE = (33, 1025)
CASES: list[Case] = []

def _op_input(op: str, dt: torch.dtype, shape, dim: int):
    """Inputs for `op` over `dim`: near 1 for products; bools for max / min / prod mostly
    the value that leaves the result open (False for max, True for min and prod), with one
    element flipped in about half the rows, so both results occur."""
    if dt is torch.bool and op != "sum":
        return lambda d: sparse_bools(shape, dim, mostly=op != "max", device=d)
    if op == "prod":
        return lambda d: near_one(*shape, dtype=dt, device=d, n=shape[dim])
    return lambda d: rand(*shape, dtype=dt, device=d)


for _dt in ALL_DTYPES:
    _t = _TAG[_dt]
    for _op in ("sum", "max", "min", "prod"):
        CASES.append(_red_case(f"{_op}_{_t}_inner", _op, _op_input(_op, _dt, OPS_SHAPE, 1), [1], OPS_SHAPE))
    # and over the outer dim
    for _op in ("sum", "max"):
        CASES.append(_red_case(f"{_op}_{_t}_outer", _op, _op_input(_op, _dt, OPS_SHAPE, 0), [0], OPS_SHAPE))


def _amax(fd, x):
    """max(|x|) over everything (the fp8-scaling amax), as a float scalar tensor."""
    return [fd.ops.max(fd.ops.abs(fd.ops.cast(x, DataType.Float)), [0, 1])]


for _dt in (torch.float32, torch.float16, torch.bfloat16):
    CASES.append(Case(f"amax_abs_{_TAG[_dt]}_all", lambda d, dt=_dt: [rand(257, 1031, dtype=dt, device=d)], _amax,
                      lambda x: [x.float().abs().amax()], exact=True))


def _var_case(name, dt, shape, dims, correction, *, keepdim=False, big=False) -> Case:
    def ops(fd, x):
        return [fd.ops.var(x, dims, correction=correction, keepdim=keepdim)]

    return Case(name, lambda d: [rand(*shape, dtype=dt, device=d)], ops,
                lambda x: [torch.var(x, dims, correction=correction, keepdim=keepdim)],
                n=_n(shape, dims), scale=0.0, big=big)


def _var_mean_case(name, dt, shape, dims, correction, *, keepdim=False, big=False, make=None) -> Case:
    def ops(fd, x):
        return list(fd.ops.var_mean(x, dims, correction=correction, keepdim=keepdim))

    make = make or (lambda d: [rand(*shape, dtype=dt, device=d)])
    n = _n(shape, dims)
    return Case(name, make, ops, lambda x: list(torch.var_mean(x, dims, correction=correction, keepdim=keepdim)),
                n=n, scale=(0.0, RAND_RMS / n), big=big)


def _welford_eager(x, dims):
    """(avg, var_sum, n) as fuser's welford: floating inputs keep their dtype, others compute
    in float; n is int64."""
    out = x.dtype if x.dtype.is_floating_point else torch.float32
    xf = x.double()
    mean = xf.mean(dims)
    var_sum = xf.var(dims, correction=0) * _n(x.shape, dims)
    n = torch.full(mean.shape, _n(x.shape, dims), dtype=torch.int64, device=x.device)
    return [mean.to(out), var_sum.to(out), n]


def _welford_case(name, dt, shape, dims) -> Case:
    n = _n(shape, dims)
    scale = RAND_RMS if dt.is_floating_point else 29.0  # integers in [-50, 50)
    return Case(name, lambda d: [rand(*shape, dtype=dt, device=d)], lambda fd, x: list(fd.ops.welford(x, dims)),
                lambda x: _welford_eager(x, dims), n=n, scale=(scale / n, 0.0, 0.0))


for _dt in FLOATS:
    _t = _TAG[_dt]
    CASES.append(_var_case(f"var_{_t}_inner", _dt, OPS_SHAPE, [1], 1))
    CASES.append(_var_case(f"var_{_t}_outer", _dt, OPS_SHAPE, [0], 1))
    for _c in (0, 1):
        CASES.append(_var_mean_case(f"var_mean_c{_c}_{_t}_inner", _dt, OPS_SHAPE, [1], _c))
    CASES.append(_var_mean_case(f"var_mean_c1_{_t}_outer", _dt, OPS_SHAPE, [0], 1))
for _dt in (torch.float32, torch.float64, torch.bfloat16, torch.int32):
    CASES.append(_welford_case(f"welford_{_TAG[_dt]}_inner", _dt, OPS_SHAPE, [1]))
CASES.append(_welford_case("welford_fp32_outer", torch.float32, OPS_SHAPE, [0]))

# sum/prod with an explicit result dtype (the input cast first, as torch.sum(dtype=...))
CASES.append(Case("sum_bf16_dtype_float", lambda d: [rand(*OPS_SHAPE, dtype=torch.bfloat16, device=d)],
                  lambda fd, x: [fd.ops.sum(x, [1], dtype=DataType.Float)],
                  lambda x: [torch.sum(x, [1], dtype=torch.float32)], n=OPS_SHAPE[1]))
CASES.append(Case("sum_int32_dtype_int32", lambda d: [rand(*OPS_SHAPE, dtype=torch.int32, device=d)],
                  lambda fd, x: [fd.ops.sum(x, [0], dtype=DataType.Int32)],
                  lambda x: [torch.sum(x, [0], dtype=torch.int32)]))

# max / min over negated ints (GPU fuzz seed 9302 case 278): ptxas fused the signed max
# chain into VIMNMX3 and dropped a negation; the header compares ints in the unsigned order
def _negated_int_cases() -> list[Case]:
    out = []
    for dt in INTS:
        for shape in ((4, 4), (130, 1025), (1000, 128)):
            tag = f"{_TAG[dt]}_{shape[0]}x{shape[1]}"
            out.append(Case(f"max_negated_cast_int32_{tag}", lambda d, dt=dt, shape=shape: [rand(*shape, dtype=dt, device=d)],
                            lambda fd, x: [fd.ops.max(fd.ops.cast(fd.ops.neg(x), dtype=DataType.Int32), dims=[1])],
                            lambda x: [torch.amax((-x).to(torch.int32), dim=[1])]))
            out.append(Case(f"min_negated_{tag}", lambda d, dt=dt, shape=shape: [rand(*shape, dtype=dt, device=d)],
                            lambda fd, x: [fd.ops.min(fd.ops.neg(x), dims=[0])],
                            lambda x: [torch.amin(-x, dim=[0])]))
            out.append(Case(f"max_clamped_negated_{tag}", lambda d, dt=dt, shape=shape: [rand(*shape, dtype=dt, device=d)],
                            lambda fd, x: [fd.ops.max(fd.ops.clamp(fd.ops.neg(x), -3, 4), dims=[1]),
                                           fd.ops.max(fd.ops.abs(x), dims=[1])],
                            lambda x: [torch.amax(torch.clamp(-x, -3, 4), dim=[1]), torch.amax(torch.abs(x), dim=[1])]))
    return out


CASES += _negated_int_cases()


# ----------------------------------------------------------------------------------------------
# reduced-dim sets: inner, outer, middle, all, adjacent pairs, several non-adjacent

_S3 = (65, 9, 130)
_S4 = (5, 33, 6, 65)
for _dims, _what in (([2], "inner"), ([0], "outer"), ([1], "middle"), ([0, 1, 2], "all"), ([1, 2], "inner2"),
                     ([0, 1], "outer2"), ([0, 2], "outer_inner"), ([-1], "negative")):
    for _op in ("sum", "max"):
        CASES.append(_red_case(f"{_op}_fp32_3d_{_what}", _op, lambda d: rand(*_S3, device=d), _dims, _S3))
    CASES.append(_var_mean_case(f"var_mean_fp32_3d_{_what}", torch.float32, _S3, _dims, 1))
for _dims in ([0, 2], [1, 3], [0, 3], [0, 1, 3]):
    _what = "".join(map(str, _dims))
    CASES.append(_red_case(f"sum_bf16_4d_dims{_what}", "sum", lambda d: rand(*_S4, dtype=torch.bfloat16, device=d),
                           _dims, _S4))
    CASES.append(_red_case(f"min_fp16_4d_dims{_what}", "min", lambda d: rand(*_S4, dtype=torch.float16, device=d),
                           _dims, _S4))
CASES.append(_red_case("prod_fp32_4d_dims13", "prod", lambda d: near_one(*_S4, device=d, n=33 * 65), [1, 3], _S4))
CASES.append(_red_case("sum_int64_4d_all", "sum", lambda d: rand(*_S4, dtype=torch.int64, device=d), [0, 1, 2, 3], _S4))
CASES.append(_red_case("sum_fp32_1d_all", "sum", lambda d: rand(100003, device=d), [0], (100003,)))

# ----------------------------------------------------------------------------------------------
# row lengths: inner and outer reductions of 1, 3, 127, 1025, 4097, 65537 and 2**24 elements


def _rows_for(n: int) -> int:
    """Rows for rows of length n: about 2**17 elements in all, at least 2 (few past 2**20)."""
    return max(2, min(300, (1 << 17) // n))


for _len in ROW_LENGTHS:
    _big = _len > 1 << 17
    _rows = 3 if _len == 2**24 else _rows_for(_len)
    _sh = (_rows, _len)
    for _dt in (torch.float32, torch.bfloat16):
        CASES.append(_red_case(f"sum_{_TAG[_dt]}_inner_n{_len}", "sum",
                               lambda d, s=_sh, dt=_dt: rand(*s, dtype=dt, device=d), [1], _sh, big=_big,
                               define=symbolic))
    CASES.append(_red_case(f"max_fp16_inner_n{_len}", "max", lambda d, s=_sh: rand(*s, dtype=torch.float16, device=d),
                           [1], _sh, big=_big, define=symbolic))
    _vm = _var_mean_case(f"var_mean_c0_fp32_inner_n{_len}", torch.float32, _sh, [1], 0, big=_big)
    _vm.define = symbolic
    CASES.append(_vm)
    _osh = (_len, 2 if _len == 2**24 else 129)
    CASES.append(_red_case(f"sum_fp32_outer_n{_len}", "sum", lambda d, s=_osh: rand(*s, device=d), [0], _osh,
                           big=_big, define=symbolic))
    CASES.append(_red_case(f"prod_fp32_inner_n{_len}", "prod", lambda d, s=_sh: near_one(*s, device=d), [1], _sh,
                           big=_big, define=symbolic))
    if _len == 1:  # and declared from the tensor: an extent-1 axis is a broadcast, reducing it a squeeze
        CASES.append(_red_case("sum_fp32_inner_n1_broadcast", "sum", lambda d, s=_sh: rand(*s, device=d), [1], _sh,
                               reduces=False))
# many short rows, and an outer reduction over few columns (a grid reduction's cases)
CASES.append(_red_case("sum_fp32_inner_many_rows", "sum", lambda d: rand(1 << 20, 3, device=d), [1], (1 << 20, 3),
                       big=True))
CASES.append(_red_case("sum_fp32_outer_few_columns", "sum", lambda d: rand(1 << 21, 5, device=d), [0], (1 << 21, 5),
                       big=True))
# outer reductions over columns enough for narrow blocks of shorter vectors (no grid split),
# with a partial last block
for _dt, _cols in ((torch.bfloat16, 16392), (torch.float32, 16388)):
    CASES.append(_red_case(f"sum_{_TAG[_dt]}_outer_narrow_blocks", "sum",
                           lambda d, dt=_dt, c=_cols: rand(1000, c, dtype=dt, device=d), [0], (1000, _cols), big=True))
CASES.append(_var_mean_case("var_mean_c1_fp32_outer_narrow_blocks", torch.float32, (1000, 16388), [0], 1, big=True))

# ----------------------------------------------------------------------------------------------
# zero-size inputs: an empty kept dim (empty output) and an empty reduced dim (the identity)

CASES += [
    _red_case("sum_fp32_empty_rows", "sum", lambda d: rand(0, 129, device=d), [1], (0, 129), reduces=False),
    _red_case("max_fp32_empty_rows", "max", lambda d: rand(0, 129, device=d), [1], (0, 129), reduces=False),
    _red_case("sum_fp32_empty_reduced_dim", "sum", lambda d: rand(17, 0, device=d), [1], (17, 0), reduces=False),
    _red_case("prod_bf16_empty_reduced_dim", "prod", lambda d: rand(0, 5, dtype=torch.bfloat16, device=d), [0],
              (0, 5), reduces=False),
    _red_case("sum_int32_empty_reduced_dim", "sum", lambda d: rand(3, 0, 7, dtype=torch.int32, device=d), [1],
              (3, 0, 7), reduces=False),
]

# ----------------------------------------------------------------------------------------------
# non-contiguous (sliced), permuted (stride order) and expanded inputs


def _permuted_define(fd, inputs):
    """[A, B, C] stored C-outermost (``base[C, A, B].permute(1, 2, 0)``), declared with an
    explicit stride_order (dim i's memory rank, highest outermost)."""
    return [fd.define_tensor(shape=[-1, -1, -1], contiguity=[True, True, True], dtype=DataType.Float,
                             stride_order=[1, 0, 2])]


CASES += [
    # a row stride of 260 and a start 3 elements in: misaligned for 16-byte vectors
    _red_case("sum_fp32_sliced_rows", "sum", lambda d: rand(64, 260, device=d)[:, 3:259], [1], (64, 256)),
    _red_case("sum_bf16_sliced_offset1", "sum", lambda d: rand(33, 1026, dtype=torch.bfloat16, device=d)[:, 1:],
              [1], (33, 1025)),
    _red_case("max_fp32_strided_both", "max", lambda d: rand(130, 390, device=d)[::2, ::3], [1], (65, 130)),
    _red_case("sum_fp32_strided_outer", "sum", lambda d: rand(130, 390, device=d)[::2, ::3], [0], (65, 130)),
    # a transposed input: the reduced logical-inner dim is outermost in memory, and back
    _red_case("sum_fp32_transposed_inner", "sum", lambda d: rand(1025, 65, device=d).t(), [1], (65, 1025)),
    _red_case("sum_fp32_transposed_outer", "sum", lambda d: rand(1025, 65, device=d).t(), [0], (65, 1025)),
    Case("sum_fp32_stride_order_dims1", lambda d: [rand(130, 17, 65, device=d).permute(1, 2, 0)],
         _red("sum", [1]), lambda x: [x.sum(1)], n=65, define=_permuted_define),
    Case("var_mean_fp32_stride_order_dims02", lambda d: [rand(130, 17, 65, device=d).permute(1, 2, 0)],
         lambda fd, x: list(fd.ops.var_mean(x, [0, 2], correction=1)),
         lambda x: list(torch.var_mean(x, [0, 2], correction=1)), n=17 * 130,
         scale=(0.0, RAND_RMS / (17 * 130)), define=_permuted_define),
    _red_case("max_bf16_permuted_3d", "max",
              lambda d: rand(7, 129, 33, dtype=torch.bfloat16, device=d).permute(2, 0, 1), [2], (33, 7, 129)),
    # expanded: stride-0 rows (a real reduction over the inner axis, every row the same) ...
    _red_case("sum_fp32_expanded_rows", "sum", lambda d: rand(1, 1025, device=d).expand(64, 1025), [1], (64, 1025)),
    _red_case("max_fp32_expanded_rows_outer", "max", lambda d: rand(1, 1025, device=d).expand(64, 1025), [0],
              (64, 1025), reduces=False),
    # ... and stride-0 columns: reducing over them is a multiplication (no reduction left) ...
    _red_case("sum_fp32_expanded_cols", "sum", lambda d: rand(64, 1, device=d).expand(64, 1025), [1], (64, 1025),
              reduces=False),
    # ... unless another reduced dim is real
    _red_case("sum_fp32_expanded_mid", "sum", lambda d: rand(33, 1, 129, device=d).expand(33, 7, 129), [1, 2],
              (33, 7, 129)),
    _var_mean_case("var_mean_fp32_expanded_rows", torch.float32, (64, 1025), [1], 1,
                   make=lambda d: [rand(1, 1025, device=d).expand(64, 1025)]),
]

# ----------------------------------------------------------------------------------------------
# keepdim

CASES += [
    _red_case("sum_fp32_keepdim_inner", "sum", lambda d: rand(33, 1025, device=d), [1], (33, 1025), keepdim=True),
    _red_case("max_bf16_keepdim_outer_inner", "max", lambda d: rand(*_S3, dtype=torch.bfloat16, device=d), [0, 2],
              _S3, keepdim=True),
    _red_case("prod_fp64_keepdim_middle", "prod", lambda d: near_one(*_S3, dtype=torch.float64, device=d, n=9), [1],
              _S3, keepdim=True),
    _var_mean_case("var_mean_c1_fp32_keepdim", torch.float32, (33, 1025), [1], 1, keepdim=True),
    _var_case("var_c0_bf16_keepdim_all", torch.bfloat16, (33, 1025), [0, 1], 0, keepdim=True),
]

# ----------------------------------------------------------------------------------------------
# several reductions and several outputs in one fusion; prologues and epilogues


def _sum_max_mean(fd, x):
    s = fd.ops.sum(x, [1])
    return [s, fd.ops.max(x, [1]), fd.ops.mul(s, fd.ops.reciprocal(x.size(1))), fd.ops.min(x, [1])]


def _sum_and_sumsq(fd, x):
    return [fd.ops.sum(x, [1]), fd.ops.sum(fd.ops.mul(x, x), [1])]


def _row_dot(fd, a, b):
    """Two inputs in the prologue: sum(a * b) and sum(a) per row."""
    return [fd.ops.sum(fd.ops.mul(a, b), [1]), fd.ops.sum(a, [1])]


def _var_mean_and_max(fd, x):
    v, m = fd.ops.var_mean(x, [1], correction=1)
    return [v, m, fd.ops.max(x, [1])]


def _sum_and_pointwise(fd, x):
    """A reduced output and an input-shaped one."""
    return [fd.ops.sum(x, [1]), fd.ops.mul(x, 2.0)]


def _two_directions(fd, x):
    """Sums over rows and over columns: two reductions of different shapes."""
    return [fd.ops.sum(x, [0]), fd.ops.sum(x, [1])]


def _prologue_epilogue_bf16(fd, x):
    """cast and scale in, reduce, arithmetic on the reduced result, cast out."""
    xf = fd.ops.mul(fd.ops.cast(x, DataType.Float), 2.0)
    s = fd.ops.sum(fd.ops.add(xf, 1.0), [1])
    y = fd.ops.sqrt(fd.ops.abs(fd.ops.add(fd.ops.mul(s, 0.5), 1.0)))
    return [fd.ops.cast(y, DataType.BFloat16)]


def _eager_prologue_epilogue(x):
    s = (x.float() * 2.0 + 1.0).sum(1)
    return [(s * 0.5 + 1.0).abs().sqrt().to(torch.bfloat16)]


def _mean_epilogue(fd, x):
    """A sum followed by elementwise math on the reduced result."""
    mean = fd.ops.mul(fd.ops.sum(x, [1]), fd.ops.reciprocal(x.size(1)))
    return [fd.ops.add(fd.ops.exp(fd.ops.neg(mean)), fd.ops.mul(mean, mean)), mean]


def _eager_mean_epilogue(x):
    mean = x.sum(1) * (1.0 / x.shape[1])
    return [torch.exp(-mean) + mean * mean, mean]


def _int_prologue(fd, x):
    return [fd.ops.sum(fd.ops.mul(fd.ops.cast(x, DataType.Float), 0.5), [1]), fd.ops.max(x, [1])]


CASES += [
    Case("sum_max_mean_min_fp32", lambda d: [rand(65, 1025, device=d)], _sum_max_mean,
         lambda x: [x.sum(1), x.amax(1), x.sum(1) * (1.0 / x.shape[1]), x.amin(1)], n=1025,
         scale=(RAND_RMS, 0.0, RAND_RMS / 1025, 0.0)),
    Case("sum_and_sumsq_bf16", lambda d: [rand(65, 4097, dtype=torch.bfloat16, device=d)], _sum_and_sumsq,
         lambda x: [x.sum(1), (x.float() * x.float()).to(torch.bfloat16).sum(1)], n=4097),
    Case("row_dot_two_inputs_fp32", lambda d: [rand(65, 1025, device=d), rand(65, 1025, device=d)], _row_dot,
         lambda a, b: [(a * b).sum(1), a.sum(1)], n=1025, scale=(RAND_RMS**2, RAND_RMS)),
    Case("var_mean_and_max_fp32", lambda d: [rand(65, 1025, device=d)], _var_mean_and_max,
         lambda x: [*torch.var_mean(x, [1], correction=1), x.amax(1)], n=1025, scale=(0.0, RAND_RMS / 1025, 0.0)),
    Case("sum_and_pointwise_output_fp32", lambda d: [rand(65, 1025, device=d)], _sum_and_pointwise,
         lambda x: [x.sum(1), x * 2.0], n=[1025, 1]),
    Case("sums_both_directions_fp32", lambda d: [rand(129, 257, device=d)], _two_directions,
         lambda x: [x.sum(0), x.sum(1)], n=[129, 257]),
    Case("prologue_epilogue_bf16", lambda d: [rand(65, 1025, dtype=torch.bfloat16, device=d)],
         _prologue_epilogue_bf16, _eager_prologue_epilogue, n=1025, scale=2.0),
    Case("mean_epilogue_fp32", lambda d: [rand(129, 4097, device=d)], _mean_epilogue, _eager_mean_epilogue, n=4097,
         scale=RAND_RMS / 4097),
    Case("int32_prologue_sum_and_max", lambda d: [rand(65, 1025, dtype=torch.int32, device=d)], _int_prologue,
         lambda x: [(x.float() * 0.5).sum(1), x.amax(1)], n=1025, scale=(15.0, 0.0)),
]

# ----------------------------------------------------------------------------------------------
# normalisations with a fused epilogue: softmax, log-softmax, LayerNorm and RMSNorm forward


def _bcast_rows(fd, r, x):
    """A per-row result [M] broadcast back to x's [M, N]."""
    return fd.ops.broadcast_in_dim(r, shape=x.shape(), broadcast_dims=[0])


def _softmax(dim: int):
    def ops(fd, x0):
        x = fd.ops.cast(x0, DataType.Float) if x0.dtype != DataType.Float else x0
        m = fd.ops.max(x, [dim], keepdim=True)
        e = fd.ops.exp(fd.ops.sub(x, fd.ops.broadcast_in_dim(m, shape=x.shape(), broadcast_dims=[0, 1])))
        s = fd.ops.sum(e, [dim], keepdim=True)
        y = fd.ops.div(e, fd.ops.broadcast_in_dim(s, shape=x.shape(), broadcast_dims=[0, 1]))
        return [fd.ops.cast(y, x0.dtype) if x0.dtype != DataType.Float else y]

    return ops


def _log_softmax(fd, x):
    m = _bcast_rows(fd, fd.ops.max(x, [1]), x)
    shifted = fd.ops.sub(x, m)
    lse = fd.ops.log(fd.ops.sum(fd.ops.exp(shifted), [1]))
    return [fd.ops.sub(shifted, _bcast_rows(fd, lse, x))]


def _layernorm(eps=1e-5, residual=False):
    """(y, mean, rstd): y in the input dtype, mean and rstd float [M]; with `residual`,
    x + residual is normalised (the add fused in front)."""

    def ops(fd, *ts):
        x0, *rest = ts
        dt = x0.dtype
        x = fd.ops.cast(x0, DataType.Float)
        if residual:
            x = fd.ops.add(x, fd.ops.cast(rest.pop(0), DataType.Float))
        w, b = (fd.ops.cast(t, DataType.Float) for t in rest)
        var, mean = fd.ops.var_mean(x, [1], correction=0)
        rstd = fd.ops.rsqrt(fd.ops.add(var, eps))
        xhat = fd.ops.mul(fd.ops.sub(x, _bcast_rows(fd, mean, x)), _bcast_rows(fd, rstd, x))
        wb = fd.ops.broadcast_in_dim(w, shape=x.shape(), broadcast_dims=[1])
        bb = fd.ops.broadcast_in_dim(b, shape=x.shape(), broadcast_dims=[1])
        y = fd.ops.add(fd.ops.mul(xhat, wb), bb)
        return [fd.ops.cast(y, dt), mean, rstd]

    return ops


def _eager_layernorm(eps=1e-5, residual=False):
    def fn(x, *rest):
        rest = list(rest)
        xf = x.float()
        if residual:
            xf = xf + rest.pop(0).float()
        w, b = (t.float() for t in rest)
        var, mean = torch.var_mean(xf, -1, correction=0)
        rstd = torch.rsqrt(var + eps)
        y = (xf - mean[:, None]) * rstd[:, None] * w + b
        return [y.to(x.dtype), mean, rstd]

    return fn


def _rmsnorm(eps=1e-6):
    """(y, rstd): y = x * rsqrt(mean(x^2) + eps) * w in float, y in the input dtype."""

    def ops(fd, x0, w0):
        dt = x0.dtype
        x, w = fd.ops.cast(x0, DataType.Float), fd.ops.cast(w0, DataType.Float)
        ms = fd.ops.mul(fd.ops.sum(fd.ops.mul(x, x), [1]), fd.ops.reciprocal(x.size(1)))
        rstd = fd.ops.rsqrt(fd.ops.add(ms, eps))
        y = fd.ops.mul(fd.ops.mul(x, _bcast_rows(fd, rstd, x)),
                       fd.ops.broadcast_in_dim(w, shape=x.shape(), broadcast_dims=[1]))
        return [fd.ops.cast(y, dt), rstd]

    return ops


def _eager_rmsnorm(eps=1e-6):
    def fn(x, w):
        xf = x.float()
        rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        return [(xf * rstd[:, None] * w.float()).to(x.dtype), rstd]

    return fn


def _ln_scales(n: int, weight: float = RAND_RMS) -> tuple[float, float, float]:
    """LayerNorm's (y, mean, rstd): the mean sums x / n (an error of mean shifts y by it
    times rstd and the weight); rstd errs relatively."""
    return (RAND_RMS / n * weight, RAND_RMS / n, 0.0)


def _norm_inputs(shape, dt, n_params, residual=False):
    def make(d):
        xs = [rand(*shape, dtype=dt, device=d)]
        if residual:
            xs.append(rand(*shape, dtype=dt, device=d))
        return xs + [rand(shape[-1], dtype=dt, device=d) for _ in range(n_params)]

    return make


for _len in (1, 3, 127, 1025, 4097, 65537):
    _sh = (_rows_for(_len), _len)
    for _dt in (torch.float32, torch.bfloat16):
        CASES.append(Case(f"softmax_{_TAG[_dt]}_n{_len}", lambda d, s=_sh, dt=_dt: [rand(*s, dtype=dt, device=d)],
                          _softmax(1), lambda x: [torch.softmax(x, -1)], n=_len, scale=0.0, define=symbolic))
    CASES.append(Case(f"layernorm_bf16_n{_len}", _norm_inputs(_sh, torch.bfloat16, 2), _layernorm(),
                      _eager_layernorm(), n=_len, scale=_ln_scales(_len), define=symbolic))
    CASES.append(Case(f"rmsnorm_bf16_n{_len}", _norm_inputs(_sh, torch.bfloat16, 1), _rmsnorm(),
                      _eager_rmsnorm(), n=_len, scale=0.0, define=symbolic))
CASES += [
    Case("softmax_fp16_n4096", lambda d: [rand(64, 4096, dtype=torch.float16, device=d)], _softmax(1),
         lambda x: [torch.softmax(x, -1)], n=4096, scale=0.0),
    Case("softmax_fp32_dim0", lambda d: [rand(1025, 65, device=d)], _softmax(0), lambda x: [torch.softmax(x, 0)],
         n=1025, scale=0.0),
    Case("softmax_fp32_expanded_rows", lambda d: [rand(1, 1025, device=d).expand(64, 1025)], _softmax(1),
         lambda x: [torch.softmax(x, -1)], n=1025, scale=0.0),
    Case("softmax_bf16_sliced", lambda d: [rand(64, 2050, dtype=torch.bfloat16, device=d)[:, 1:1025]], _softmax(1),
         lambda x: [torch.softmax(x, -1)], n=1024, scale=0.0),
    # log(sum(exp)) errs relatively in the sum, so absolutely (by that relative error) in the output
    Case("log_softmax_fp32_n4097", lambda d: [rand(65, 4097, device=d)], _log_softmax,
         lambda x: [torch.log_softmax(x, -1)], n=4097, scale=1.0 / 4097),
    Case("layernorm_fp32_n4096", _norm_inputs((128, 4096), torch.float32, 2), _layernorm(), _eager_layernorm(),
         n=4096, scale=_ln_scales(4096)),
    Case("layernorm_fp16_n1024", _norm_inputs((128, 1024), torch.float16, 2), _layernorm(), _eager_layernorm(),
         n=1024, scale=_ln_scales(1024)),
    Case("layernorm_residual_bf16_n4096", _norm_inputs((64, 4096), torch.bfloat16, 2, residual=True),
         _layernorm(residual=True), _eager_layernorm(residual=True), n=4096, scale=_ln_scales(4096)),
    Case("rmsnorm_fp32_n4096", _norm_inputs((128, 4096), torch.float32, 1), _rmsnorm(), _eager_rmsnorm(),
         n=4096, scale=0.0),
    Case("rmsnorm_fp16_n8192", _norm_inputs((32, 8192), torch.float16, 1), _rmsnorm(), _eager_rmsnorm(),
         n=8192, scale=0.0),
    # LLM sizes (GPU only)
    Case("layernorm_bf16_llm_2048x8192", _norm_inputs((2048, 8192), torch.bfloat16, 2), _layernorm(),
         _eager_layernorm(), n=8192, scale=_ln_scales(8192), big=True, define=symbolic),
    Case("rmsnorm_bf16_llm_4096x4096", _norm_inputs((4096, 4096), torch.bfloat16, 1), _rmsnorm(),
         _eager_rmsnorm(), n=4096, scale=0.0, big=True, define=symbolic),
    Case("softmax_bf16_llm_4096x16384", lambda d: [rand(4096, 16384, dtype=torch.bfloat16, device=d)], _softmax(1),
         lambda x: [torch.softmax(x, -1)], n=16384, scale=0.0, big=True, define=symbolic),
]

_names = [c.name for c in CASES]
assert len(_names) == len(set(_names)), sorted({n for n in _names if _names.count(n) > 1})

#: the cases the CPU suite runs (the big ones only run on the GPU)
CPU_CASES = [c for c in CASES if not c.big]
