"""Generated transpose kernels: a segment whose inputs and outputs disagree on their
innermost axis, tiled through shared memory (`fuser.scheduler.transpose`,
`fuser.lower.transpose`)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch

from fuser.ir import Fusion
from fuser.lower.errors import NotLowerable
from fuser.lower.transpose import lower_transpose
from fuser.scheduler import FusionAnalysis
from fuser.scheduler import transpose as tr

from .info import runtime_info

if TYPE_CHECKING:
    from .kernels import GeneratedKernel


def prepare_transpose(fusion: Fusion, args: Sequence[Any], device: torch.device | None = None) -> GeneratedKernel:
    """Schedule and lower a transpose segment for the call whose inputs are `args` (torch
    tensors on any device, meta included; scalars) on `device` (default: the arguments').
    Raises NotLowerable only for segments the transpose scheduler rejects as such (they
    then run on the reference executor)."""
    # here, not at the top: fuser.runtime.kernels imports this module for its table
    from .kernels import _launch_plan

    fusion, _ = fusion.clone()  # scheduling transforms the copy; the segment stays as defined
    info = runtime_info(fusion, args, device=device)
    sub = FusionAnalysis(fusion, info).whole()
    # only what the kernel cannot compute (the segmenter's `reject_reason` ruled it out), not
    # where tiles would not pay off: the segmenter judged this segment within the complete
    # fusion, where it can weigh its layout groups differently (see `layout`)
    why = tr.lowering_reason(sub)
    lay = tr.layout(sub, fallback=True) if why is None else why
    if isinstance(lay, str):
        raise NotLowerable(f"a transpose kernel cannot compute this segment: {lay}")
    params = tr.heuristics(sub, lay)
    vec_a, vec_b = tr.vector_tensors(sub, lay, params)
    tr.schedule(fusion, lay, params)
    kernel = lower_transpose(fusion, lay, params, sub, vec_a, vec_b)
    ext_a, ext_b = info.extent(lay.axis_a), info.extent(lay.axis_b)
    tiles = -(-ext_a // params.tile_a) * -(-ext_b // params.tile_b)
    grid = (tiles, min(tr.batch_size(info, lay), tr.MAX_GRID_Y))
    return _launch_plan(fusion, kernel, params, info, args, grid, (params.threads, 1))
