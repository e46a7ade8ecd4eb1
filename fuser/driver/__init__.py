"""The driver layer: compiling CUDA C with NVRTC (`nvrtc`), the on-disk kernel cache
(`kernel_cache`), loading modules and launching kernels through the CUDA driver and pycuda
(`launch`). It sits below every stage of the pipeline and imports none of it
(tests/test_layering.py checks)."""
