"""Scheduling transforms: loop-domain primitives, iter-domain replay, propagation, inlining."""
from .loop import loop_ids, merge, merge_all, parallelize, reorder, split
from .replay import ReplayError, inline_most, propagate, replay_loop

__all__ = ["split", "merge", "merge_all", "reorder", "parallelize", "loop_ids",
           "replay_loop", "propagate", "inline_most", "ReplayError"]
