"""Reshapes inside reduction and normalisation segments, the fusions the reshape kernel tests
run: a reshape before the reduction (merging or splitting kept and reduced axes of its
input: [8, 6, 32] -> [48, 32], [4, 96] -> [4, 3, 32], [8, 6, 32] -> [8, 192], the RMSNorm
and LayerNorm of attention heads [B, S, H*D] -> [B, S, H, D] over D), between a reduction
and its epilogue ([8, 6] -> [48], size-1 dims added or removed, keepdim-like), of full
outputs after a persistent epilogue ([8, 6, 32] -> [8, 192]), static and symbolic sizes,
fp32 and bf16, odd sizes; and reshapes the kernels cannot index, which the segmenter cuts
out of the reduction segment.

Each case is a `reduction_cases.Case` (fresh inputs per device, its fusion on handles of
them, the same outputs in eager PyTorch, tolerances) plus the schedulers of the segments
it becomes.
"""
from __future__ import annotations

from dataclasses import dataclass
import torch

from fuser import DataType

from reduction_cases import RAND_RMS, Case, rand, symbolic

F, BF = DataType.Float, DataType.BFloat16


@dataclass
class ReshapeCase(Case):
    #: the schedulers of its segments, in order
    schedulers: tuple[str, ...] = ("reduction",)


def static(fd, inputs):
    """Contiguous inputs declared with their sizes: reshapes of them are static (Split and
    Merge between root and logical axes)."""
    from fuser.ir.dtype import from_torch

    return [fd.define_tensor(shape=list(x.shape), contiguity=[True] * x.ndim, dtype=from_torch(x.dtype))
            for x in inputs]


def _f32(fd, x):
    return fd.ops.cast(x, F) if x.dtype != F else x


def _back(fd, y, like):
    return fd.ops.cast(y, like.dtype) if like.dtype != F else y


# --- reshape between a reduction and its epilogue ------------------------------------------------


def red_then_flatten(shape, dt=torch.float32, **kw) -> ReshapeCase:
    """sum over the last dim, the [A, B] rows flattened to [A * B], then squared."""
    a, b, c = shape

    def ops(fd, x):
        s = fd.ops.sum(_f32(fd, x), dims=[2])
        r = fd.ops.reshape(s, [a * b])
        return [fd.ops.mul(r, r)]

    # the square's error: 2 |sum| times the sum's, |sum| ~ RMS sqrt(c)
    return ReshapeCase(f"red_then_flatten_{_tag(dt)}_{_dims(shape)}", lambda d: [rand(*shape, dtype=dt, device=d)],
                       ops, lambda x: [x.float().sum(2).reshape(a * b) ** 2], n=c,
                       scale=2 * RAND_RMS * RAND_RMS * c ** 0.5, define=symbolic, **kw)


def red_keepdim_then_flatten(shape, **kw) -> ReshapeCase:
    a, b, c = shape
    return ReshapeCase(f"red_keepdim_then_flatten_{_dims(shape)}", lambda d: [rand(*shape, device=d)],
                       lambda fd, x: [fd.ops.reshape(fd.ops.sum(x, dims=[2], keepdim=True), [a * b])],
                       lambda x: [x.sum(2, keepdim=True).reshape(a * b)], n=c, define=symbolic, **kw)


def red_then_size_one_dims(shape, **kw) -> ReshapeCase:
    """sum over the last dim, reshaped to add size-1 dims [A, 1, B, 1]; a max to [A*B]."""
    a, b, c = shape
    return ReshapeCase(f"red_then_size_one_dims_{_dims(shape)}", lambda d: [rand(*shape, device=d)],
                       lambda fd, x: [fd.ops.reshape(fd.ops.sum(x, dims=[2]), [a, 1, b, 1]),
                                      fd.ops.reshape(fd.ops.max(x, dims=[2], keepdim=True), [a * b])],
                       lambda x: [x.sum(2).reshape(a, 1, b, 1), x.amax(2, keepdim=True).reshape(a * b)],
                       n=(c, 1), define=symbolic, **kw)


def keepdim_like_reshape(shape, **kw) -> ReshapeCase:
    """x - reshape(sum(x, -1), [A, B, 1]): the reshape stands for keepdim (persistent)."""
    a, b, c = shape
    return ReshapeCase(f"keepdim_like_reshape_{_dims(shape)}", lambda d: [rand(*shape, device=d)],
                       lambda fd, x: [fd.ops.sub(x, fd.ops.reshape(fd.ops.sum(x, dims=[2]), [a, b, 1]))],
                       lambda x: [x - x.sum(2).reshape(a, b, 1)], n=c, define=symbolic,
                       schedulers=("inner_persistent",), **kw)


def reduced_reshape_with_input(shape, **kw) -> ReshapeCase:
    """A reduced result reshaped to another row layout, plus an input of that layout."""
    a, b, c = shape
    return ReshapeCase(f"reduced_reshape_with_input_{_dims(shape)}",
                       lambda d: [rand(*shape, device=d), rand(b, a, device=d)],
                       lambda fd, x, y: [fd.ops.add(fd.ops.reshape(fd.ops.sum(x, dims=[2]), [b, a]), y)],
                       lambda x, y: [x.sum(2).reshape(b, a) + y], n=c, define=symbolic, **kw)


def outer_reduced_reshape(shape, **kw) -> ReshapeCase:
    """A sum over the middle dim (an outer reduction: the kept axes are innermost), its
    [A, C] result reshaped to [C, A] (its lanes no longer contiguous)."""
    a, b, c = shape
    return ReshapeCase(f"outer_reduced_reshape_{_dims(shape)}", lambda d: [rand(*shape, device=d)],
                       lambda fd, x: [fd.ops.reshape(fd.ops.sum(x, dims=[1]), [c, a])],
                       lambda x: [x.sum(1).reshape(c, a)], n=b, define=symbolic, **kw)


# --- reshape before the reduction ------------------------------------------------------------------


def flatten_then_red(shape, dt=torch.float32, *, define=symbolic, tag="", **kw) -> ReshapeCase:
    """[A, B, C] -> [A * B, C], summed over C, then halved."""
    a, b, c = shape
    return ReshapeCase(f"flatten_then_red{tag}_{_tag(dt)}_{_dims(shape)}",
                       lambda d: [rand(*shape, dtype=dt, device=d)],
                       lambda fd, x: [fd.ops.mul(fd.ops.sum(fd.ops.reshape(_f32(fd, x), [a * b, c]), dims=[1]), 0.5)],
                       lambda x: [x.float().reshape(a * b, c).sum(1) * 0.5], n=c, scale=0.5 * RAND_RMS,
                       define=define, **kw)


def merge_kept_and_reduced(shape, **kw) -> ReshapeCase:
    """[A, B, C] -> [A, B * C] summed over B * C: the reduced axis merges a kept-looking
    input axis with the innermost."""
    a, b, c = shape
    return ReshapeCase(f"merge_kept_and_reduced_{_dims(shape)}", lambda d: [rand(*shape, device=d)],
                       lambda fd, x: [fd.ops.sum(fd.ops.reshape(x, [a, b * c]), dims=[1])],
                       lambda x: [x.reshape(a, b * c).sum(1)], n=b * c, define=symbolic, **kw)


def split_reduced(shape, split, *, define=symbolic, tag="", **kw) -> ReshapeCase:
    """[A, N] -> [A, *split] summed over the split axes."""
    a, n = shape
    dims = list(range(1, 1 + len(split)))
    return ReshapeCase(f"split_reduced{tag}_{_dims(shape)}_to_{_dims(split)}", lambda d: [rand(*shape, device=d)],
                       lambda fd, x: [fd.ops.sum(fd.ops.reshape(x, [a, *split]), dims=dims)],
                       lambda x: [x.reshape(a, *split).sum(dims)], n=n, define=define, **kw)


def outer_over_merged(shape, **kw) -> ReshapeCase:
    """[A, B, C] -> [A * B, C] summed over dim 0: an outer reduction of the merged rows."""
    a, b, c = shape
    return ReshapeCase(f"outer_over_merged_{_dims(shape)}", lambda d: [rand(*shape, device=d)],
                       lambda fd, x: [fd.ops.sum(fd.ops.reshape(x, [a * b, c]), dims=[0])],
                       lambda x: [x.reshape(a * b, c).sum(0)], n=a * b, define=symbolic, **kw)


def var_mean_outer_over_merged(shape, **kw) -> ReshapeCase:
    a, b, c = shape

    def ops(fd, x):
        v, m = fd.ops.var_mean(fd.ops.reshape(x, [a * b, c]), dims=[0], correction=1)
        return [v, m]

    return ReshapeCase(f"var_mean_outer_over_merged_{_dims(shape)}", lambda d: [rand(*shape, device=d)], ops,
                       lambda x: list(torch.var_mean(x.reshape(a * b, c), 0, correction=1)), n=a * b,
                       scale=(0.0, RAND_RMS / (a * b)), define=symbolic, **kw)


def var_mean_flattened_rows(shape, **kw) -> ReshapeCase:
    """var_mean over the last dim of [A * B, C], the variance reshaped back to [A, B]."""
    a, b, c = shape

    def ops(fd, x):
        v, m = fd.ops.var_mean(fd.ops.reshape(x, [a * b, c]), dims=[1], correction=0)
        return [fd.ops.reshape(v, [a, b]), m]

    def eager(x):
        v, m = torch.var_mean(x.reshape(a * b, c), 1, correction=0)
        return [v.reshape(a, b), m]

    return ReshapeCase(f"var_mean_flattened_rows_{_dims(shape)}", lambda d: [rand(*shape, device=d)], ops, eager,
                       n=c, scale=(0.0, RAND_RMS / c), define=symbolic, **kw)


def expanded_input(shape, **kw) -> ReshapeCase:
    """An input expanded along its middle dim (stride 0), flattened and summed."""
    a, b, c = shape
    return ReshapeCase(f"expanded_input_{_dims(shape)}", lambda d: [rand(a, 1, c, device=d).expand(a, b, c)],
                       lambda fd, x: [fd.ops.sum(fd.ops.reshape(x, [a * b, c]), dims=[1])],
                       lambda x: [x.reshape(a * b, c).sum(1)], n=c, **kw)


def permuted_input(shape, **kw) -> ReshapeCase:
    """A column-major [A * B, C] input (a transposed view) reshaped to [A, B, C], summed
    over C."""
    a, b, c = shape
    return ReshapeCase(f"permuted_input_{_dims(shape)}", lambda d: [rand(c, a * b, device=d).t()],
                       lambda fd, x: [fd.ops.sum(fd.ops.reshape(x, [a, b, c]), dims=[2])],
                       lambda x: [x.reshape(a, b, c).sum(2)], n=c, **kw)


# --- normalisations --------------------------------------------------------------------------------


def softmax_reshaped_out(shape, *, define=symbolic, tag="", **kw) -> ReshapeCase:
    """exp(x - max(x, -1)) written as [A, B * C]: a persistent kernel's full output reshaped."""
    a, b, c = shape

    def ops(fd, x):
        m = fd.ops.max(x, dims=[2], keepdim=True)
        return [fd.ops.reshape(fd.ops.exp(fd.ops.sub(x, m)), [a, b * c])]

    return ReshapeCase(f"softmax_reshaped_out{tag}_{_dims(shape)}", lambda d: [rand(*shape, device=d)], ops,
                       lambda x: [(x - x.amax(2, keepdim=True)).exp().reshape(a, b * c)], define=define,
                       schedulers=("inner_persistent",), **kw)


def softmax_of_heads(shape, heads, dt=torch.float32, **kw) -> ReshapeCase:
    """softmax over the last dim of [A * heads, N / heads], from [A, N] and back."""
    a, n = shape
    rows, cols = a * heads, n // heads

    def ops(fd, x0):
        x = fd.ops.reshape(_f32(fd, x0), [rows, cols])
        m = fd.ops.max(x, dims=[1], keepdim=True)
        e = fd.ops.exp(fd.ops.sub(x, m))
        y = fd.ops.div(e, fd.ops.sum(e, dims=[1], keepdim=True))
        return [_back(fd, fd.ops.reshape(y, [a, n]), x0)]

    return ReshapeCase(f"softmax_of_heads_{_tag(dt)}_{_dims(shape)}_h{heads}",
                       lambda d: [rand(*shape, dtype=dt, device=d)], ops,
                       lambda x: [torch.softmax(x.float().reshape(rows, cols), -1).reshape(a, n).to(dt)],
                       n=cols, scale=0.0, define=symbolic, schedulers=("inner_persistent",), **kw)


def rms_norm_heads(b, s, h, d, dt=torch.float32, eps=1e-6, **kw) -> ReshapeCase:
    """RMSNorm over D of [B, S, H * D] seen as [B, S, H, D] (per attention head, as in
    QK-norm), weight [D]; y reshaped back to [B, S, H * D], rstd as [B, S * H]."""

    def ops(fd, x0, w0):
        x = fd.ops.cast(fd.ops.reshape(x0, [b, s, h, d]), F)
        ms = fd.ops.sum(fd.ops.mul(x, x), dims=[3], keepdim=True)
        rstd = fd.ops.rsqrt(fd.ops.add(fd.ops.mul(ms, 1.0 / d), eps))
        w = fd.ops.broadcast_in_dim(fd.ops.cast(w0, F), shape=[b, s, h, d], broadcast_dims=[3])
        y = fd.ops.cast(fd.ops.mul(fd.ops.mul(x, rstd), w), x0.dtype)
        return [fd.ops.reshape(y, [b, s, h * d]), fd.ops.reshape(rstd, [b, s * h])]

    def eager(x0, w0):
        x = x0.float().reshape(b, s, h, d)
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        return [(x * rstd * w0.float()).to(x0.dtype).reshape(b, s, h * d), rstd.reshape(b, s * h)]

    return ReshapeCase(f"rms_norm_heads_{_tag(dt)}_{b}x{s}x{h}x{d}",
                       lambda dev: [rand(b, s, h * d, dtype=dt, device=dev), rand(d, dtype=dt, device=dev)],
                       ops, eager, n=d, scale=0.0, define=symbolic, schedulers=("inner_persistent",), **kw)


def layer_norm_heads(b, s, h, d, dt=torch.float32, eps=1e-5, **kw) -> ReshapeCase:
    """LayerNorm (var_mean: Welford) over D of [B, S, H * D] seen as [B, S, H, D], affine
    over D, reshaped back."""

    def ops(fd, x0, w0, b0):
        x = fd.ops.cast(fd.ops.reshape(x0, [b, s, h, d]), F)
        var, mean = fd.ops.var_mean(x, dims=[3], correction=0, keepdim=True)
        y = fd.ops.mul(fd.ops.sub(x, mean), fd.ops.rsqrt(fd.ops.add(var, eps)))
        shape = [b, s, h, d]
        y = fd.ops.add(fd.ops.mul(y, fd.ops.broadcast_in_dim(fd.ops.cast(w0, F), shape=shape, broadcast_dims=[3])),
                       fd.ops.broadcast_in_dim(fd.ops.cast(b0, F), shape=shape, broadcast_dims=[3]))
        return [fd.ops.cast(fd.ops.reshape(y, [b, s, h * d]), x0.dtype)]

    def eager(x0, w0, b0):
        x = x0.float().reshape(b, s, h, d)
        y = torch.nn.functional.layer_norm(x, [d], w0.float(), b0.float(), eps)
        return [y.reshape(b, s, h * d).to(x0.dtype)]

    return ReshapeCase(f"layer_norm_heads_{_tag(dt)}_{b}x{s}x{h}x{d}",
                       lambda dev: [rand(b, s, h * d, dtype=dt, device=dev), rand(d, dtype=dt, device=dev),
                                    rand(d, dtype=dt, device=dev)],
                       ops, eager, n=d, scale=RAND_RMS * RAND_RMS / d, define=symbolic,
                       schedulers=("inner_persistent",), **kw)


def batch_norm_merged_rows(shape, **kw) -> ReshapeCase:
    """Statistics over the merged rows of [A, B, C] -> [A * B, C] (an outer-persistent
    kernel), the normalised rows reshaped back."""
    a, b, c = shape

    def ops(fd, x0):
        x = fd.ops.reshape(x0, [a * b, c])
        var, mean = fd.ops.var_mean(x, dims=[0], correction=0, keepdim=True)
        return [fd.ops.reshape(fd.ops.mul(fd.ops.sub(x, mean), fd.ops.rsqrt(fd.ops.add(var, 1e-5))), [a, b, c])]

    def eager(x0):
        x = x0.reshape(a * b, c)
        var, mean = torch.var_mean(x, 0, correction=0, keepdim=True)
        return [((x - mean) * torch.rsqrt(var + 1e-5)).reshape(a, b, c)]

    return ReshapeCase(f"batch_norm_merged_rows_{_dims(shape)}", lambda d: [rand(*shape, device=d)], ops, eager,
                       n=a * b, scale=RAND_RMS / (a * b), define=symbolic, schedulers=("outer_persistent",), **kw)


# --- reshapes the kernels cannot index: cut out of the reduction segment -------------------------------


def reshape_beside_permute(shape, **kw) -> ReshapeCase:
    """reshape(x, [B, A]) + x.T, summed: the reshape and the permute relate the same axes
    two ways, so no index of one is known to be the other's."""
    a, b = shape
    return ReshapeCase(f"reshape_beside_permute_{_dims(shape)}", lambda d: [rand(*shape, device=d)],
                       lambda fd, x: [fd.ops.sum(fd.ops.add(fd.ops.reshape(x, [b, a]), fd.ops.permute(x, [1, 0])),
                                                 dims=[1])],
                       lambda x: [(x.reshape(b, a) + x.t()).sum(1)], n=a, define=symbolic,
                       schedulers=("pointwise", "reduction"), **kw)


def _tag(dt: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dt]


def _dims(shape) -> str:
    return "x".join(str(n) for n in shape)


CASES: list[ReshapeCase] = [
    red_then_flatten((8, 6, 32)),
    red_then_flatten((7, 5, 33)),
    red_then_flatten((8, 6, 32), torch.bfloat16),
    red_keepdim_then_flatten((8, 6, 32)),
    red_then_size_one_dims((8, 6, 32)),
    keepdim_like_reshape((8, 6, 32)),
    keepdim_like_reshape((7, 5, 33)),
    reduced_reshape_with_input((8, 6, 32)),
    outer_reduced_reshape((8, 6, 32)),
    outer_reduced_reshape((7, 5, 33)),
    flatten_then_red((8, 6, 32)),
    flatten_then_red((7, 5, 33)),
    flatten_then_red((8, 6, 32), torch.bfloat16),
    flatten_then_red((8, 6, 32), define=static, tag="_static"),
    flatten_then_red((2, 3, 40000), tag="_grid"),
    merge_kept_and_reduced((8, 6, 32)),
    merge_kept_and_reduced((7, 5, 33)),
    split_reduced((4, 96), (3, 32)),
    split_reduced((5, 99), (3, 33)),
    split_reduced((4, 96), (3, 32), define=static, tag="_static"),
    outer_over_merged((8, 6, 32)),
    outer_over_merged((7, 5, 33)),
    outer_over_merged((1000, 4, 8)),
    var_mean_outer_over_merged((1000, 4, 8)),
    var_mean_flattened_rows((2, 3, 500)),
    expanded_input((8, 6, 32)),
    permuted_input((8, 6, 32)),
    softmax_reshaped_out((8, 6, 32)),
    softmax_reshaped_out((7, 5, 33)),
    softmax_reshaped_out((8, 6, 32), define=static, tag="_static"),
    softmax_of_heads((6, 256), 4),
    softmax_of_heads((6, 256), 4, torch.bfloat16),
    rms_norm_heads(2, 3, 4, 32),
    rms_norm_heads(2, 3, 4, 32, torch.bfloat16),
    rms_norm_heads(3, 5, 3, 33),
    layer_norm_heads(2, 3, 4, 64, torch.bfloat16),
    layer_norm_heads(3, 5, 3, 33),
    batch_norm_merged_rows((4, 6, 32)),
    batch_norm_merged_rows((3, 5, 33)),
    reshape_beside_permute((6, 4)),
]

#: larger shapes (the GPU tests; the CPU suite simulates a few): vector accesses, many
#: rows, grid reductions, attention heads as in LLMs
LARGE_CASES: list[ReshapeCase] = [
    flatten_then_red((64, 32, 4096), torch.bfloat16),
    flatten_then_red((2, 3, 1 << 20), tag="_grid"),
    merge_kept_and_reduced((512, 16, 257)),
    split_reduced((256, 4096), (32, 128)),
    outer_over_merged((64, 128, 1024)),
    red_then_flatten((128, 96, 1000)),
    softmax_reshaped_out((64, 32, 1024)),
    softmax_of_heads((512, 4096), 32, torch.bfloat16),
    rms_norm_heads(4, 512, 32, 128, torch.bfloat16),
    rms_norm_heads(7, 5, 3, 33, torch.bfloat16),
    layer_norm_heads(4, 512, 16, 64, torch.bfloat16),
]

_names = [c.name for c in CASES + LARGE_CASES]
assert len(_names) == len(set(_names)), sorted({n for n in _names if _names.count(n) > 1})

