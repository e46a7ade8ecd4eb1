"""Build script for the Cython extensions; project metadata is in pyproject.toml."""

from pathlib import Path

import numpy
from Cython.Build import cythonize
from setuptools import Extension, find_packages, setup

# Explicit module names: cythonize would otherwise infer them from
# __init__.py files, silently mis-naming modules if one is missing.
extensions = [
    Extension(
        f"fuser._core.{pyx.stem}",
        [pyx.as_posix()],
        include_dirs=[numpy.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    )
    for pyx in sorted(Path("fuser/_core").glob("*.pyx"))
]

setup(
    # Every directory under fuser/ is a regular package (tests/test_packaging.py checks
    # that the wheel holds all of them): find_packages skips one without __init__.py.
    packages=find_packages(include=["fuser", "fuser.*"]),
    package_data={
        # Sources beside the compiled modules, for tracebacks and for cimport.
        "fuser._core": ["*.pyx", "*.pxd"],
        # CUDA headers that generated kernels #include, in any subpackage.
        "": ["*.cuh"],
    },
    # Cython's generated C sits next to the .pyx; keep it out of wheels.
    exclude_package_data={"": ["*.c", "*.cpp", "*.html"]},
    ext_modules=cythonize(
        extensions,
        compiler_directives={
            "language_level": 3,
            "boundscheck": False,
            "wraparound": False,
        },
    ),
)
