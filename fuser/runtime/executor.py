"""Running a defined fusion: bind and validate inputs, evaluate, return outputs."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .binding import bind_inputs
from .reference import run_reference


def run(entry: Any, inputs: Sequence[Any], *, device: Any = None) -> list[torch.Tensor]:
    """Execute a cached fusion on `inputs`: aliased outputs are written into their inputs
    and left out of the returned list."""
    fusion = entry.fusion
    binding = bind_inputs(fusion, inputs, device=torch.device(device) if device is not None else None)
    outs = run_reference(fusion, binding.tensors, binding=binding)
    results = []
    for val, out in zip(fusion.outputs, outs):
        alias = fusion.output_aliases.get(val)
        if alias is None:
            results.append(out)
        else:
            binding.tensors[fusion.inputs.index(alias)].copy_(out)
    return results
