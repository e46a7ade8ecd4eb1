"""Printing a definition as Python exactly as nvFuser's `FusionDefinition` prints it, and
the repro scripts built around it (nvFuser's `repro_script_for` layout)."""
from __future__ import annotations

import re
from typing import Any, Sequence

import torch

from .records import Record


def definition_text(records: Sequence[Record], fusion_id: int | None) -> str:
    """`str(fd)`: a newline, `def nvfuser_fusion_idN(fd : FusionDefinition) -> None :`, one
    indented line per record not defined inline, and a blank line (nvFuser's layout)."""
    name = f"nvfuser_fusion_id{fusion_id}" if fusion_id is not None else "nvfuser_incomplete_fusion"
    inline = {o.index: r for r in records if r.inline for o in r.outputs}
    lines = [f"\ndef {name}(fd : FusionDefinition) -> None :"]
    lines += [f"    {r.python(inline)}" for r in records if not r.inline]
    return "\n".join(lines) + "\n\n"


def input_text(x: Any) -> str:
    """A Python expression building an input like `x`: `torch.testing.make_tensor` for a
    contiguous tensor, random storage viewed with `as_strided` otherwise (nvFuser's)."""
    if not isinstance(x, torch.Tensor):
        # nan and inf print bare; Python needs them spelled as floats
        text = re.sub(r"\binf\b", 'float("inf")', str(x))
        return re.sub(r"\bnan\b", 'float("nan")', text)
    dev = f"'{x.device}'"
    size = tuple(x.size())
    if x.is_contiguous():
        return f"torch.testing.make_tensor({size}, dtype={x.dtype}, device={dev})"
    storage = 1
    for s, st in zip(x.size(), x.stride()):
        if s == 0:
            storage = 0
            break
        storage += (s - 1) * st
    if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):  # randn has no fp8 kernel
        base = f"torch.randn({storage}, dtype=torch.float32, device={dev}).to({x.dtype})"
    elif x.dtype.is_floating_point or x.dtype.is_complex:
        base = f"torch.randn({storage}, dtype={x.dtype}, device={dev})"
    else:
        upper = 2 if x.dtype is torch.bool else 10
        base = f"torch.randint(0, {upper}, ({storage},), dtype={x.dtype}, device={dev})"
    return f"{base}.as_strided({size}, {tuple(x.stride())})"


def repro_script(records: Sequence[Record], fusion_id: int | None, inputs: Sequence[Any] | None) -> str:
    """A runnable script in nvFuser's layout: version comments, imports, the definition,
    `with FusionDefinition() as fd:`, inputs like `inputs`, and `fd.execute(inputs)`."""
    from fuser import __version__
    from fuser.compat.version import NVFUSER_VERSION

    name = f"nvfuser_fusion_id{fusion_id}" if fusion_id is not None else "nvfuser_incomplete_fusion"
    msg = "# CUDA devices:\n"
    for i in range(torch.cuda.device_count()):
        msg += f"#  {i}: {torch.cuda.get_device_name(i)}\n"
    msg += (
        f"# torch version: {torch.__version__}\n"
        f"# cuda version: {torch.version.cuda}\n"
        f"# nvfuser version: {NVFUSER_VERSION}\n"
        f"# fuser version: {__version__}\n"
        "import torch\n"
        # fuser's own import: the script runs where nvFuser is not installed
        "from fuser import FusionDefinition, DataType\n"
        f"{definition_text(records, fusion_id)}"
        "with FusionDefinition() as fd:\n"
        f"    {name}(fd)\n"
    )
    if inputs is not None:
        msg += "\ninputs = [\n" + "".join(f"    {input_text(x)},\n" for x in inputs) + "]\nfd.execute(inputs)\n"
    return msg
