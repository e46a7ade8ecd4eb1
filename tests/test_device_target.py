"""The device a plan is made for (issue 32, item 7): a named default planning target where
there is no CUDA device, FUSER_TARGET to choose another, the target named in the dumps, a
conservative fallback for limits a real device's torch does not report, and cp.async kept
from architectures that lack it (below sm_80: a synchronous copy instead)."""
from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import types
import warnings
from pathlib import Path

import pytest
import torch

from fuser import DataType, FusionDefinition
from fuser.runtime.info import runtime_info
from fuser.scheduler import schedulers_for
from fuser.scheduler import runtime_info as ri
from fuser.scheduler.runtime_info import DEFAULT_TARGET, TARGET_ENV, TARGETS, DeviceLimits, target_line

from normalization_backward_cases import make_case

H100_LINE = "target: H100 (sm_90, 132 SMs, 227 KB smem) [no CUDA device: planning target 'h100'; FUSER_TARGET chooses]"


@pytest.fixture(autouse=True)
def _no_target_env(monkeypatch):
    """Each test starts on the default target, whatever the environment says."""
    monkeypatch.delenv(TARGET_ENV, raising=False)


def _softmax_like(shape: tuple[int, int]) -> tuple[FusionDefinition, list[torch.Tensor]]:
    """x - max(x) over rows on meta inputs of `shape` (tests pick shapes no other test uses:
    runners are cached per input signature, and a meta signature does not name the target)."""
    with FusionDefinition() as fd:
        x = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=DataType.Float)
        m = fd.ops.broadcast_in_dim(fd.ops.max(x, [1]), shape=x.shape(), broadcast_dims=[0])
        fd.add_output(fd.ops.sub(x, m))
    return fd, [torch.empty(shape, device="meta")]


# --- the default target and FUSER_TARGET -------------------------------------------------------


def test_default_target_is_named():
    h100 = TARGETS[DEFAULT_TARGET]
    assert DEFAULT_TARGET == "h100" and h100.describe() == "H100 (sm_90, 132 SMs, 227 KB smem)"
    assert DeviceLimits.h100() is h100 and DeviceLimits.target() is h100
    assert (h100.sm_count, h100.smem_per_block, h100.registers_per_sm, h100.arch) == (132, 227 * 1024, 65536, (9, 0))
    for dev in ("meta", "cpu"):
        assert DeviceLimits.of(torch.device(dev)) is h100
    assert target_line(h100) == H100_LINE
    # the named targets describe themselves
    assert TARGETS["a100"].describe() == "A100 (sm_80, 108 SMs, 163 KB smem)"
    assert TARGETS["l40s"].describe() == "L40S (sm_89, 142 SMs, 99 KB smem)"


def test_fuser_target_chooses_the_planning_target(monkeypatch):
    monkeypatch.setenv(TARGET_ENV, "A100")
    assert DeviceLimits.of(torch.device("meta")) is TARGETS["a100"]
    fd, inputs = _softmax_like((37, 61))
    assert runtime_info(fd.fusion, inputs).device_limits is TARGETS["a100"]
    monkeypatch.setenv(TARGET_ENV, "")
    assert DeviceLimits.of(torch.device("meta")) is TARGETS[DEFAULT_TARGET]
    monkeypatch.setenv(TARGET_ENV, "h9000")
    with pytest.raises(ValueError, match=r"FUSER_TARGET='h9000': no such planning target; the targets are a100, h100"):
        DeviceLimits.of(torch.device("meta"))


def test_the_target_changes_plans(monkeypatch):
    """Where a decision depends on the device (resident blocks: SMs), the planning target
    decides it: a batch norm over 1000 rows of 3000 is outer persistent on an H100's 132
    SMs, not on an A100's 108."""
    case = make_case("bn_outer", 1000, 3000, torch.float32)
    inputs = case.inputs("meta")
    with FusionDefinition() as fd:
        case.build(fd, inputs)
    assert schedulers_for(fd.fusion, runtime_info(fd.fusion, inputs))["outer_persistent"] is None
    monkeypatch.setenv(TARGET_ENV, "a100")
    why = schedulers_for(fd.fusion, runtime_info(fd.fusion, inputs))["outer_persistent"]
    assert why is not None and "rows fit" in why


# --- the target in the dumps -------------------------------------------------------------------------


def test_segmented_fusion_text_names_the_target(monkeypatch):
    fd, inputs = _softmax_like((41, 67))
    lines = str(fd.segmented_fusion_for(inputs)).splitlines()
    assert lines[0] == "Segmented_Fusion Dump: -- fusion segments:" and lines[1] == H100_LINE
    monkeypatch.setenv(TARGET_ENV, "l40s")
    fd, inputs = _softmax_like((43, 71))
    assert str(fd.segmented_fusion_for(inputs)).splitlines()[1] == (
        "target: L40S (sm_89, 142 SMs, 99 KB smem) [no CUDA device: planning target 'l40s'; FUSER_TARGET chooses]")


def test_scheduler_params_and_cuda_kernel_dumps_name_the_target(monkeypatch, capsys):
    fd, inputs = _softmax_like((47, 73))
    capsys.readouterr()
    monkeypatch.setenv("FUSER_DUMP", "scheduler_params,cuda_kernel")
    src = fd.cuda_code_for(inputs)
    err = capsys.readouterr().err
    assert f"===== scheduler_params =====\n{H100_LINE}\nReductionParams(" in err, err[:400]
    assert f"===== cuda_kernel =====\n// {H100_LINE}\n" in err
    # only the dump carries it: the source (the kernel cache's key) does not change
    assert "target:" not in src
    monkeypatch.delenv("FUSER_DUMP")
    assert fd.cuda_code_for(inputs) == src and capsys.readouterr().err == ""


# --- a real device's limits: conservative where torch does not report one --------------------------


def _props(major: int, minor: int, **missing_none) -> types.SimpleNamespace:
    """Device properties as torch reports them for a GPU of compute capability major.minor
    with sm_86-like limits; keys given as None are left out (torch lacking them)."""
    p = dict(name=f"Fake sm_{major}{minor}", major=major, minor=minor, multi_processor_count=84,
             shared_memory_per_multiprocessor=100 * 1024, shared_memory_per_block_optin=99 * 1024,
             regs_per_multiprocessor=65536, max_threads_per_multi_processor=1536, warp_size=32)
    for k in missing_none:
        del p[k]
    return types.SimpleNamespace(**p)


@pytest.fixture
def fake_gpu(monkeypatch):
    """torch reports a CUDA device whose properties `fake_gpu.props` holds; warnings given
    before are forgotten."""
    state = types.SimpleNamespace(props=_props(8, 6))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *_: state.props)
    monkeypatch.setattr(ri, "_warned", set())
    return state


def _limits_and_warnings() -> tuple[DeviceLimits, list[str]]:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        limits = DeviceLimits.of(torch.device("cuda", 0))
    return limits, [str(w.message) for w in got if issubclass(w.category, RuntimeWarning)]


def test_a_device_reporting_every_limit_is_planned_for_as_it_is(fake_gpu):
    limits, warned = _limits_and_warnings()
    assert not warned
    assert (limits.sm_count, limits.smem_per_sm, limits.smem_per_block, limits.max_threads_per_sm,
            limits.max_blocks_per_sm, limits.arch) == (84, 100 * 1024, 99 * 1024, 1536, 16, (8, 6))
    assert target_line(limits) == "target: Fake sm_86 (sm_86, 84 SMs, 99 KB smem)"


def test_a_limit_torch_lacks_is_the_smaller_of_default_and_known_with_one_warning(fake_gpu, monkeypatch):
    # sm_86: the architecture allows 99 KB a block, the default target 227 KB: 99 KB
    fake_gpu.props = _props(8, 6, shared_memory_per_block_optin=None)
    limits, warned = _limits_and_warnings()
    assert limits.smem_per_block == 99 * 1024
    assert len(warned) == 1 and "shared_memory_per_block_optin (took 101376)" in warned[0]
    assert "H100 (sm_90, 132 SMs, 227 KB smem)" in warned[0]
    again, warned = _limits_and_warnings()
    assert again == limits and not warned  # once per device and properties
    # an architecture the table does not know: the default target's value (and a warning)
    fake_gpu.props = _props(12, 1, regs_per_multiprocessor=None, warp_size=None)
    limits, warned = _limits_and_warnings()
    assert (limits.registers_per_sm, limits.warp_size, limits.max_blocks_per_sm) == (65536, 32, 32)
    assert len(warned) == 1 and "regs_per_multiprocessor (took 65536)" in warned[0] and "warp_size" in warned[0]
    # a known limit above the default target's: the default's (the smaller)
    fake_gpu.props = _props(8, 6, max_threads_per_multi_processor=None)
    monkeypatch.setitem(ri._ARCH_LIMITS, (8, 6), dict(ri._ARCH_LIMITS[(8, 6)], max_threads_per_sm=4096))
    limits, _ = _limits_and_warnings()
    assert limits.max_threads_per_sm == TARGETS[DEFAULT_TARGET].max_threads_per_sm == 2048


# --- cp.async below sm_80 ----------------------------------------------------------------------------


def _staged_kernel() -> str:
    """A generated kernel that stages rows through cp.async: RMSNorm backward, bf16
    [16384, 1024] (see tests/test_codegen_inner_outer.py)."""
    from test_codegen_inner_outer import _code

    src = _code("rms", 16384, 1024, torch.bfloat16)
    assert "fuser::cp_async<" in src and "fuser::cp_async_wait<" in src
    return src


def _ptx(source: str, arch: str, headers: dict[str, str]) -> str:
    """nvcc's PTX of `source` for `arch` (compute_XY)."""
    with tempfile.TemporaryDirectory(prefix="fuser-ptx-") as tmp:
        for name, text in headers.items():
            Path(tmp, name).write_text(text)
        Path(tmp, "k.cu").write_text(source)
        proc = subprocess.run([shutil.which("nvcc") or "nvcc", "-ptx", f"-arch={arch}", "--std=c++17", "-I", tmp,
                               "-o", "k.ptx", "k.cu"], cwd=tmp, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return Path(tmp, "k.ptx").read_text()


@pytest.mark.nvcc
def test_cp_async_kernels_compile_below_sm80():
    """The staged kernel compiles for sm_75 (a synchronous copy there: no cp.async in its
    PTX) and for sm_80 and sm_90 (cp.async in theirs)."""
    from fuser.codegen.ops import runtime_headers
    from fuser.driver.nvrtc import compile_cubin_nvcc

    src, headers = _staged_kernel(), runtime_headers()
    for arch in ("sm_75", "sm_80", "sm_90"):
        assert compile_cubin_nvcc(src, arch=arch, headers=headers)[:4] == b"\x7fELF", arch
    assert "cp.async" not in _ptx(src, "compute_75", headers)
    ptx80 = _ptx(src, "compute_80", headers)
    assert "cp.async.cg.shared.global" in ptx80 and "cp.async.wait_group" in ptx80


@pytest.mark.nvcc
def test_without_the_guard_sm75_refuses_cp_async():
    """The check above can fail: with cp_async's architecture guard taken out of the
    runtime header, ptxas refuses the kernel for sm_75, naming cp.async."""
    from fuser.codegen.ops import RUNTIME_HEADER_NAME, runtime_headers
    from fuser.driver.nvrtc import CompilationError, compile_cubin_nvcc

    headers = dict(runtime_headers())
    text = headers[RUNTIME_HEADER_NAME]
    start = text.index("FUSER_DEVICE void cp_async(")
    end = text.index("FUSER_DEVICE void cp_async_wait()") + 200
    section = text[start:end]
    guard = "#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800"
    assert section.count(guard) == 3  # cp_async, cp_async_commit, cp_async_wait
    headers[RUNTIME_HEADER_NAME] = text[:start] + section.replace(guard, "#if 1") + text[end:]
    with pytest.raises(CompilationError, match=re.escape("cp.async")):
        compile_cubin_nvcc(_staged_kernel(), arch="sm_75", headers=headers)
