"""Backward-normalisation fusions the kernel tests run (issue 9, item 6): RMSNorm backward,
LayerNorm backward, softmax backward and a batch-norm-like outer persistent normalisation,
each defined with FusionDefinition ops (computing in float, casting back for half types),
over row counts M in (1, 7, 1000, 16384) and row lengths N in (3, 127, 1024, 4097, 16385),
in fp32 (every pair), bf16 and fp16 (a representative subset), on contiguous,
non-contiguous (sliced with a row stride > N, column-major) and expanded (stride-0) inputs.

The cases are `reduction_cases.Case`s (the same fields, inputs, tolerances and test
helpers): fresh random inputs on a device (never all zeros: `reduction_cases.rand`, kept
away from 0; rstd positive and O(1); softmax's y an actual softmax of random data), recorded with
`fd.from_pytorch` (so layout, strides and expanded axes are the inputs'), and the same
outputs computed with eager PyTorch (`eager`, with PyTorch's own ops where it has them:
`aten.native_layer_norm_backward`, `aten._softmax_backward_data`, `native_batch_norm`).

Tolerances (`Case.tolerance` -> `fuser.benchmarks.fusions.reduction_tolerance(dtype, n,
scale)`): each output gets the dtype's tolerance, with atol widened by what float
accumulation in another order may change it by: `n` the number of terms summed into the
reduction the output depends on, `scale` their magnitude carried into the output's units
(see `_scales`). The output-dtype rounding of half types is covered by the dtype's rtol
(one bf16 / fp16 ulp is below it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fuser import DataType
from fuser.scheduler.normalization import STAGED_REGISTER_FRACTION, stage_budget
from fuser.scheduler.runtime_info import PERSISTENT_REGISTER_FRACTION, DeviceLimits

from reduction_cases import _TAG as TAG
from reduction_cases import RAND_RMS, Case, rand

#: the schedulers whose segments must run as generated kernels here (issue 9: the
#: persistent ones too, not only `reduction_cases.KERNEL_SCHEDULERS`)
NORM_KERNEL_SCHEDULERS = ("reduction", "inner_persistent", "outer_persistent", "inner_outer_persistent")
PATTERNS = ("rms_bwd", "ln_bwd", "softmax_bwd", "bn_outer")
ROWS = (1, 7, 1000, 16384)
ROW_LENGTHS = (3, 127, 1024, 4097, 16385)
#: bf16 / fp16 run a subset: every row length at 7 and 1000 rows, and two long-batch pairs
HALF_SHAPES = tuple((m, n) for m in (7, 1000) for n in ROW_LENGTHS) + ((16384, 1024), (16384, 4097))
#: rows too long for the registers that whole vectors tile (held in shared-memory stages
#: instead: normalization.INNER_OUTER_STAGED_FIT), per dtype
STAGED_SHAPES = {torch.float32: ((1000, 8192),), torch.bfloat16: ((1000, 16384),), torch.float16: ((1000, 16384),)}
HALF_DTYPES = (torch.bfloat16, torch.float16)
#: the pairs left out: their inputs would take more than 1 GiB (fp32 [16384, 16385] is
#: already 1 GiB + 64 KiB per tensor)
MAX_INPUT_BYTES = 2**30
#: the CPU suite's size limit (M * N), so it stays fast
CPU_MAX_ELEMENTS = 2**16
#: the layouts every pattern also runs on (fp32 and bf16; a small CPU-sized and a large
#: shape): `sliced` and `transposed` lay every [M, N] input out so (see `_rows`);
#: `expanded_grad` expands grad (softmax: dy) from one row [1, N], and for the batch norm x
#: from one column [M, 1] (its reduced rows stay real); `expanded_params` makes the weight
#: (and bias) one value at stride 0 and passes rstd (and mean) as their [M, 1] expanded to
#: [M, N] (softmax: y, one row's softmax expanded over the rows)
LAYOUTS = ("sliced", "transposed", "expanded_grad", "expanded_params")
LAYOUT_SHAPES = ((48, 1000), (1000, 4097))
EPS = 1e-5

# magnitudes of the inputs, for tolerances (see `_scales`)
#: rstd lies in [0.5, 1.5] (`positive`)
RSTD_MAX = 1.5
#: the largest |rand| in a case (|N(0, 1)| + 0.25 over at most 2**28 draws stays below 6.5)
X_MAX = 6.5
#: softmax backward's y is the softmax of SOFTMAX_LOGIT_SCALE * `rand`: peaked rows (a few
#: y of O(1), the rest tiny), so dx = y (dy - s) is O(1) where y is and a wrong s shows
#: (with y ~ 1 / N everywhere, dx ~ 1 / N would hide under float32's atol for long rows)
SOFTMAX_LOGIT_SCALE = 4.0


@dataclass
class NormCase(Case):
    """A `reduction_cases.Case` with what the tests select on: the pattern, [M, N], the
    input dtype and the layout. (`reduces` is False for the batch norm over one row: a
    [1, N] input's row axis is a broadcast, and var_mean over it no reduction.)"""

    pattern: str = ""
    shape: tuple = ()
    dtype: torch.dtype = torch.float32
    layout: str = "contiguous"

    def expected_segments(self, limits: DeviceLimits | None = None) -> Segmentation | None:
        """What this case is segmented as on `limits` (default: the planning target's, as a
        CPU / meta call plans); None where the cases claim nothing (softmax, batch norm)."""
        return expected_segments(self.pattern, self.shape, self.dtype, self.layout,
                                 limits if limits is not None else DeviceLimits.of(torch.device("meta")))


# ----------------------------------------------------------------------------------------------
# the segmentation each RMSNorm / LayerNorm backward case expects (issue 32, item 4)

#: why inner_outer_persistent declines a case: what its reason
#: (`fuser.scheduler.normalization.inner_outer_reason`) says
NO_OUTER_REDUCTION = "needs both inner and outer reductions"
ROW_TOO_LONG = "bytes registers hold"
DIFFERENT_INNER_AXES = "inner reductions over different axes"


@dataclass(frozen=True)
class Segmentation:
    """The schedulers of a case's segments, in order, and why inner_outer_persistent
    declines the whole fusion (None: it accepts it, and that is the one segment)."""

    schedulers: tuple[str, ...]
    declined: str | None = None


def register_budget(limits: DeviceLimits) -> int:
    """The bytes of a row a persistent kernel may hold in registers on `limits` (as the
    persistent schedulers count it)."""
    return int(limits.register_file_bytes * PERSISTENT_REGISTER_FRACTION)


def expected_segments(pattern: str, shape: tuple, dtype: torch.dtype, layout: str,
                      limits: DeviceLimits) -> Segmentation | None:
    """The rule: RMSNorm / LayerNorm backward is one inner_outer_persistent segment, except

    - one row (M = 1): the row axis of a [1, N] input is a broadcast, so dweight / dbias
      reduce nothing and there is no outer reduction. The whole fusion is one
      inner_persistent segment when dx's row (grad and x) fits the register budget;
      otherwise RMSNorm falls back to a reduction and a pointwise segment, LayerNorm to an
      inner_persistent (its sums, which hold less) and a pointwise one;
    - LayerNorm on `expanded_grad` (dbias sums a stride-0 grad over M) and fp32 LayerNorm on
      `transposed` inputs (dbias sums the column-major grad itself, M innermost in memory):
      an inner reduction over M beside dx's over N. dbias goes to a segment of its own
      (a reduction), the rest stays inner_outer_persistent;
    - rows longer than the register budget holds: per row element the kernel holds grad, x
      and the weight, and a float accumulator per outer reduction (dweight; and dbias).
      Contiguous rows of whole 16-byte vectors still take one inner_outer_persistent
      segment where grad and x go to shared memory, two rows of them within the stage
      budget, and the rest (weight and accumulators) fits STAGED_REGISTER_FRACTION of the
      register file. Otherwise dweight is a reduction segment, and dx an inner_persistent
      one where its row (grad and x) fits the budget, else a reduction (that writes the row
      sums) with the rest.

    None for softmax and batch norm (no claim)."""
    if pattern not in ("rms_bwd", "ln_bwd"):
        return None
    m, n = shape
    size = torch.empty((), dtype=dtype).element_size()
    budget = register_budget(limits)
    dx_fits = 2 * size * n <= budget  # inner_persistent holds grad and x
    if m == 1:
        if dx_fits:
            return Segmentation(("inner_persistent",), NO_OUTER_REDUCTION)
        tail = ("reduction", "pointwise") if pattern == "rms_bwd" else ("inner_persistent", "pointwise")
        return Segmentation(tail, NO_OUTER_REDUCTION)
    if pattern == "ln_bwd" and layout == "expanded_grad":
        return Segmentation(("reduction", "inner_outer_persistent"), DIFFERENT_INNER_AXES)
    if pattern == "ln_bwd" and layout == "transposed" and dtype == torch.float32:
        return Segmentation(("inner_outer_persistent", "reduction"), DIFFERENT_INNER_AXES)
    if not rows_fit_one_kernel(pattern, size, n, limits, contiguous=layout == "contiguous"):
        return Segmentation(("reduction", "inner_persistent" if dx_fits else "reduction"), ROW_TOO_LONG)
    return Segmentation(("inner_outer_persistent",))


def rows_fit_one_kernel(pattern: str, size: int, n: int, limits: DeviceLimits, contiguous: bool = True) -> bool:
    """Whether RMSNorm / LayerNorm backward rows of `n` elements of `size` bytes fit one
    inner-outer kernel: held per element in the register budget (grad, x and the weight, and
    a float accumulator per outer reduction: dweight; and dbias), or, for contiguous rows of
    whole 16-byte vectors, grad and x staged in shared memory (two rows of each within the
    stage budget) and the rest within STAGED_REGISTER_FRACTION of the register file."""
    held = 3 * size + 4 * (1 if pattern == "rms_bwd" else 2)
    if held * n <= register_budget(limits):
        return True
    staged = 2 * size  # grad and x
    return (contiguous and n % (16 // size) == 0
            and (held - staged) * n <= limits.register_file_bytes * STAGED_REGISTER_FRACTION
            and 2 * staged * n <= stage_budget(limits))


# ----------------------------------------------------------------------------------------------
# inputs


def positive(*shape, device="cpu") -> torch.Tensor:
    """rstd-like float32 values in [0.5, 1.5): positive and O(1)."""
    return 0.5 + torch.rand(shape, device=device)


def _rows(m: int, n: int, dt, device, layout: str, expanded: bool = False) -> torch.Tensor:
    """A [m, n] input in `layout`: contiguous; `sliced` (a row stride of n + 8, starting 3
    elements in: misaligned for vectors); `transposed` (column-major: a contiguous [n, m]
    tensor transposed, i.e. x transposed, made contiguous and transposed back as a view);
    `expanded`: one random row expanded over the m rows (stride 0)."""
    if expanded:
        return rand(1, n, dtype=dt, device=device).expand(m, n)
    if layout == "sliced":
        return rand(m, n + 8, dtype=dt, device=device)[:, 3:n + 3]
    if layout == "transposed":
        return rand(n, m, dtype=dt, device=device).t()
    return rand(m, n, dtype=dt, device=device)


def _param(n: int, dt, device, expanded: bool) -> torch.Tensor:
    """A weight / bias [n]; `expanded`: one value expanded to n (stride 0)."""
    return rand(1, dtype=dt, device=device).expand(n) if expanded else rand(n, dtype=dt, device=device)


def _row_stat(m: int, n: int, device, expanded: bool) -> torch.Tensor:
    """rstd: a per-row float32 [m, 1] (`positive`); `expanded`: that expanded to [m, n]."""
    t = positive(m, 1, device=device)
    return t.expand(m, n) if expanded else t


def _inputs(pattern: str, m: int, n: int, dt, layout: str):
    eg, ep = layout == "expanded_grad", layout == "expanded_params"
    rl = layout if layout in ("sliced", "transposed") else "contiguous"

    def make(d):
        if pattern == "rms_bwd":
            return [_rows(m, n, dt, d, rl, eg), _rows(m, n, dt, d, rl), _row_stat(m, n, d, ep),
                    _param(n, dt, d, ep)]
        if pattern == "ln_bwd":
            grad, x = _rows(m, n, dt, d, rl, eg), _rows(m, n, dt, d, rl)
            mean = x.float().mean(-1, keepdim=True)  # the rows' real mean: x_hat as in training
            return [grad, x, mean.expand(m, n) if ep else mean, _row_stat(m, n, d, ep), _param(n, dt, d, ep)]
        if pattern == "softmax_bwd":
            # y an actual softmax of random rows, in the layout (`expanded_params`: one row's
            # softmax expanded over the m rows)
            if ep:
                y = torch.softmax(SOFTMAX_LOGIT_SCALE * rand(1, n, device=d), -1).to(dt).expand(m, n)
            else:
                y = _rows(m, n, dt, d, rl).copy_(torch.softmax(SOFTMAX_LOGIT_SCALE * rand(m, n, device=d), -1))
            return [_rows(m, n, dt, d, rl, eg), y]
        if pattern == "bn_outer":
            x = rand(m, 1, dtype=dt, device=d).expand(m, n) if eg else _rows(m, n, dt, d, rl)
            return [x, _param(n, dt, d, ep), _param(n, dt, d, ep)]
        raise ValueError(pattern)

    return make


def _input_bytes(pattern: str, m: int, n: int, dt) -> int:
    """Bytes of the [m, n] inputs (the rest are [m, 1] or [n])."""
    return (1 if pattern == "bn_outer" else 2) * m * n * torch.empty((), dtype=dt).element_size()


# ----------------------------------------------------------------------------------------------
# fusions (FusionDefinition ops; float math, half outputs cast back)


def _f(fd, t):
    return t if t.dtype == DataType.Float else fd.ops.cast(t, DataType.Float)


def _out(fd, t, like):
    return t if like.dtype == DataType.Float else fd.ops.cast(t, like.dtype)


def _rows_b(fd, r, x):
    """A per-row [M, 1] (or [M, N] expanded) value broadcast to x's [M, N]."""
    return fd.ops.broadcast_in_dim(r, shape=x.shape(), broadcast_dims=[0, 1])


def _cols_b(fd, c, x):
    """A per-column [N] value broadcast to x's [M, N]."""
    return fd.ops.broadcast_in_dim(c, shape=x.shape(), broadcast_dims=[1])


def _row_mean(fd, t, x):
    """mean over N, kept [M, 1], broadcast back to [M, N]."""
    return _rows_b(fd, fd.ops.mul(fd.ops.sum(t, [1], keepdim=True), fd.ops.reciprocal(x.size(1))), x)


def rms_norm_backward(fd, grad0, x0, rstd, w0):
    """(dx, dweight): x_hat = x rstd, gw = grad w, dx = rstd (gw - x_hat mean_N(gw x_hat)),
    dweight = sum_M(grad x_hat)."""
    g, x, w = _f(fd, grad0), _f(fd, x0), _f(fd, w0)
    r = _rows_b(fd, _f(fd, rstd), x)
    xhat = fd.ops.mul(x, r)
    gw = fd.ops.mul(g, _cols_b(fd, w, x))
    dx = fd.ops.mul(r, fd.ops.sub(gw, fd.ops.mul(xhat, _row_mean(fd, fd.ops.mul(gw, xhat), x))))
    dw = fd.ops.sum(fd.ops.mul(g, xhat), [0])
    return [_out(fd, dx, x0), _out(fd, dw, w0)]


def layer_norm_backward(fd, grad0, x0, mean, rstd, w0):
    """(dx, dweight, dbias) as aten.native_layer_norm_backward: x_hat = (x - mean) rstd,
    gw = grad w, dx = rstd (gw - mean_N(gw) - x_hat mean_N(gw x_hat)), dweight =
    sum_M(grad x_hat), dbias = sum_M(grad)."""
    g, x, w = _f(fd, grad0), _f(fd, x0), _f(fd, w0)
    r = _rows_b(fd, _f(fd, rstd), x)
    xhat = fd.ops.mul(fd.ops.sub(x, _rows_b(fd, _f(fd, mean), x)), r)
    gw = fd.ops.mul(g, _cols_b(fd, w, x))
    inner = fd.ops.sub(fd.ops.sub(gw, _row_mean(fd, gw, x)), fd.ops.mul(xhat, _row_mean(fd, fd.ops.mul(gw, xhat), x)))
    dx = fd.ops.mul(r, inner)
    dw = fd.ops.sum(fd.ops.mul(g, xhat), [0])
    db = fd.ops.sum(g, [0])
    return [_out(fd, dx, x0), _out(fd, dw, w0), _out(fd, db, w0)]


def softmax_backward(fd, dy0, y0):
    """dx = y (dy - sum_N(dy y))."""
    dy, y = _f(fd, dy0), _f(fd, y0)
    s = _rows_b(fd, fd.ops.sum(fd.ops.mul(dy, y), [1], keepdim=True), y)
    return [_out(fd, fd.ops.mul(y, fd.ops.sub(dy, s)), y0)]


def batch_norm_outer(fd, x0, w0, b0, eps=EPS):
    """(y, mean, invstd): mean and var over M per column, y = (x - mean) invstd w + b."""
    x, w, b = _f(fd, x0), _f(fd, w0), _f(fd, b0)
    var, mean = fd.ops.var_mean(x, [0], correction=0)
    invstd = fd.ops.rsqrt(fd.ops.add(var, eps))
    xhat = fd.ops.mul(fd.ops.sub(x, _cols_b(fd, mean, x)), _cols_b(fd, invstd, x))
    y = fd.ops.add(fd.ops.mul(xhat, _cols_b(fd, w, x)), _cols_b(fd, b, x))
    return [_out(fd, y, x0), mean, invstd]


OPS = {"rms_bwd": rms_norm_backward, "ln_bwd": layer_norm_backward, "softmax_bwd": softmax_backward,
       "bn_outer": batch_norm_outer}


# ----------------------------------------------------------------------------------------------
# eager PyTorch (float math on the same inputs, outputs cast back)


def eager_rms_norm_backward(grad, x, rstd, w):
    g, xf, wf = grad.float(), x.float(), w.float()
    xhat = xf * rstd.float()
    gw = g * wf
    dx = rstd.float() * (gw - xhat * (gw * xhat).mean(-1, keepdim=True))
    return [dx.to(x.dtype), (g * xhat).sum(0).to(w.dtype)]


def eager_layer_norm_backward(grad, x, mean, rstd, w):
    n = x.shape[-1]
    dx, dw, db = torch.ops.aten.native_layer_norm_backward(
        grad.float(), x.float(), [n], mean[:, :1].float(), rstd[:, :1].float(), w.float(), w.float(),
        [True, True, True])
    return [dx.to(x.dtype), dw.to(w.dtype), db.to(w.dtype)]


def eager_softmax_backward(dy, y):
    return [torch._softmax_backward_data(dy.float(), y.float(), -1, torch.float32).to(y.dtype)]


def eager_batch_norm_outer(x, w, b, eps=EPS):
    """native_batch_norm's statistics (a batch of M, N channels); y from them as the fusion
    writes it (native_batch_norm's own y is x invstd - mean invstd: with M = 1, invstd =
    1 / sqrt(eps) amplifies that rounding past float32's tolerance)."""
    xf = x.float()
    _, mean, invstd = torch.native_batch_norm(xf, None, None, None, None, True, 0.0, eps)
    y = (xf - mean) * invstd * w.float() + b.float()
    return [y.to(x.dtype), mean, invstd]


EAGER = {"rms_bwd": eager_rms_norm_backward, "ln_bwd": eager_layer_norm_backward,
         "softmax_bwd": eager_softmax_backward, "bn_outer": eager_batch_norm_outer}


# ----------------------------------------------------------------------------------------------
# tolerances


def _scales(pattern: str, m: int, n: int) -> tuple[tuple[int, ...], tuple[float, ...]]:
    """(n, scale) per output for `reduction_tolerance`: the terms summed and their magnitude
    in the output's units (atol = 4 eps scale sqrt(n min(n, 4096)), at least the dtype's).

    rms_bwd, ln_bwd: dx's mean_N(gw x_hat) sums N terms of RMS RAND_RMS^3 RSTD_MAX / N
    (grad, w, x: `rand`; x_hat = x rstd), whose error reaches dx times rstd x_hat, at most
    RSTD_MAX^2 X_MAX; LayerNorm's mean_N(gw) adds N terms of RAND_RMS^2 / N times rstd.
    dweight = sum_M(grad x_hat): M terms of RMS RAND_RMS^2 RSTD_MAX. dbias = sum_M(grad):
    M terms of RAND_RMS.

    softmax_bwd: dx's s = sum_N(dy y) sums N terms of RMS RAND_RMS RMS(y) <= RAND_RMS /
    sqrt(N) (dy and y independent; sum y^2 <= (sum y)^2 = 1); its error reaches dx times
    y <= 1.

    bn_outer: mean sums M terms x / M (RAND_RMS / M). invstd errs relatively (a sum of
    positive terms: the dtype's rtol covers it; scale 0). y moves by the mean's error
    times invstd |w| (invstd ~ 1 / RAND_RMS, |w| <= X_MAX: scale X_MAX / M), plus var's
    relative error (M terms (x - mean)^2 / M ~ RAND_RMS^2 / M over var ~ RAND_RMS^2:
    scale 1 / M) times |x_hat w| / 2 <= (X_MAX / RAND_RMS) X_MAX / 2. (With M = 7 a
    column's invstd may reach ~6, but there 4 eps scale sqrt(M min(M, 4096)) stays far
    below the dtype's atol.)"""
    red = RAND_RMS**3 * RSTD_MAX / n * RSTD_MAX**2 * X_MAX
    if pattern == "rms_bwd":
        return (n, m), (red, RAND_RMS**2 * RSTD_MAX)
    if pattern == "ln_bwd":
        return (n, m, m), (red + RAND_RMS**2 * RSTD_MAX / n, RAND_RMS**2 * RSTD_MAX, RAND_RMS)
    if pattern == "softmax_bwd":
        return (n,), (RAND_RMS / math.sqrt(n),)
    if pattern == "bn_outer":
        y = (X_MAX + 0.5 * (X_MAX / RAND_RMS) * X_MAX) / m
        return (m, m, m), (y, RAND_RMS / m, 0.0)
    raise ValueError(pattern)


# ----------------------------------------------------------------------------------------------
# the cases


def make_case(pattern: str, m: int, n: int, dt: torch.dtype, layout: str = "contiguous") -> NormCase:
    tag = TAG[dt] if layout == "contiguous" else f"{TAG[dt]}_{layout}"
    ns, scales = _scales(pattern, m, n)
    return NormCase(f"{pattern}_{tag}_m{m}_n{n}", _inputs(pattern, m, n, dt, layout), OPS[pattern], EAGER[pattern],
                    n=ns, scale=scales, big=m * n > CPU_MAX_ELEMENTS, pattern=pattern, shape=(m, n), dtype=dt,
                    layout=layout, reduces=not (pattern == "bn_outer" and m == 1))


CASES: list[NormCase] = []
#: (pattern, dtype tag, m, n) left out for their input size
LEFT_OUT: list[tuple[str, str, int, int]] = []


def _add(pattern, m, n, dt, layout="contiguous"):
    if _input_bytes(pattern, m, n, dt) > MAX_INPUT_BYTES:
        LEFT_OUT.append((pattern, TAG[dt], m, n))
        return
    CASES.append(make_case(pattern, m, n, dt, layout))


for _p in PATTERNS:
    for _m in ROWS:
        for _n in ROW_LENGTHS:
            _add(_p, _m, _n, torch.float32)
    for _dt in HALF_DTYPES:
        for _m, _n in HALF_SHAPES:
            _add(_p, _m, _n, _dt)
    for _dt, _shapes in STAGED_SHAPES.items():
        for _m, _n in _shapes:
            _add(_p, _m, _n, _dt)
    for _layout in LAYOUTS:
        for _dt in (torch.float32, torch.bfloat16):
            for _m, _n in LAYOUT_SHAPES:
                _add(_p, _m, _n, _dt, _layout)

_names = [c.name for c in CASES]
assert len(_names) == len(set(_names)), sorted({x for x in _names if _names.count(x) > 1})
assert math.prod(LAYOUT_SHAPES[0]) <= CPU_MAX_ELEMENTS

#: the cases the CPU suite runs (M * N <= 2**16)
CPU_CASES = [c for c in CASES if not c.big]
