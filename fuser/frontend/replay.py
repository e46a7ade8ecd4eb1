"""Replaying a definition's records into another FusionDefinition (nvFuser's `clone`)."""
from __future__ import annotations

from typing import Any, Sequence

from .records import Record, StateRef


def replay(records: Sequence[Record], fd: Any) -> None:
    """Re-issue each recorded call on `fd` (which must be open), mapping states by index."""
    offset = len(fd._state_vals)
    # a constant defined inline is passed as its value (an int, a list): the call that reads
    # it defines it inline again, as it did the first time
    inline = {o.index: r for r in records if r.inline for o in r.outputs}
    index = {}  # original state index -> the state the replay made for it

    def resolve(v: Any) -> Any:
        if isinstance(v, StateRef):
            rec = inline.get(v.index)
            if rec is not None:
                return resolve(rec.args[0])
            return _handle(fd, index.get(v.index, v.index + offset))
        if isinstance(v, list):
            return [resolve(x) for x in v]
        if isinstance(v, tuple):
            return tuple(resolve(x) for x in v)
        return v

    for r in records:
        if r.inline:
            continue
        target = fd
        for part in r.name.split("."):
            target = getattr(target, part)
        result = target(*resolve(r.args), **{k: resolve(v) for k, v in r.kwargs})
        made = result if isinstance(result, tuple) else (result,) if result is not None else ()
        index.update((o.index, h.index) for o, h in zip(r.outputs, made))


def _handle(fd: Any, index: int) -> Any:
    from .handles import Scalar, Tensor, Vector
    from fuser.ir import TensorView

    val = fd._state_vals[index]
    if isinstance(val, TensorView):
        return Tensor(fd, index)
    if isinstance(val, list):
        return Vector(fd, index)
    return Scalar(fd, index)


def clone(fd_from: Any, fd_to: Any) -> None:
    """Copy `fd_from`'s definition into the new FusionDefinition `fd_to`."""
    fd_from._ensure_defined()
    with fd_to:
        replay(fd_from._entry.records, fd_to)
