"""CUDA headers that generated kernels include; package data read by `codegen.ops.runtime_headers`."""
