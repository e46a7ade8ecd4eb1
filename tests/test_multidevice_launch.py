"""The multi-device tests under two ranks on this machine's CPU (gloo): what
`torchrun --nproc-per-node 2 -m pytest tests/multidevice` runs on a GPU host with NCCL,
started from the ordinary test run so that CI covers the sharded code paths."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.skipif(sys.platform == "win32", reason="gloo process groups on one host need a POSIX platform")
def test_the_multidevice_tests_pass_on_two_cpu_ranks_with_gloo(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1", FUSER_COMM_TIMEOUT="60",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    env.pop("WORLD_SIZE", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--tee", "3",
           "--standalone", "-m", "pytest", "-q", "-p", "no:cacheprovider", str(HERE / "multidevice")]
    got = subprocess.run(cmd, cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=600)
    out = got.stdout + got.stderr
    summaries = re.findall(r"\[default(\d)\]:=*\s*(\d+ passed.*?) in [\d.]+s", out)
    assert got.returncode == 0, out[-6000:]
    assert sorted(r for r, _ in summaries) == ["0", "1"], out[-4000:]
    for _, line in summaries:
        assert "failed" not in line and "error" not in line, line
        assert int(line.split()[0]) >= 20, line


@pytest.mark.gpu
def test_a_nccl_collective_a_rank_never_joins_is_named_before_the_process_ends():
    """Rank 1 skips an allreduce; rank 0 hangs in it on its GPU. Within FUSER_COMM_TIMEOUT
    fuser's watch names the host program's communication (NCCL's watchdog, which ends
    the process later, names only a sequence number)."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs (NCCL)")
    env = dict(os.environ, FUSER_COMM_TIMEOUT="4", PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    env.pop("WORLD_SIZE", None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--tee", "3", "--standalone",
           str(HERE / "multidevice" / "hung_collective.py")]
    got = subprocess.run(cmd, cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=180)
    out = got.stdout + got.stderr
    assert got.returncode != 0, out[-4000:]
    # (NCCL's watchdog, at 4 * 1.1 + 5 s, words its message otherwise)
    assert re.search(r"\[default0\]:fuser: rank 0: Communication 0 \(allreduce of T\d+_\w+\[.*\]\) has not "
                     r"finished after 4 s", out), out[-6000:]
