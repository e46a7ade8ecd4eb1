"""A segment's generated kernel: `prepare` schedules, lowers and prints one segment as
CUDA C for the arguments of one call (one function per kernel scheduler); `generated`
holds the result, `GeneratedKernel`, which compiles and loads it through `fuser.driver` at
its first launch and launches it on PyTorch's stream."""
from .generated import GeneratedKernel, clear_loaded
from .prepare import (
    generates_kernel,
    kernels_available,
    prepare_greedy,
    prepare_inner_outer,
    prepare_kernel,
    prepare_pointwise,
    prepare_reduction,
    prepare_resize,
    prepare_transpose,
)

__all__ = [
    "GeneratedKernel", "clear_loaded", "generates_kernel", "kernels_available", "prepare_greedy",
    "prepare_inner_outer", "prepare_kernel", "prepare_pointwise", "prepare_reduction", "prepare_resize",
    "prepare_transpose",
]
