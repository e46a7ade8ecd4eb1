"""Running fusions: input binding, the reference executor, and (later) compiled kernels."""
