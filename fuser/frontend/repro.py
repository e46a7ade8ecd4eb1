"""Printing a definition as Python, in the repro format of nvFuser's issue reports."""
from __future__ import annotations

from typing import Any, Sequence

import torch

from .records import Record


def definition_text(records: Sequence[Record], fusion_id: int) -> str:
    """`def nvfuser_fusion_idN(fd : FusionDefinition) -> None :` and one line per record."""
    lines = [f"def nvfuser_fusion_id{fusion_id}(fd : FusionDefinition) -> None :"]
    lines += [f"    {r.python()}" for r in records]
    return "\n".join(lines) + "\n"


def input_text(x: Any) -> str:
    """A Python expression building a fresh input like `x` (same dtype, shape, strides, device)."""
    if not isinstance(x, torch.Tensor):
        return repr(x)
    dev = f"'{x.device}'"
    dtype = str(x.dtype)
    if x.ndim == 0:
        storage = 1
    else:
        storage = 1 + sum((s - 1) * st for s, st in zip(x.shape, x.stride()) if s > 0)
        if 0 in x.shape:
            storage = 0
    size = tuple(x.shape)
    stride = tuple(x.stride())
    if x.dtype.is_floating_point or x.dtype.is_complex:
        if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
            base = f"torch.randn(({storage},), dtype=torch.float32, device={dev}).to({dtype})"
        else:
            base = f"torch.randn(({storage},), dtype={dtype}, device={dev})"
    elif x.dtype is torch.bool:
        base = f"torch.randint(0, 2, ({storage},), dtype={dtype}, device={dev})"
    else:
        base = f"torch.randint(0, 10, ({storage},), dtype={dtype}, device={dev})"
    if x.ndim == 0:
        return f"{base}.reshape(())"
    return f"{base}.as_strided({size}, {stride})"


def repro_script(records: Sequence[Record], fusion_id: int, inputs: Sequence[Any] | None) -> str:
    """A runnable script: imports, the definition, inputs like `inputs`, and the execute call."""
    from fuser import __version__

    head = [
        f"# fuser version: {__version__}",
        f"# torch version: {torch.__version__}",
        "import torch",
        "from fuser import FusionDefinition, DataType",
        "",
        definition_text(records, fusion_id),
        "with FusionDefinition() as fd:",
        f"    nvfuser_fusion_id{fusion_id}(fd)",
        "",
    ]
    if inputs is None:
        return "\n".join(head)
    body = ["inputs = ["] + [f"    {input_text(x)}," for x in inputs] + ["]", "fd.execute(inputs)", ""]
    return "\n".join(head + body)
