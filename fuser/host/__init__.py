"""The host program of a fusion: lowering a SegmentedFusion to host IR (launches,
allocations, aliases, stream loops), the passes over it, and the evaluator that runs it
(`HostIrEvaluator`); the per-input-signature executor cache (`executor`)."""
