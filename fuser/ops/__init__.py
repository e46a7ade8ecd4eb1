"""Builders that create Fusion IR for each operation (no user-input validation: the frontend does that)."""
from .arith import add_alpha, addcmul, binary, cast, pointwise_domain, set_, sub_alpha, ternary, truediv, unary, where
from .factory import full, iota, rand_like, randn_like, rng, triu
from .indexing import gather, index_select, linear, matmul, scatter, select
from .reduction import broadcast, cumsum, normalize_dims, reduction, var, var_mean, welford
from .shape import broadcast_in_dim, cat, expand, pad, permute, reshape, slice_, squeeze, stride_order
