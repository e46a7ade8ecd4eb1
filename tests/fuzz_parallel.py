"""Run the GPU fuzzer (tests/gpu_fuzz.py) in many processes at once, for a fixed time.

    python -m tests.fuzz_parallel --procs 16 --seconds 300 --seed 16000 --logs /tmp/fz
    python -m tests.fuzz_parallel --procs 30 --gpus 2 --seconds 240 \\
        --mode "" --mode "fuser.scheduler.normalization.PERSISTENT_LATE_LOADS=True"

Process i runs stream `seed + i` on GPU i % gpus, starting cases until `seconds` have
passed (`gpu_fuzz --deadline`), with the settings of mode i % len(modes) (each mode is a
comma-separated list of gpu_fuzz `--set` items; "" is the shipped configuration). Each
process writes its log to `logs`/f<i>.log. The last line sums every process's summary; the
exit status is 1 when a case failed or a process printed no summary, else 0.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"gpu fuzz: (\d+) cases, (\d+) mismatches, (\d+) crashes, (\d+) fallbacks, "
                     r"(\d+) generator failures; (\d+) of (\d+) elements excluded; segments: (\d+) kernels")
FIELDS = ("cases", "mismatches", "crashes", "fallbacks", "generator failures", "excluded", "elements", "kernels")


def command(i: int, args: argparse.Namespace) -> list[str]:
    """gpu_fuzz's command line for process `i`."""
    cmd = [sys.executable, "-m", "tests.gpu_fuzz", "--cases", "1000000", "--seed", str(args.seed + i),
           "--device", "cuda", "--deadline", str(args.seconds)]
    modes = args.mode or [""]
    for item in filter(None, (s.strip() for s in modes[i % len(modes)].split(","))):
        cmd += ["--set", item]
    return cmd


def totals(texts: list[str]) -> tuple[dict[str, int], list[int]]:
    """Summed summary fields over the processes' outputs, and the processes with a failure
    or no summary line."""
    sums = dict.fromkeys(FIELDS, 0)
    bad = []
    for i, text in enumerate(texts):
        m = SUMMARY.search(text)
        if m is None:
            bad.append(i)
            continue
        values = dict(zip(FIELDS, map(int, m.groups())))
        for k, v in values.items():
            sums[k] += v
        if any(values[k] for k in ("mismatches", "crashes", "fallbacks", "generator failures")):
            bad.append(i)
    return sums, bad


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="processes (default: one a CPU)")
    p.add_argument("--gpus", type=int, default=1, help="GPUs to spread them over (default: 1)")
    p.add_argument("--seconds", type=float, required=True, help="start no case after this many seconds")
    p.add_argument("--seed", type=int, default=0, help="process i fuzzes stream seed + i (default: 0)")
    p.add_argument("--mode", action="append", help="comma-separated gpu_fuzz --set items; repeat for more modes (default: the shipped settings)")
    p.add_argument("--logs", default="fuzz_logs", help="directory for the processes' logs (default: fuzz_logs)")
    args = p.parse_args(argv)
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    running = []
    for i in range(args.procs):
        # one CPU thread each: N processes each running PyTorch's CPU ops on every core
        # oversubscribe the machine (16 processes on 16 cores ran 0.22 cases a second each)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i % args.gpus))
        env.setdefault("OMP_NUM_THREADS", "1")
        out = open(logs / f"f{i}.log", "w")
        running.append((subprocess.Popen(command(i, args), cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT), out))
    for proc, out in running:
        proc.wait()
        out.close()
    sums, bad = totals([(logs / f"f{i}.log").read_text() for i in range(args.procs)])
    failing = ", ".join(f"f{i}.log" for i in bad) or "none"
    print(f"fuzz_parallel: {args.procs} processes; " + ", ".join(f"{v} {k}" for k, v in sums.items())
          + f"; logs with a failure or no summary: {failing}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
