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
