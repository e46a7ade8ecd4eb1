"""Code generation: kernel IR -> CUDA C, and the device runtime it includes.

`fuser.codegen.ops` turns elementwise ops into C++ expressions over the runtime header
`runtime/fuser_runtime.cuh` (shipped as package data; `ops.runtime_headers()` reads it).
"""
