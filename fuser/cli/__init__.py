"""The command line: `python -m fuser demo`, `python -m fuser bench` (and, as stages land, more commands)."""
from __future__ import annotations

import argparse
from typing import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fuser", description="fuser: a fusion code generator for NVIDIA GPUs")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="define, run and check a real fusion (RMSNorm backward) end to end")
    demo.add_argument("--device", default=None, help="torch device to run on (default: cuda if available, else cpu)")
    from .bench import add_parser as _add_bench

    _add_bench(sub)
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import run_demo

        return run_demo(args.device)
    if args.command == "bench":
        from .bench import run_bench

        return run_bench(quick=args.quick, plot=args.plot, only=args.only, cpu=args.cpu, sweep=args.sweep,
                         overlap=args.overlap, after_producer=args.after_producer)
    return 2
