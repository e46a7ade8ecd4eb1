"""FUSER_DUMP=segmented_fusion: a SegmentedFusion printed as nvFuser prints one."""
from __future__ import annotations

from fuser.ir.printer import expr_str, val_str
from fuser.scheduler.runtime_info import target_line

from .segmented_fusion import SegmentedFusion, SegmentedGroup


def _ids(g: SegmentedGroup) -> str:
    return "g{" + ", ".join(map(str, g.expr_indices)) + "}"


def _val_line(v) -> str:
    return f"  {val_str(v)} {v.dtype.cpp}" if hasattr(v, "domain") else f"  {val_str(v)}"


def segmented_fusion_str(seg: SegmentedFusion) -> str:
    lines = ["Segmented_Fusion Dump: -- fusion segments:"]
    if seg.runtime_info is not None:
        # what the schedulers' decisions assumed (they depend on the device's limits)
        lines.append(target_line(seg.runtime_info.device_limits))
    lines += ["Segmented_Fusion{ ", "groups: "]
    lines += [_ids(g) for g in seg.groups]
    lines += ["", "edges: "]
    for e in seg.edges:
        lines += [f"e{{ {_ids(e.from_group)}", f" -> {_ids(e.to_group)}", f"({val_str(e.val)}) }}", ""]
    lines += ["group details:"]
    for g in seg.groups:
        lines += [f"g{{({g.scheduler.value})", f"group id: {g.id}", "inputs:"]
        lines += [_val_line(v) for v in g.inputs]
        lines += ["outputs:"]
        lines += [_val_line(v) for v in g.outputs]
        lines += ["", ""]
        for e, k in zip(g.exprs, g.expr_indices):
            lines += [expr_str(e).rstrip(), f"({k})"]
        lines += ["}", ""]
    lines += ["} //Segmented_Fusion"]
    return "\n".join(lines) + "\n"
