"""Index ops' bounds checks at run time (see fuser.lower.kir.IndexCheck): the ones the
host makes once per launch plan (select's scalar index and gather's index sizes, both
fixed by the input signature), and the error flag a kernel records an out-of-range index
tensor value in, read after each launch."""
from __future__ import annotations

from typing import Any

import torch

from fuser.lower.kir import Kernel


class IndexOutOfRangeError(IndexError, RuntimeError):
    """An index op met an index outside its lookup axis (an IndexError, and a
    RuntimeError as nvFuser raises)."""


def _range(wrap: bool, n: int) -> str:
    return f"[{-n}, {n - 1}]" if wrap else f"[0, {n - 1}]"


def out_of_range(op: str, value: int, dim: int, n: int, tensor: str, wrap: bool = False) -> IndexOutOfRangeError:
    """The error for index `value` of op `op` along `dim` (of `n` elements) of `tensor`."""
    if n == 0:
        where = "an empty dimension"
    else:
        where = f"size {n} (valid indices: {_range(wrap, n)})"
    return IndexOutOfRangeError(f"{op}: index {value} is out of bounds for dimension {dim} of {tensor}, of {where}")


#: the size rule each op's index tensor follows, for the error naming a size that breaks it
_SIZE_RULE = {
    "gather": "only the gathered dimension may be larger",
    "scatter": "the index may be no larger than src in any dimension, nor than the input in any but dim",
}


def check_on_host(kernel: Kernel, evaluate: Any) -> None:
    """Raise for the host checks of `kernel` that this call's values fail; `evaluate` gives
    a Fusion scalar's value (SchedulerRuntimeInfo.evaluate)."""
    for c in kernel.index_checks:
        if c.value is None:
            continue
        v, n = int(evaluate(c.value)), int(evaluate(c.extent))
        if c.size:
            if v > n:
                raise RuntimeError(f"{c.op}: the index has size {v} in dimension {c.dim}, larger than {c.tensor}'s "
                                   f"{n} ({_SIZE_RULE.get(c.op, _SIZE_RULE['gather'])})")
        elif not ((-n if c.wrap else 0) <= v < n):
            raise out_of_range(c.op, v, c.dim, n, c.tensor, c.wrap)


class ErrorFlag:
    """The error flag of one kernel's device bounds checks: three zeroed int64s per stream
    (the failed check's number + 1, the index value, the extent), passed to every launch
    on that stream."""

    def __init__(self, kernel: Kernel, device: torch.device) -> None:
        self.kernel = kernel
        self.device = device
        self._flags: dict[int, torch.Tensor] = {}
        self._flag: torch.Tensor | None = None

    def pointer(self) -> int:
        """The flag of PyTorch's current stream (made zeroed on first use)."""
        stream = torch.cuda.current_stream(self.device).cuda_stream
        flag = self._flags.get(stream)
        if flag is None:
            flag = self._flags[stream] = torch.zeros(3, dtype=torch.int64, device=self.device)
        self._flag = flag
        return flag.data_ptr()

    def raise_if_set(self) -> None:
        """After a launch: raise the IndexError its first out-of-range index calls for,
        zeroing the flag again for the next launch. Copies the flag to the host, which waits
        for the launch: it synchronises the stream, so only kernels with device checks do it."""
        flag = self._flag
        if flag is None:
            return
        check, value, n = flag.tolist()
        if check == 0:
            return
        flag.zero_()
        c = self.kernel.index_checks[check - 1]
        raise out_of_range(c.op, value, c.dim, n, c.tensor)
