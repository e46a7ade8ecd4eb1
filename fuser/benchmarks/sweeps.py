"""Sweeps of the schedulers' thresholds: each times one benchmark fusion at sizes on both
sides of a heuristic constant, with the constant set to each of a few values, so that a
threshold measured on one row of one GPU is checked around it (and on another GPU) before
its comment quotes it. `python -m fuser bench --sweep NAME ...` runs them (CUDA only).

A setting is applied by setting the module constant, with fuser's in-process caches
cleared before each (segmentations and kernels are cached per input signature, and the
heuristics that read the constant run once per signature)."""
from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import torch

from . import PRODUCERS, kernel_time_after_producer
from .fusions import BACKWARD_SHAPES, SEED001_SHAPE


@dataclass(frozen=True)
class Sweep:
    """One threshold: `module.constant` set to each of `settings` (`current` is the
    shipped value) while `fusion` runs at each of `shapes`; `fixed`: (module, constant,
    value) set for the whole sweep (a choice that only matters under another one)."""

    name: str
    module: str
    constant: str
    settings: tuple[Any, ...]
    fusion: str
    shapes: tuple[tuple[int, ...], ...]
    about: str
    fixed: tuple[tuple[str, str, Any], ...] = ()
    #: None: timed over rotating inputs, none of which is in L2; "copy" or "write": each call
    #: right after a kernel rewrites the fusion's largest input, copying into it or only
    #: writing it (`kernel_time_after_producer`'s `producer`)
    producer: str | None = None
    #: with a producer: time it and the call together (`kernel_time_after_producer`'s `step`)
    step: bool = False

    def __post_init__(self) -> None:
        if self.producer is not None and self.producer not in PRODUCERS:
            raise ValueError(f"sweep {self.name!r}: producer={self.producer!r}, not one of {PRODUCERS}")
        if self.step and self.producer is None:
            raise ValueError(f"sweep {self.name!r}: step=True times a producer with each call; give producer")

    @property
    def current(self) -> Any:
        return getattr(importlib.import_module(self.module), self.constant)


#: what a sweep's heading adds for each producer
_AFTER_COPY = ", each call right after its input's producer"
_AFTER_WRITER = ", each call right after a producer that only writes its input (normal_)"
_AFTER_MATMUL = ", each call right after a matmul writes its input (a linear layer's output)"


def _timed_both(sweep: Sweep) -> tuple[Sweep, Sweep]:
    """`sweep` over rotating inputs, and as NAME_after_producer timed right after a copy
    rewrites its largest input."""
    return sweep, replace(sweep, name=f"{sweep.name}_after_producer", producer="copy", about=sweep.about + _AFTER_COPY)


def _plain_or_streaming(name: str, fusion: str, shapes: tuple[tuple[int, ...], ...], about: str,
                        producer: str | None, step: bool = False) -> Sweep:
    """A sweep of an inner-persistent kernel's cache hints, plain against evict-first."""
    return Sweep(name, "fuser.lower.reduction", "PERSISTENT_CACHE_HINTS", ("plain", "streaming"), fusion, shapes,
                 f"an inner-persistent kernel's row tensors loaded and stored plainly or evict-first{about}",
                 producer=producer, step=step)


def timer(sweep: Sweep) -> Callable[..., float | None] | None:
    """How a sweep with a producer times a call, `kernel_time_after_producer(fn, inputs)` with
    its producer and step; None for a sweep timed over rotating inputs."""
    if sweep.producer is None:
        return None
    return functools.partial(kernel_time_after_producer, producer=sweep.producer, step=sweep.step)


#: row lengths around the persistent kernels' thresholds, from one row per block to many
NORM_SHAPES = ((16384, 4096), (8192, 8192), (2048, 16384), (16384, 1024), (65536, 1024))

#: where evict-first hints lose cold ([2048, 16384]): the same row with fewer and more rows, and
#: the same bytes in shorter rows, to tell a row length from a tensor size
HINT_SHAPES = ((2048, 16384), (1024, 16384), (4096, 16384), (4096, 8192), (8192, 4096))

#: GELU's: a large, a mid-size and an L2-sized tensor
GELU_SHAPES = ((16384, 8192), (4096, 4096), (1024, 1024))

#: rows of bf16 that overflow an inner-outer kernel's registers (and one that does not)
STAGED_FIT_SHAPES = ((2048, 16384), (4096, 16384), (8192, 16384), (2048, 12288), (16384, 4096))

#: batch norm's shapes: too many rows to hold (two kernels) down to rows held by one grid
BN_SHAPES = ((16384, 4096), (8192, 8192), (2048, 16384), (1024, 1000), (128, 1000))

SWEEPS: tuple[Sweep, ...] = (
    Sweep("welford_persistent_max", "fuser.scheduler.reduction", "WELFORD_PERSISTENT_MAX", (0, 1 << 30),
          "var_mean_bf16", tuple(((1 << 26) // c, c) for c in (2048, 4096, 6144, 8192, 8200, 10240, 12288, 16384)),
          "longest row var_mean holds in registers (0: every row Welford; 2^30: every row held)"),
    Sweep("welford_persistent_max_fp32", "fuser.scheduler.reduction", "WELFORD_PERSISTENT_MAX", (0, 1 << 30),
          "var_mean_fp32", tuple(((1 << 25) // c, c) for c in (2048, 4096, 6144, 8192, 8200, 10240, 12288, 16384)),
          "the same over float32 rows"),
    Sweep("inner_outer_wide_max_outer", "fuser.scheduler.normalization", "INNER_OUTER_WIDE_MAX_OUTER", (0, 2, 8),
          "layernorm_bwd_bf16", ((16384, 1024), (16384, 2048), (16384, 4096), (8192, 8192), (4096, 16384)),
          "LayerNorm backward (2 outer reductions): 2-byte rows in 4 vectors a thread up to this many outer "
          "reductions (0: never; 8: always)"),
    Sweep("inner_outer_wide_max_outer_rms", "fuser.scheduler.normalization", "INNER_OUTER_WIDE_MAX_OUTER", (0, 2),
          "rmsnorm_bwd_bf16", ((16384, 1024), (16384, 2048), (16384, 4096), (8192, 8192)),
          "RMSNorm backward (1 outer reduction)"),
    *(Sweep(f"hoist_fixed_{f}", "fuser.lower.row_loop", "HOIST_FIXED", (False, True), f,
            ((16384, 4096), (8192, 8192), (16384, 3072), (4096, 16384)),
            "a row loop's values of the inputs it loads once (weights widened to float) computed once, "
            "before the loop") for f in ("rmsnorm_bwd_bf16", "layernorm_bwd_bf16")),
    *(Sweep(f"inner_outer_wide_full_blocks_{f}", "fuser.scheduler.normalization", "INNER_OUTER_WIDE_FULL_BLOCKS",
            (False, True), f, ((16384, 1024), (16384, 1536), (16384, 2048), (32768, 2048), (16384, 3072)),
            "2-byte rows in 4 vectors a thread only where four rows of them fill a block of 512 threads (else "
            "the plain layout)") for f in ("rmsnorm_bwd_bf16", "layernorm_bwd_bf16")),
    Sweep("outer_blocks_per_sm", "fuser.scheduler.reduction", "OUTER_BLOCKS_PER_SM", (1, 2, 3, 4, 6),
          "sum_outer_bf16", ((16384, 4096), (8192, 8192), (2048, 16384), (65536, 1024), (4096, 2048), (16384, 1024)),
          "blocks per SM an outer reduction's grid aims for (sharing rows, or narrow blocks)"),
    # the anchors' outer sum (fp32 [16384, 8192]) ran at 96.6% of copy on an H200 where
    # nvFuser reached 100.8 (97.0 against 98.8 on an H100)
    *_timed_both(Sweep("outer_blocks_per_sm_fp32", "fuser.scheduler.reduction", "OUTER_BLOCKS_PER_SM", (2, 3, 4, 8),
                      "sum_outer_fp32", ((16384, 8192), (65536, 1024), (2048, 16384)), "the same over float32 rows")),
    *_timed_both(Sweep("outer_bdx_fp32", "fuser.scheduler.reduction", "OUTER_BDX", (16, 32, 64), "sum_outer_fp32",
                      ((16384, 8192), (65536, 1024), (2048, 16384)),
                      "threads across the columns of an outer reduction's block")),
    # ... and the bytes an SM has in flight: rows a thread loads per step, threads a block
    *(s for f in ("sum_outer_fp32", "sum_outer_bf16") for s in _timed_both(
        Sweep(f"outer_rows_unroll_{f}", "fuser.scheduler.reduction", "OUTER_ROWS_UNROLL", (2, 4, 8), f,
              ((16384, 8192), (65536, 1024), (2048, 16384), (16384, 4096), (16384, 1024)),
              "rows an outer reduction's thread loads per step"))),
    *_timed_both(Sweep("outer_block_threads_fp32", "fuser.scheduler.reduction", "OUTER_BLOCK_THREADS",
                      (256, 512, 1024), "sum_outer_fp32", ((16384, 8192), (65536, 1024), (2048, 16384), (16384, 4096)),
                      "threads of an outer reduction's block")),
    Sweep("outer_blocks_per_sm_wide_fp32_after_producer", "fuser.scheduler.reduction", "OUTER_BLOCKS_PER_SM",
          (1, 2, 3), "sum_outer_fp32", ((16384, 8192), (65536, 1024), (2048, 16384), (16384, 4096)),
          "blocks per SM of 1024 threads loading 8 rows a step (nvFuser's outer plan: one such block an SM)",
          fixed=(("fuser.scheduler.reduction", "OUTER_ROWS_UNROLL", 8),
                 ("fuser.scheduler.reduction", "OUTER_BLOCK_THREADS", 1024)), producer="copy"),
    # ... and nvFuser's plan itself where the column blocks come near the SM count: no grid
    # split (its first run has no arrival counters to zero: 1.95 us of fuser's 130.4 on an
    # H200 at fp32 [16384, 8192]), each block's whole rows, 1024 threads loading 8 rows a step
    # (fp32: bf16 columns this wide take narrow blocks instead; [16384, 4096] takes neither)
    *_timed_both(Sweep("outer_whole_columns_fp32", "fuser.scheduler.reduction", "OUTER_WHOLE_COLUMNS",
                       (None, 0.9, 0.5), "sum_outer_fp32",
                       ((16384, 8192), (4096, 8192), (32768, 8192), (16384, 12288), (16384, 4096)),
                       "column blocks (a fraction of the SMs) from which an outer reduction's blocks take their "
                       "whole rows (None: never)")),
    Sweep("few_rows_elements", "fuser.scheduler.reduction", "FEW_ROWS_ELEMENTS", (4, 8, 16, 32),
          "softmax_fwd_bf16", ((32, 1000), (64, 1000), (128, 1000), (132, 2048), (64, 4096), (128, 8192)),
          "elements of its row a thread holds where rows are too few to give every SM a block"),
    # the full bench (H100, 2026-12-06): sum fp32 [2048, 16384] took 50.6 µs (87.5% of copy)
    # with 512 threads a row, two blocks an SM, where torch.compile took 44.2; bf16 rows of
    # the same bytes, 256 threads and five blocks an SM, reach 97.5%
    *_timed_both(Sweep("inner_max_bdx_sum_inner_fp32", "fuser.scheduler.reduction", "MAX_BDX", (128, 256, 512),
                       "sum_inner_fp32", ((2048, 16384), (1024, 32768), (4096, 16384), (512, 65536), (16384, 8192)),
                       "most threads along the row of an inner reduction (longer rows take serial steps)")),
    *(Sweep(f"welford_corrected_mean_{f}", "fuser.lower.reduction", "WELFORD_CORRECTED_MEAN", (False, True), f,
            shapes, "var_mean also sums the deviations from sum / n and corrects the mean and M2 by them "
            "(rows of equal values exact)")
      for f, shapes in (("layernorm_fwd_bf16", ((16384, 4096), (2048, 16384), (16384, 1024))),
                        ("layernorm_fwd_fp32", ((16384, 4096), (2048, 16384))),
                        ("var_mean_bf16", ((16384, 4096), (2048, 16384), (1024, 32768), (16384, 1024))),
                        ("var_mean_fp32", ((16384, 4096), (1024, 32768))))),
    # bf16 rows take 8 elements a vector: MAX_BDX binds only from rows of 32768
    Sweep("inner_max_bdx_sum_inner_bf16", "fuser.scheduler.reduction", "MAX_BDX", (128, 256, 512),
          "sum_inner_bf16", ((1024, 32768), (2048, 32768), (512, 65536), (256, 131072), (8192, 16384)),
          "most threads along the row of an inner reduction (longer rows take serial steps)"),
    *(Sweep(f"persistent_row_loop_{f}", "fuser.scheduler.normalization", "PERSISTENT_ROW_LOOP",
            ("never", "weights", "always"), f, NORM_SHAPES,
            "inner-persistent blocks take rows in turn (a grid of resident blocks): never, where a weight "
            "spans the columns only, always")
      for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16", "layernorm_fwd_fp32")),
    *(Sweep(f"persistent_late_loads_{f}", "fuser.scheduler.normalization", "PERSISTENT_LATE_LOADS", (False, True),
            f, NORM_SHAPES, "inner-persistent kernels load each input at the first pass that reads it (weights "
            "after the reductions) and aim their occupancy at what they hold across the reductions")
      for f in ("layernorm_fwd_bf16", "rmsnorm_fwd_bf16", "layernorm_fwd_fp32", "rmsnorm_fwd_fp32",
                "dropout_add_layernorm_fwd_bf16", "softmax_fwd_bf16")),
    *(Sweep(f"persistent_late_loads_few_blocks_{f}", "fuser.scheduler.normalization", "LATE_LOADS_FEW_BLOCKS",
            (0, 2), f, ((2048, 16384), (4096, 16384), (4096, 12288), (8192, 8192)),
            "inner-persistent kernels also load late where loading early leaves at most this many blocks an SM")
      for f in ("layernorm_fwd_bf16", "rmsnorm_fwd_bf16", "layernorm_fwd_fp32", "rmsnorm_fwd_fp32")),
    # (fp32 rows of 24576-32768 and bf16 ones of 49152-65536 beside a weight, and fewer rows
    # than SMs of dropout + add + LayerNorm fp32: more than one block of 1024 threads holds
    # loading early)
    *(Sweep(f"persistent_late_loads_over_registers_{f}", "fuser.scheduler.normalization",
            "LATE_LOADS_OVER_REGISTERS", (False, True), f, shapes,
            "inner-persistent kernels also load late where the inputs loaded early need more registers than "
            "one block's threads can have")
      for f, shapes in (("layernorm_fwd_fp32", ((1024, 32768), (4096, 32768), (100, 32768), (2048, 24576))),
                        ("rmsnorm_fwd_fp32", ((1024, 32768), (4096, 32768), (100, 32768))),
                        ("layernorm_fwd_bf16", ((256, 49152), (2048, 49152), (128, 65536))),
                        ("dropout_add_layernorm_fwd_fp32", ((100, 16384), (50, 16384), (100, 32768))))),
    *(Sweep(f"persistent_cap_live_{f}", "fuser.scheduler.normalization", "PERSISTENT_CAP_LIVE", (False, True), f,
            NORM_SHAPES, "an inner-persistent kernel's register cap counts what it keeps live across each reduction "
            "(softmax's exp), not only the inputs it loads at the start")
      for f in ("softmax_fwd_bf16", "dropout_add_layernorm_fwd_bf16")),
    *(Sweep(f"persistent_wide_{f}", "fuser.scheduler.normalization", "PERSISTENT_WIDE_ABOVE", (0.0, 0.9, 100.0),
            f, ((16384, 4096), (32768, 2048), (65536, 1024), (16384, 1024)),
            "issue share above which an inner-persistent thread holds twice PERSISTENT_ELEMENTS of its row "
            "(0: always; 100: never)")
      for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16", "layernorm_fwd_fp32")),
    # nvFuser's inner-persistent choices (its normalization_inner heuristic): evict-first
    # row loads and stores, a row a block, a register cap aimed at 28-32 warps an SM
    # (the backward fusions' inner-persistent and inner-outer kernels take the same hints)
    *(Sweep(f"persistent_cache_hints_{f}", "fuser.lower.reduction", "PERSISTENT_CACHE_HINTS",
            ("plain", "streaming", "stores", "loads"), f, shapes, "an inner-persistent kernel's row tensors loaded "
            "and stored plainly, evict-first (ld.global.cs / st.global.cs), or only stored or only loaded evict-first")
      for f, shapes in (*((f, NORM_SHAPES) for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16",
                                                       "layernorm_fwd_fp32")),
                        *((f, BACKWARD_SHAPES) for f in ("rmsnorm_bwd_bf16", "layernorm_bwd_bf16", "softmax_bwd_bf16")),
                        ("seed001_rmsnorm_bwd_bf16", (SEED001_SHAPE,)))),
    # ... timed right after a copy rewrites the input, as the anchors' first run (where
    # nvFuser, evict-first throughout, leads the forward norms by 2-3% on an H100), with the
    # rows from the end (fuser's order) and in order (nvFuser's: its loads and stores both
    # evict-first, the input lines its producer left in L2, spread over the whole input and
    # denser towards its end (ncu, H100, after torch.randn), survive until it reaches them);
    # and after a producer that only writes the input, as torch.randn made the anchors'
    # (on that first run both hints together won 3-5% on an H100, and neither alone did)
    *(Sweep(f"persistent_cache_hints{when}_{f}", "fuser.lower.reduction",
            "PERSISTENT_CACHE_HINTS", ("plain", "streaming", "stores", "loads"), f, NORM_SHAPES,
            f"the same (or only loaded evict-first){about}", fixed=fixed, producer=producer)
      for when, about, fixed, producer in (
          ("_after_producer", _AFTER_COPY, (), "copy"),
          ("_in_order_after_producer", ", rows in order (BLOCKS_FROM_END off)" + _AFTER_COPY,
           (("fuser.lower.kir", "BLOCKS_FROM_END", False),), "copy"),
          ("_after_writer", _AFTER_WRITER, (), "write"))
      for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16")),
    # ... and the producer timed with each call: evict-first may only leave the producer's
    # dirty lines (which some kernel must write back) to the next producer, which the call's
    # own time does not see
    *(_plain_or_streaming(f"persistent_cache_hints_step{when}_{f}", f, NORM_SHAPES, about, producer, step=True)
      for when, about, producer in (("_after_writer", _AFTER_WRITER, "write"), ("_after_producer", _AFTER_COPY, "copy"))
      for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16")),
    # ... and after a matmul writes the input, as a norm after a projection reads it (the
    # copy case for PERSISTENT_CACHE_HINTS's choice of plain rows is a guess for that)
    *(_plain_or_streaming(f"persistent_cache_hints_after_matmul_{f}", f, NORM_SHAPES, _AFTER_MATMUL, "matmul")
      for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16")),
    # ... cold (where streaming loses at [2048, 16384]) and after a writer (where it wins), at
    # shapes that tell a row length from a tensor's size; RMSNorm (a weight) and softmax
    # (none) stand for the forward norms, which the other sweeps found alike
    *(_plain_or_streaming(f"persistent_cache_hints_sizes{when}_{f}", f, HINT_SHAPES, about, producer)
      for when, about, producer in (("", "", None), ("_after_writer", _AFTER_WRITER, "write"))
      for f in ("rmsnorm_fwd_bf16", "softmax_fwd_bf16")),
    *_timed_both(Sweep("pointwise_stream_stores", "fuser.lower.pointwise", "POINTWISE_STREAM_STORES", (False, True),
                      "gelu_tanh_bf16", GELU_SHAPES,
                      "a pointwise kernel's vector stores plain or evict-first (st.global.cs)")),
    *_timed_both(Sweep("pointwise_stream_loads", "fuser.lower.pointwise", "POINTWISE_STREAM_LOADS", (False, True),
                      "gelu_tanh_bf16", GELU_SHAPES,
                      "a pointwise kernel's inputs read once loaded plainly or evict-first (ld.global.cs)")),
    # near issue-bound on an H200 (SASS, bf16 [16384, 4096] softmax: 422 instructions a
    # thread's row, 370 with ex2.approx; at 8 warps a row and 124 rows an SM, 53-60 us of
    # issue at 1.98-1.75 GHz against 63 us to move the bytes)
    *_timed_both(Sweep("approx_exp_softmax_fwd_bf16", "fuser.preseg.approx_exp", "ENABLED", (False, True),
                       "softmax_fwd_bf16", NORM_SHAPES,
                       "exps reaching only narrow outputs computed by expf or by ex2.approx (the opt-in pass)")),
    *_timed_both(Sweep("pointwise_big_block", "fuser.scheduler.pointwise", "BIG_BLOCK", (128, 256, 512),
                      "gelu_tanh_bf16", GELU_SHAPES,
                      "threads of a pointwise block once there are several waves of blocks")),
    *(Sweep(f"persistent_block_threads_{f}", "fuser.scheduler.normalization", "PERSISTENT_BLOCK_THREADS",
            (128, 256, 512), f, NORM_SHAPES, "threads of an inner-persistent block (short rows share one)")
      for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16")),
    *(Sweep(f"persistent_max_warps_{f}", "fuser.scheduler.normalization", "PERSISTENT_MAX_WARPS", (0, 32, 48),
            f, NORM_SHAPES, "most warps per SM an inner-persistent kernel's register cap aims at (0: as many as "
            "its registers allow)")
      for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16")),
    # bounds checks dropped where the tiles are exact: 8-25% of the H200 plans'
    # instructions (bf16 [16384, 4096] SASS: RMSNorm 200 -> 151, LayerNorm 679 -> 622)
    *(s for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16", "softmax_fwd_bf16") for s in _timed_both(
        Sweep(f"persistent_exact_tiles_{f}", "fuser.scheduler.normalization", "EXACT_TILES", (False, True), f,
              NORM_SHAPES, "an inner-persistent kernel whose tiles fit its rows exactly checks bounds or not"))),
    # the fp32 norms behind torch.compile on an H200 (RMSNorm [2048, 16384] 73.4 against
    # 68.4 us, LayerNorm [8192, 8192] 132.8 against 131.5): their rows hold 128-192 bytes a
    # thread in blocks of 1024 threads, one block an SM
    *(Sweep(f"persistent_max_held_{f}", "fuser.scheduler.normalization", "MAX_HELD_BYTES", (192, 256, 512), f,
            ((2048, 16384), (4096, 16384), (8192, 8192), (16384, 4096)),
            "bytes of held inputs a thread of an inner-persistent row takes before the row takes more threads")
      for f in ("rmsnorm_fwd_fp32", "layernorm_fwd_fp32")),
    *(Sweep(f"outer_welford_online_{f}", "fuser.lower.reduction", "OUTER_WELFORD_ONLINE", (False, True), f,
            BN_SHAPES, "an outer Welford reduction's lanes updated value by value (sharing the count's "
            "reciprocal), or by tiles (per step the lanes' sums, their means by one shared reciprocal, squared "
            "deviations in a second pass, Chan's merge)")
      for f in ("batchnorm_fwd_bf16", "batchnorm_fwd_fp32")),
    *(Sweep(f"outer_narrow_unroll_{f}", "fuser.scheduler.reduction", "OUTER_NARROW_UNROLL", (False, True), f,
            BN_SHAPES, "an outer reduction loads twice the rows per step where its input vectors are under 16 "
            "bytes (the width set by wider float outputs)")
      for f in ("batchnorm_fwd_bf16",)),
    *(Sweep(f"outer_one_block_{f}", "fuser.scheduler.normalization", "OUTER_ONE_BLOCK", (False, True), f,
            ((128, 1000), (256, 1000), (64, 4096), (200, 333), (1024, 1000)),
            "an outer-persistent kernel whose rows fit one block gives each column group one block (no grid "
            "barrier), or shares the rows among blocks that synchronise the grid")
      for f in ("batchnorm_fwd_bf16", "batchnorm_fwd_fp32")),
    *(Sweep(f"outer_one_block_short_vectors_{f}", "fuser.scheduler.normalization", "OUTER_ONE_BLOCK_SHORT_VECTORS",
            (False, True), f, ((128, 1000), (256, 1000), (64, 1000), (128, 512), (64, 4096), (200, 333),
                               (128, 4096)),
            "a one-block outer-persistent kernel takes shorter vectors while twice its column groups fit one wave")
      for f in ("batchnorm_fwd_bf16", "batchnorm_fwd_fp32")),
    *(Sweep(f"pointwise_rows_{f}", "fuser.scheduler.pointwise", "BREAK_ALONG_SHARE", (float("inf"), 1.0), f,
            ((16384, 4096), (8192, 8192), (2048, 16384), (2048, 1000), (128, 1000)),
            "a pointwise kernel with vectors goes 2D, each thread taking several rows, where its inputs along the "
            "rows weigh more than this many times the spanning tensors per element (inf: never)")
      for f in ("batchnorm_fwd_bf16", "batchnorm_fwd_fp32")),
    *(Sweep(f"inner_outer_few_rows_apart_{f}", "fuser.scheduler.normalization", "INNER_OUTER_FEW_ROWS_APART",
            (False, True), f, ((128, 1000), (256, 4096), (512, 1000), (512, 4096), (1024, 1000), (2048, 4096)),
            "reductions along and across the rows run as separate kernels where one inner-outer kernel would "
            "have fewer blocks than SMs")
      for f in ("rmsnorm_bwd_bf16", "layernorm_bwd_bf16", "layernorm_bwd_fp32")),
    # seed 001 (one inner-outer kernel, four reductions across rows, 256 threads a block),
    # whose sizes its definition fixes
    Sweep("seed001_inner_outer_threads", "fuser.scheduler.normalization", "INNER_OUTER_BLOCK_THREADS",
          (256, 512, 1024), "seed001_rmsnorm_bwd_bf16", (SEED001_SHAPE,),
          "threads of an inner-outer block with at most INNER_OUTER_WIDE_MAX_OUTER reductions across rows "
          "(half as many with more, as seed 001 has)"),
    *(Sweep(f"inner_outer_keep_{f}", "fuser.scheduler.normalization", "INNER_OUTER_KEEP_REGISTERS",
            (0, 32, 128), f, shapes, "registers per thread an inner-outer kernel may spend keeping its first "
            "pass's values for the pass after the row reductions (instead of recomputing them)")
      for f, shapes in (("seed001_rmsnorm_bwd_bf16", (SEED001_SHAPE,)),
                        ("layernorm_bwd_bf16", ((16384, 4096), (2048, 1000))),
                        ("rmsnorm_bwd_bf16", ((16384, 4096), (2048, 4096))),
                        ("rmsnorm_bwd_fp32", ((16384, 4096), (2048, 4096))),
                        ("layernorm_bwd_fp32", ((16384, 4096), (2048, 4096))))),
    *(Sweep(f"kept_pass_launder_{f}", "fuser.lower.reduction", "KEPT_PASS_LAUNDER", (True, False), f, shapes,
            "a kernel keeping its first pass's values still launders its loaded inputs before later passes "
            "(weights then converted again every row)")
      for f, shapes in (("seed001_rmsnorm_bwd_bf16", (SEED001_SHAPE,)),
                        ("layernorm_bwd_bf16", ((2048, 1000), (1024, 2048))),
                        ("rmsnorm_bwd_fp32", ((16384, 4096), (2048, 4096))))),
    Sweep("seed001_stages", "fuser.scheduler.normalization", "STAGES", (2, 3, 4), "seed001_rmsnorm_bwd_bf16",
          (SEED001_SHAPE,), "groups of rows in shared memory at once (one being reduced, the rest in flight)"),
    *(Sweep(f"inner_outer_staged_fit_{f}", "fuser.scheduler.normalization", "INNER_OUTER_STAGED_FIT", (False, True),
            f, shapes, "rows too long for registers whole run as one inner-outer kernel holding them in shared "
            "memory stages (or as a reduction across rows beside an inner-persistent kernel)")
      for f, shapes in (("rmsnorm_bwd_bf16", STAGED_FIT_SHAPES), ("layernorm_bwd_bf16", STAGED_FIT_SHAPES),
                        ("layernorm_bwd_fp32", ((8192, 8192), (4096, 8192), (16384, 7000), (16384, 4096))))),
    *(Sweep(f"one_row_tile_combine_{f}", "fuser.lower.inner_outer", "ONE_ROW_TILE_COMBINE", (False, True), f,
            ((4096, 12288), (4096, 10240), (2048, 9216), (8192, 8192)),
            "an inner-outer block of one thread row calls the (empty) tile combine of its partials, which "
            "changes nvcc's register choice")
      for f in ("rmsnorm_bwd_bf16", "layernorm_bwd_bf16")),
    Sweep("seed001_stage_rows", "fuser.lower.inner_outer", "STAGE_ROWS", ("narrow", "none", "all"),
          "seed001_rmsnorm_bwd_bf16", (SEED001_SHAPE,),
          "which inner-outer rows are copied ahead into shared memory (cp.async)"),
    # backward norms on an H200 run at 80% of copy where nvFuser reaches 86% (anchors, RMSNorm
    # bf16 [16384, 4096]) with the H100's plan: 512 threads, one block an SM, two 64 KB stages
    *(Sweep(f"inner_outer_stages_{f}", "fuser.scheduler.normalization", "STAGES", (2, 3), f,
            ((16384, 4096), (8192, 8192), (2048, 16384)),
            "groups of rows an inner-outer kernel holds in shared memory at once (one reduced, the rest in flight)")
      for f in ("rmsnorm_bwd_bf16", "layernorm_bwd_bf16")),
    *(Sweep(f"inner_outer_sm_threads_{f}", "fuser.scheduler.normalization", "INNER_OUTER_SM_THREADS",
            (0, 768, 1024), f, shapes, "threads per SM an inner-outer kernel is compiled to fit (fewer registers "
            "a thread, more blocks an SM; 0: the compiler's choice)")
      for f, shapes in (("seed001_rmsnorm_bwd_bf16", (SEED001_SHAPE,)),
                        ("rmsnorm_bwd_bf16", ((16384, 4096), (8192, 8192), (2048, 16384), (16384, 1024))),
                        ("layernorm_bwd_bf16", ((16384, 4096), (8192, 8192), (16384, 1024))))),
    *(Sweep(f"inner_outer_threads_{f}", "fuser.scheduler.normalization", "INNER_OUTER_BLOCK_THREADS",
            (256, 512, 1024), f, ((16384, 4096), (8192, 8192), (2048, 16384)),
            "threads of an inner-outer block (rows over threadIdx.y)")
      for f in ("rmsnorm_bwd_bf16", "layernorm_bwd_bf16")),
    # nvFuser's plan for RMSNorm backward bf16 [16384, 4096] (its dump, H100): 128 threads a
    # block holding 32 elements each, 4 blocks an SM, rows staged in shared memory
    *(Sweep(f"inner_outer_small_blocks_{f}", "fuser.scheduler.normalization", "INNER_OUTER_BLOCK_THREADS",
            (128, 256, 512), f, ((16384, 4096), (8192, 8192), (16384, 1024)),
            "threads of an inner-outer block, compiled for 512 threads an SM (4 blocks of 128)",
            fixed=(("fuser.scheduler.normalization", "INNER_OUTER_SM_THREADS", 512),))
      for f in ("rmsnorm_bwd_bf16", "layernorm_bwd_bf16")),
    *(Sweep(f"blocks_from_end_{f}", "fuser.lower.kir", "BLOCKS_FROM_END", (False, True), f, shapes,
            "blocks take their data from the end, so a kernel reads first what its input's producer wrote "
            "last (timed right after a copy rewrites the input)", producer="copy")
      for f, shapes in (("rmsnorm_fwd_bf16", NORM_SHAPES), ("layernorm_fwd_bf16", NORM_SHAPES),
                        ("softmax_fwd_bf16", NORM_SHAPES), ("gelu_tanh_bf16", ((16384, 8192), (4096, 4096))),
                        ("sum_outer_fp32", ((16384, 8192), (65536, 1024))),
                        ("rmsnorm_bwd_bf16", ((16384, 4096),)))),
    *(Sweep(f"row_loop_loads_{f}", "fuser.lower.row_loop", "ROW_LOOP_LOADS", ("direct", "registers", "staged"),
            f, NORM_SHAPES, "how a row loop loads each group of rows: in its pass, a group ahead into "
            "registers, a group ahead into shared memory (cp.async)",
            fixed=(("fuser.scheduler.normalization", "PERSISTENT_ROW_LOOP", "always"),))
      for f in ("rmsnorm_fwd_bf16", "layernorm_fwd_bf16")),
    # (fp32 rows of 16384 take one block of 1024 threads an SM, bf16 ones two of 512)
    *(Sweep(f"row_loop_staged_few_blocks_{f}", "fuser.scheduler.normalization", "ROW_LOOP_STAGED_FEW_BLOCKS",
            (0, few), f, ((2048, 16384), (4096, 16384), (8192, 8192), (4096, 12288)),
            "inner-persistent kernels that fit at most this many blocks an SM take rows in turn, the next "
            "group staged in shared memory while the current one reduces (0: never)")
      for f, few in (("rmsnorm_fwd_fp32", 1), ("layernorm_fwd_fp32", 1), ("softmax_fwd_fp32", 2),
                     ("rmsnorm_fwd_bf16", 2), ("layernorm_fwd_bf16", 2), ("softmax_fwd_bf16", 2))),
    # (fp32 rows of 12288-16384 take one block of 1024 threads an SM, bf16 ones of 16384 two
    # of 512 and of 32768 one; [16384, 4096] four or more)
    *(Sweep(f"welford_one_reduction_{f}", "fuser.lower.reduction", "WELFORD_ONE_REDUCTION_BLOCKS", (0, 1, 2, 64), f,
            ((1024, 32768), (2048, 16384), (4096, 12288), (8192, 8192), (16384, 4096)),
            "inner-persistent kernels that fit at most this many blocks an SM reduce each thread's Welford "
            "triple over the block in one reduction, not the row's sum and squared deviations in two (0: never)")
      for f in ("layernorm_fwd_fp32", "layernorm_fwd_bf16")),
)

_BY_NAME = {s.name: s for s in SWEEPS}


def by_name(name: str) -> Sweep:
    """The sweep called `name`; a KeyError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"no sweep {name!r}; known: {', '.join(_BY_NAME)}") from None


def run(sweep: Sweep, time_one: Callable[[Any, tuple[int, ...]], float | None],
        reset: Callable[[], Any]) -> list[tuple[tuple[int, ...], dict[Any, float | None]]]:
    """Per shape, the time (µs; None where it failed) at each setting: `time_one(fusion,
    shape)` under each setting, `reset()` (fuser's caches) before each. The constant is
    restored afterwards."""
    from .fusions import by_name as fusion

    mod = importlib.import_module(sweep.module)
    shipped = getattr(mod, sweep.constant)
    fixed = [(importlib.import_module(m), c, v) for m, c, v in sweep.fixed]
    kept = [(m, c, getattr(m, c)) for m, c, _ in fixed]
    f = fusion(sweep.fusion)
    rows = []
    try:
        for m, c, v in fixed:
            setattr(m, c, v)
        for shape in sweep.shapes:
            got: dict[Any, float | None] = {}
            for value in sweep.settings:
                setattr(mod, sweep.constant, value)
                reset()
                got[value] = time_one(f, shape)
            rows.append((shape, got))
    finally:
        setattr(mod, sweep.constant, shipped)
        for m, c, v in kept:
            setattr(m, c, v)
        reset()
    return rows


def table(sweep: Sweep, rows: Sequence[tuple[tuple[int, ...], dict[Any, float | None]]], device: str) -> str:
    """The sweep's results: a row per shape, a column per setting, the best marked."""
    head = ["shape"] + [f"{sweep.constant}={v}" + (" (now)" if v == sweep.current else "") for v in sweep.settings]
    body = []
    for shape, got in rows:
        valid = {v: t for v, t in got.items() if t is not None}
        best = min(valid, key=valid.get) if valid else None
        body.append(["x".join(map(str, shape))] + [
            "n/a" if got[v] is None else f"{got[v]:.1f}" + (" <" if v == best else "") for v in sweep.settings])
    widths = [max(len(r[c]) for r in [head, *body]) for c in range(len(head))]
    fixed = "".join(f"; {c}={v!r}" for _, c, v in sweep.fixed)
    per = "producer + call" if sweep.step else "call"
    lines = [f"sweep {sweep.name} on {device}: {sweep.fusion}, µs per {per}; {sweep.about}{fixed}"]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head, *body]]
    return "\n".join(lines)


def device_name() -> str:
    """The current CUDA device's name (what a sweep ran on)."""
    return torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
