"""The wheel holds the whole package: every module, Cython source and CUDA header under fuser/.

`pip install .` once shipped a wheel without fuser/lower/ or the runtime headers, because
find_packages skips a directory without `__init__.py`. The wheel checked is $FUSER_WHEEL
when set (CI passes the one it installs); otherwise one built here from a copy of the
source tree with `pip wheel --no-deps --no-build-isolation` (no network; about 35 s), which
needs pyproject's build requirements (setuptools, wheel, Cython, NumPy) installed. Without
the source tree (tests run against an installed fuser from a copy of tests/) those skip, and
with FUSER_EXPECT_INSTALLED=1 (CI's run against its wheel) fuser must come from site-packages.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PKG = REPO / "fuser"
SHIPPED = (".py", ".pyx", ".pxd", ".cuh")  # every such file under fuser/ is in the wheel
BUILD_FILES = ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in")

needs_source = pytest.mark.skipif(not (PKG / "__init__.py").is_file() or not (REPO / "setup.py").is_file(),
                                  reason="needs the source tree (fuser/ and setup.py beside tests/)")


def source_files() -> list[str]:
    """Paths (relative to the repo root, '/'-separated) of the files under fuser/ a wheel must hold."""
    return sorted(p.relative_to(REPO).as_posix() for p in PKG.rglob("*")
                  if p.suffix in SHIPPED and "__pycache__" not in p.parts)


def _copy_tree(dst: Path) -> None:
    """The files a build reads, without what an in-place build leaves (compiled modules,
    Cython's C, build/): those would hide a file missing from the package list."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd", "*.c", "*.cpp", "*.html")
    shutil.copytree(PKG, dst / "fuser", ignore=ignore)
    for name in BUILD_FILES:
        shutil.copy2(REPO / name, dst / name)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("FUSER_WHEEL")
    if given:
        return Path(given)
    # pyproject.toml's build-system requires, which --no-build-isolation leaves to us.
    missing = [m for m in ("setuptools", "wheel", "Cython", "numpy") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"building a wheel offline needs {', '.join(missing)} installed (or set FUSER_WHEEL)")
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    _copy_tree(src)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("fuser-*.whl")
    return built


@pytest.fixture(scope="module")
def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


@needs_source
def test_every_package_directory_is_a_regular_package():
    # find_packages leaves out a directory without __init__.py, and with it all its files.
    dirs = {p.parent for p in PKG.rglob("*") if p.suffix in SHIPPED and "__pycache__" not in p.parts}
    missing = sorted(d.relative_to(REPO).as_posix() for d in dirs if not (d / "__init__.py").is_file())
    assert not missing, f"no __init__.py in {missing}"


@needs_source
def test_wheel_holds_every_source_file(wheel_names: set[str]):
    missing = [f for f in source_files() if f not in wheel_names]
    assert not missing, f"the wheel lacks {len(missing)} file(s): {missing}"


@needs_source
def test_wheel_holds_the_compiled_extensions(wheel_names: set[str]):
    for pyx in sorted((PKG / "_core").glob("*.pyx")):
        stem = f"fuser/_core/{pyx.stem}."
        assert any(n.startswith(stem) and n.endswith((".so", ".pyd")) for n in wheel_names), f"no module for {pyx.name}"


@needs_source
def test_wheel_holds_nothing_else(wheel_names: set[str]):
    allowed = re.compile(r"fuser-[^/]+\.dist-info/.+|fuser/.+\.(py|pyx|pxd|cuh|so|pyd)")
    stray = sorted(n for n in wheel_names if not allowed.fullmatch(n))
    assert not stray, f"unexpected files in the wheel: {stray}"


@needs_source
def test_wheel_metadata(wheel: Path):
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        text = zf.read(meta).decode()
    version = re.search(r'^__version__ = "([^"]+)"', (PKG / "__init__.py").read_text(), re.M).group(1)
    assert f"\nVersion: {version}\n" in text
    assert "\nRequires-Dist: torch" in text and "\nProvides-Extra: cuda\n" in text
    assert "\n# fuser\n" in text  # the README is the long description


@pytest.mark.skipif(os.environ.get("FUSER_EXPECT_INSTALLED") != "1", reason="only for a run against an installed wheel")
def test_fuser_is_the_installed_copy():
    # A source tree on sys.path would shadow the installed package and hide what the wheel lacks.
    import fuser

    where = Path(fuser.__file__).resolve()
    sites = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    assert any(where.is_relative_to(s) for s in sites), f"fuser imported from {where}, not from {sites}"
