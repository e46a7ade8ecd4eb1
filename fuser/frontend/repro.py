"""Printing a definition as Python exactly as nvFuser's `FusionDefinition` prints it, and
the repro scripts built around it (nvFuser's `repro_script_for` layout)."""
from __future__ import annotations

import math
import re
import sys
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


def _tensor_text(x: torch.Tensor) -> str:
    """A tensor like `x` (a dtype torch makes at random): `torch.testing.make_tensor` when
    contiguous, random storage viewed with `as_strided` otherwise (nvFuser's)."""
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


def _inputs_text(inputs: Sequence[Any]) -> str:
    """The tail of a repro script: `inputs = [...]`, one valid Python expression per input,
    and `fd.execute(inputs)`."""
    # numpy inputs exist only where numpy was imported: no import (or dependency) here
    numpy = sys.modules.get("numpy")
    uses_numpy = numpy is not None and any(isinstance(x, (numpy.ndarray, numpy.generic)) for x in inputs)
    lines = ["import numpy\n"] if uses_numpy else []
    lines.append("inputs = [\n")
    for x in inputs:
        expr, note = input_text(x)
        lines.append(f"    {expr},{'  # ' + note if note else ''}\n")
    return "\n" + "".join(lines) + "]\nfd.execute(inputs)\n"


#: dtypes torch can make random tensors of (make_tensor, randn or randint); others are made
#: from random bytes viewed as that dtype
_RANDOM_DTYPES = frozenset({
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2,
    torch.complex64, torch.complex128, torch.bool, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.uint8, torch.uint16, torch.uint32, torch.uint64,
})


def input_text(x: Any) -> tuple[str, str]:
    """A Python expression that builds an input like `x` in a repro script (torch and numpy
    imported), and a note for a comment where the expression only stands in for `x`."""
    numpy = sys.modules.get("numpy")
    if isinstance(x, torch.Tensor):
        if x.dtype in _RANDOM_DTYPES:
            return _tensor_text(x), ""
        storage = 0 if x.numel() == 0 else 1 + sum((s - 1) * st for s, st in zip(x.size(), x.stride()))
        nbytes = storage * x.element_size()
        return (f"torch.randint(0, 256, ({nbytes},), dtype=torch.uint8, device='{x.device}').view({x.dtype})"
                f".as_strided({tuple(x.size())}, {tuple(x.stride())})", "")
    # before float: numpy.float64 is a float whose repr (np.float64(...)) names no imported module
    if numpy is not None and isinstance(x, (numpy.ndarray, numpy.generic)):
        # values as well as shape and dtype: a numpy input is usually small, and its values may matter
        made = f"numpy.array({_nested_text(x.tolist())}, dtype={x.dtype.str!r})"
        return (f"{made}.reshape({x.shape})" if isinstance(x, numpy.ndarray) else f"{made}[()]"), ""
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes, list, tuple)):
        return _nvfuser_spelling(x) or _nested_text(x), ""
    # an object a script cannot rebuild: None keeps the input's position
    return "None", f"stands for a {type(x).__module__}.{type(x).__qualname__}, which a script cannot rebuild"


#: the builtin types whose str() nvFuser's script writes for a non-tensor input
_PLAIN_TYPES = (type(None), bool, int, float, complex, bytes, list, tuple)
#: the words str() gives for non-finite floats, which nvFuser's script spells as calls
_NON_FINITE_WORD = re.compile(r"\b(inf|nan)\b")


def _nvfuser_spelling(x: Any) -> str | None:
    """nvFuser's text for a non-tensor input: `str(x)`, each word inf or nan made
    `float("inf")` / `float("nan")` (so -inf reads `-float("inf")`). None where that text is
    no Python rebuilding exactly `x` (a str, which str() leaves unquoted; `nanj` in a
    complex; a subclass such as an IntEnum or numpy.float64): fuser's own spelling is used."""
    if not _plain_exact(x):
        return None
    try:
        text = _NON_FINITE_WORD.sub(lambda m: f'float("{m.group(1)}")', str(x))
        # only builtin values reach here: their str() runs no user code, and the names
        # the text may use are float's alone
        back = eval(text, {"__builtins__": {}, "float": float})  # noqa: S307
    except Exception:
        return None
    return text if _same_value(back, x) else None


def _plain_exact(x: Any) -> bool:
    """`x` is None or of exactly a builtin number, bytes, list or tuple type, recursively."""
    if type(x) not in _PLAIN_TYPES:
        return False
    if isinstance(x, (list, tuple)):
        return all(_plain_exact(v) for v in x)
    return True


def _same_value(a: Any, b: Any) -> bool:
    """Equal types and values; nan equals nan, and 0.0 differs from -0.0."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same_value(u, v) for u, v in zip(a, b))
    if isinstance(a, complex):
        return _same_value(a.real, b.real) and _same_value(a.imag, b.imag)
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def _float_text(v: float) -> str:
    """A float as Python source: inf and nan have no literal."""
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else '-float("inf")'
    return repr(float(v))


def _nested_text(v: Any) -> str:
    """None, numbers, strings and (nested) lists or tuples of them as Python source; None
    for anything else."""
    if isinstance(v, list):
        return "[" + ", ".join(_nested_text(i) for i in v) + "]"
    if isinstance(v, tuple):
        return "(" + "".join(_nested_text(i) + ", " for i in v).rstrip(" ") + ")"
    # subclasses (an IntEnum, a str subclass) as their base type: their own repr is no Python source
    if isinstance(v, bool):
        return repr(bool(v))
    if isinstance(v, int):
        return repr(int(v))
    if isinstance(v, float):
        return _float_text(v)
    if isinstance(v, complex):
        if math.isfinite(v.real) and math.isfinite(v.imag):
            return repr(complex(v))
        return f"complex({_float_text(v.real)}, {_float_text(v.imag)})"
    if isinstance(v, str):
        return repr(str(v))
    if isinstance(v, bytes):
        return repr(bytes(v))
    return "None"


def repro_script(records: Sequence[Record], fusion_id: int | None, inputs: Sequence[Any] | None) -> str:
    """A runnable script in nvFuser's `repro_script_for` layout, line for line: the CUDA
    devices and the torch / cuda / nvfuser versions as comments, the imports, the definition,
    `with FusionDefinition() as fd:`, inputs like `inputs`, and `fd.execute(inputs)`.

    One line differs on purpose: the import names fuser (`from fuser import ...`), so the
    script runs where nvFuser is not installed (no `nvfuser` module exists unless a user
    installs fuser's stand-in, `fuser.compat.nvfuser`, under that name). The nvfuser version
    is the frontend release fuser implements (what `nvfuser.version()` answers in the compat
    module); fuser's own version is not written, to keep nvFuser's header as it is."""
    from fuser.compat.version import NVFUSER_VERSION

    name = f"nvfuser_fusion_id{fusion_id}" if fusion_id is not None else "nvfuser_incomplete_fusion"
    msg = "# CUDA devices:\n"
    for i in range(torch.cuda.device_count()):
        msg += f"#  {i}: {torch.cuda.get_device_name(i)}\n"
    msg += (
        f"# torch version: {torch.__version__}\n"
        f"# cuda version: {torch.version.cuda}\n"
        f"# nvfuser version: {NVFUSER_VERSION}\n"
        "import torch\n"
        # fuser's own import: the script runs where nvFuser is not installed
        "from fuser import FusionDefinition, DataType\n"
        f"{definition_text(records, fusion_id)}"
        "with FusionDefinition() as fd:\n"
        f"    {name}(fd)\n"
    )
    if inputs is not None:
        msg += _inputs_text(inputs)
    return msg
