"""Kernel IR: what one CUDA kernel does, as statements over C expressions.

Lowering builds it from a scheduled Fusion (loop nests from the loop domains, indices
from the transforms, predicates, vector accesses); codegen prints it. Expressions are C
strings already: the emitters in `fuser.codegen.ops` and the index arithmetic in
`fuser.lower.index` produce them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union


@dataclass
class Param:
    """A kernel parameter and where its value comes from at launch.

    `kind`: "tensor" (`source` is the TensorView; a pointer), "stride" (`source` is
    (TensorView, logical dim)), "extent" (`source` is the Scalar), "scalar" (a scalar input).
    """

    name: str
    ctype: str
    kind: str
    source: Any
    #: struct format letter for packing (pycuda prepared call)
    fmt: str = "P"


@dataclass
class Decl:
    """`ctype name[size];` (size None: a scalar), optionally initialised."""

    ctype: str
    name: str
    size: int | None = None
    init: str | None = None


@dataclass
class Assign:
    lhs: str
    rhs: str


@dataclass
class For:
    """`for (index_t var = 0; var < stop; ++var)`; `unroll` adds #pragma unroll."""

    var: str
    stop: str
    body: list["Stmt"] = field(default_factory=list)
    unroll: bool = False
    ctype: str = "nvfuser_index_t"


@dataclass
class If:
    cond: str
    body: list["Stmt"] = field(default_factory=list)


@dataclass
class VecLoad:
    """`n` consecutive elements from `ptr` into the register array `dst`, one access."""

    ctype: str
    n: int
    dst: str
    ptr: str


@dataclass
class VecStore:
    ctype: str
    n: int
    ptr: str
    src: str


@dataclass
class Comment:
    text: str


Stmt = Union[Decl, Assign, For, If, VecLoad, VecStore, Comment]


@dataclass
class Kernel:
    """One kernel: name, parameters, body, and how to launch it."""

    name: str
    params: list[Param]
    body: list[Stmt]
    index_type: str
    threads: int = 1
    #: the extents (Scalars) of the loop axes bound to blockIdx.x and blockIdx.y: the grid
    grid_extent: Any = None
    grid_extent_y: Any = None
