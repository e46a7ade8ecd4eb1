"""A kernel's parameters: tensor pointers, strides, extents and scalar inputs, each made once."""
from __future__ import annotations

import dataclasses
from typing import Any

from fuser.ir import DataType, Scalar, TensorView, Val

from .errors import NotLowerable
from .kir import Expr, Param, StateOr, value_bytes

#: struct format letters of the index type and of integer scalars by size
_INDEX_FMT = {"int32": "i", "int64": "q"}
_INT_FMT = {1: "b", 2: "h", 4: "i", 8: "q"}


class ParamTable:
    """The parameters of one kernel, in the order lowering first asks for them."""

    def __init__(self, inputs: list[Val], index_type: str) -> None:
        self._inputs = inputs
        self._index_fmt = _INDEX_FMT[index_type]
        self.params: list[Param] = []
        self._by_key: dict[Any, Param] = {}

    def _get(self, key: Any, make) -> Param:
        got = self._by_key.get(key)
        if got is None:
            got = make()
            if any(p.name == got.name for p in self.params):
                # one scalar can be both an extent (index type) and a value (its own dtype)
                got = dataclasses.replace(got, name=f"{got.name}_{len(self.params)}")
            self._by_key[key] = got
            self.params.append(got)
        return got

    def tensor(self, tv: TensorView) -> Param:
        """`tv`'s data pointer (read-only for a fusion input)."""
        return self._get(("tensor", tv), lambda: Param(f"T{tv.name}", "tensor", tv, "P", tv.dtype, pointer=True,
                                                       readonly=tv in self._inputs))

    def stride(self, tv: TensorView, dim: int) -> Param:
        """`tv`'s stride, in elements, along logical dim `dim`. The parameter's source is
        the torch tensor's dim holding that axis: the same dim, except for an input whose
        logical domain adds broadcasts to the root it holds (seed 000), where the added
        broadcasts have no stride. (An output of that form, a static reshape to size-1
        dims, is allocated with its logical shape: its dims are its logical axes.)"""
        if tv in self._inputs and tv.domain.added_broadcasts():
            axis = tv.logical_no_reductions()[dim]
            held = tv.tensor_axes()
            if axis not in held:
                raise NotLowerable(f"{tv!r}: {axis!r} is a broadcast added to its root; it has no stride")
            dim = held.index(axis)
        return self._get(("stride", tv, dim), lambda: Param(f"s{tv.name}_{dim}", "stride", (tv, dim), self._index_fmt))

    def extent(self, s: Scalar) -> Param:
        """An extent the runtime evaluates (an input's size, or a scalar input)."""
        return self._get(("extent", s), lambda: Param(f"i{s.name}", "extent", s, self._index_fmt))

    def scalar(self, s: Scalar) -> Param:
        """A scalar input of the fusion, passed by value; a scalar that is not an input is
        an extent the runtime evaluates (a size used as a value: a sum over an expanded
        axis multiplies by it)."""
        if s not in self._inputs:
            return self._get(("extent value", s), lambda: Param(f"v{s.name}", "extent", s, _INT_FMT[s.dtype.itemsize],
                                                                s.dtype))
        if s.dtype.is_complex:
            raise NotLowerable("complex scalar inputs")
        if s.dtype.is_boolean:
            fmt = "?"
        elif s.dtype.is_floating:
            fmt = "d" if s.dtype.itemsize == 8 else "f"
        else:
            fmt = _INT_FMT.get(s.dtype.itemsize, "q")
        return self._get(("scalar", s), lambda: Param(f"{s.dtype.scalar_prefix}{s.name}", "scalar", s, fmt, s.dtype))

    def philox(self) -> tuple[Expr, Expr]:
        """The seed and base offset of the unseeded RNG ops, drawn once per fusion execution
        and filled in at each launch (64-bit patterns, passed as long long), or read from the
        device array a launch captured in a CUDA graph passes instead."""
        seed = self._get(("philox seed",), lambda: Param("philox_seed", "philox_seed", None, "q", DataType.Int))
        base = self._get(("philox offset",), lambda: Param("philox_offset", "philox_offset", None, "q", DataType.Int))
        state = self._get(("philox state",), lambda: Param("philox_state", "philox_state", None, "P", DataType.Int,
                                                          pointer=True, readonly=True))
        return StateOr(state, 0, seed), StateOr(state, 1, base)

    def work(self, name: str, dtype: DataType, welford: bool, slots: int, fixed: int = 0) -> Param:
        """A grid reduction's global buffer of partials: `slots` values (Welford
        accumulators with `welford`) of `dtype` per block and `fixed` more, allocated at
        each launch."""
        elem = value_bytes(dtype, welford)
        return self._get(("work", name), lambda: Param(name, "work", (elem, slots, fixed), "P", dtype, pointer=True,
                                                      welford=welford))

    def index_error(self) -> Param:
        """The error flag index ops' device bounds checks record an out-of-range value in
        (zeroed; the runtime reads it after the launch)."""
        return self._get(("index_error",), lambda: Param("index_error", "index_error", None, "P", DataType.UInt64,
                                                        pointer=True))

    def semaphore(self) -> Param:
        """The grid reductions' arrival counters: one zeroed unsigned int per blockIdx.x."""
        return self._get(("semaphore",), lambda: Param("semaphore", "semaphore", None, "P", DataType.Int32,
                                                      pointer=True))
