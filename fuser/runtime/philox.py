"""Philox4x32-10 in PyTorch integer ops: the random numbers of RNG ops as the reference
executor computes them, bit for bit the ones generated kernels compute with
`fuser/codegen/runtime/fuser_random.cuh` (uniform; normal to the ulps in which log, sqrt
and sin/cos differ).

An RNG op's stream is a 64-bit seed and a 64-bit offset. Element i of its output (the
row-major linear index in its logical shape) takes its bits from one Philox4x32-10 block:

* key     = (seed mod 2^32, seed >> 32 mod 2^32), the seed as a 64-bit two's complement;
* counter = (offset mod 2^32, offset >> 32 mod 2^32, q mod 2^32, q >> 32) with q = i // E.

Float, half, bfloat16 (computed in float; E = 4): uniform takes word i % 4 and keeps its top
24 bits, u = (w >> 8) * 2^-24 in [0, 1); normal pairs words (0, 1) and (2, 3): Box-Muller
with u1 = ((w_a >> 8) + 1) * 2^-24 in (0, 1] and u2 = (w_b >> 8) * 2^-24, element
i % 4 in (0, 1, 2, 3) giving r cos t, r sin t of the first pair, then of the second.
Double (E = 2): uniform takes words (0, 1) or (2, 3) as 53 bits, ((a >> 5) * 2^26 + (b >> 6))
* 2^-53; normal takes u1 from words (0, 1) (plus one ulp, in (0, 1]) and u2 from (2, 3),
element i % 2 giving r cos t or r sin t. Then uniform is u * (high - low) + low (kept below
high when rounding reaches it), normal z * std + mean, each operation rounded separately
(no fused multiply-add) in the compute type; narrow types round once at the end.

A given seed and offset therefore give the same numbers whatever the kernel's schedule.
Unseeded RNG ops draw their seed and a base offset once per fusion execution from PyTorch's
generator of the device (`draw`); op `stream` (its output's name) uses offset base + stream.
"""
from __future__ import annotations

import contextlib
import math
from typing import Any, Iterator, Sequence

import torch

from fuser.ir import RNGOp

MASK32 = 0xFFFFFFFF
MASK64 = (1 << 64) - 1
#: Philox4x32's multipliers and Weyl key increments (Salmon et al., SC'11)
M0, M1 = 0xD2511F53, 0xCD9E8D57
W0, W1 = 0x9E3779B9, 0xBB67AE85
ROUNDS = 10
#: counters per chunk the reference computes at once (bounds its int64 temporaries)
_CHUNK = 1 << 22


def _mulhilo(m: int, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) 32-bit halves of the 64-bit product m * x for a constant m and uint32
    values x held in int64: the product is split so no int64 overflows."""
    m_lo, m_hi = m & 0xFFFF, m >> 16
    p_lo = x * m_lo  # < 2^48
    p_hi = x * m_hi  # < 2^48
    t = p_lo + ((p_hi & 0xFFFF) << 16)  # < 2^49
    return (p_hi >> 16) + (t >> 32), t & MASK32


def philox4x32_10(counter: tuple, key: tuple[int, int]) -> list[torch.Tensor]:
    """Philox4x32-10 of `counter` (four uint32 words: int64 tensors or ints, broadcast
    together) under `key` (two uint32 ints): the four output words as int64 tensors."""
    c = [x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=torch.int64) for x in counter]
    k0, k1 = key
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + W0) & MASK32, (k1 + W1) & MASK32
        hi0, lo0 = _mulhilo(M0, c[0])
        hi1, lo1 = _mulhilo(M1, c[2])
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
    return c


def _blocks(seed: int, offset: int, q0: int, q1: int, device: torch.device) -> list[torch.Tensor]:
    """The Philox words of counters q0 <= q < q1 of stream (seed, offset)."""
    seed, offset = seed & MASK64, offset & MASK64
    q = torch.arange(q0, q1, dtype=torch.int64, device=device)
    counter = (offset & MASK32, offset >> 32, q & MASK32, q >> 32)
    return philox4x32_10(counter, (seed & MASK32, seed >> 32))


_TWO_M24 = 2.0 ** -24
_TWO_M53 = 2.0 ** -53


def _u24(w: torch.Tensor, plus_one: bool = False) -> torch.Tensor:
    return ((w >> 8) + int(plus_one)).to(torch.float32) * _TWO_M24


def _u53(a: torch.Tensor, b: torch.Tensor, plus_one: bool = False) -> torch.Tensor:
    return (((a >> 5) << 26) + (b >> 6) + int(plus_one)).to(torch.float64) * _TWO_M53


def _box_muller(u1: torch.Tensor, u2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.sqrt(torch.log(u1) * -2.0)
    t = u2 * torch.tensor(2 * math.pi, dtype=u2.dtype, device=u2.device)
    return r * torch.cos(t), r * torch.sin(t)


def _standard(normal: bool, double: bool, w: list[torch.Tensor]) -> torch.Tensor:
    """[counters, E] values in [0, 1) (uniform) or standard normal from Philox words."""
    if not double:
        if not normal:
            return torch.stack([_u24(x) for x in w], 1)
        z0, z1 = _box_muller(_u24(w[0], True), _u24(w[1]))
        z2, z3 = _box_muller(_u24(w[2], True), _u24(w[3]))
        return torch.stack([z0, z1, z2, z3], 1)
    if not normal:
        return torch.stack([_u53(w[0], w[1]), _u53(w[2], w[3])], 1)
    z0, z1 = _box_muller(_u53(w[0], w[1], True), _u53(w[2], w[3]))
    return torch.stack([z0, z1], 1)


def elements_per_block(double: bool) -> int:
    """Consecutive elements one Philox block serves: 4 in float, 2 in double."""
    return 2 if double else 4


def standard(normal: bool, double: bool, seed: int, offset: int, numel: int, device: torch.device) -> torch.Tensor:
    """`numel` values of the stream (seed, offset): uniform in [0, 1) or standard normal,
    float64 with `double`, else float32 (flat, in linear-index order)."""
    per = elements_per_block(double)
    n_blocks = -(-numel // per)
    parts = [_standard(normal, double, _blocks(seed, offset, q0, min(q0 + _CHUNK, n_blocks), device)).reshape(-1)
             for q0 in range(0, n_blocks, _CHUNK)]
    dt = torch.float64 if double else torch.float32
    flat = torch.cat(parts) if parts else torch.empty(0, dtype=dt, device=device)
    return flat[:numel]


def uniform(u: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """u * (high - low) + low in u's dtype, each step rounded, kept below `high` (the
    largest value under it) where rounding reaches it and low < high."""
    lo = torch.tensor(low, dtype=u.dtype)
    hi = torch.tensor(high, dtype=u.dtype)
    v = u * (hi - lo).to(u.device) + lo.to(u.device)
    if bool(lo < hi):
        below = torch.nextafter(hi, lo).to(u.device)
        v = torch.where(v >= hi.to(u.device), below, v)
    return v


def normal(z: torch.Tensor, mean: float, std: float) -> torch.Tensor:
    """z * std + mean in z's dtype, each step rounded."""
    return z * torch.tensor(std, dtype=z.dtype).to(z.device) + torch.tensor(mean, dtype=z.dtype).to(z.device)


def streams(fusion: Any) -> int:
    """How many stream numbers the unseeded RNG ops of `fusion` span (0: it has none)."""
    return max((e.stream + 1 for e in fusion.exprs() if isinstance(e, RNGOp) and not e.has_seed), default=0)


def draw(device: torch.device, streams: int) -> tuple[int, int]:
    """(seed, base offset) for one fusion execution's unseeded RNG ops (streams base ..
    base + streams - 1), drawn from PyTorch's default generator of `device`, which advances:
    each execution gives new numbers, and torch.manual_seed repeats a run.

    CUDA: the generator's seed, and its Philox offset / 4 as the base; the offset then
    advances by 4 per stream, so the counters used are ones no PyTorch kernel of that
    generator uses (its offset counts 32-bit words per thread; counter word offset / 4).
    Elsewhere: a 63-bit seed drawn from the generator, base 0."""
    if device.type == "cuda":
        if torch.cuda.is_current_stream_capturing():
            return draw_on_device(device)
        index = device.index if device.index is not None else torch.cuda.current_device()
        gen = torch.cuda.default_generators[index]
        seed, offset = gen.initial_seed(), gen.get_offset()
        base = -(-offset // 4)
        gen.set_offset(4 * (base + max(streams, 1)))
        return seed & MASK64, base
    seed = int(torch.empty((), dtype=torch.int64).random_().item())
    return seed, 0


def draw_on_device(device: torch.device) -> torch.Tensor:
    """(seed, base offset) as a device tensor drawn by a PyTorch RNG kernel: what a fusion
    execution captured in a CUDA graph uses. The graph replays that kernel, which PyTorch
    feeds its generator's offset at each replay, so every replay draws new numbers (and
    torch.manual_seed repeats them); a host-side draw would be frozen into the graph. Both
    are 63-bit: the streams base .. base + streams - 1 never wrap."""
    return torch.empty(2, dtype=torch.int64, device=device).random_()


def generator_state(device: torch.device) -> torch.Tensor:
    """The state of PyTorch's default generator of `device` (what `draw` reads), to
    replay an execution's draw with `set_generator_state`."""
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def set_generator_state(device: torch.device, state: torch.Tensor) -> None:
    """Put PyTorch's default generator of `device` back to `state` (`generator_state`)."""
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def generator_states(inputs: Sequence[Any]) -> list[tuple[torch.device, torch.Tensor]]:
    """The states of the generators an execution on `inputs` may draw from: the CPU's and
    that of each CUDA device an input tensor is on."""
    devices = dict.fromkeys([torch.device("cpu")] + [x.device for x in inputs
                                                       if isinstance(x, torch.Tensor) and x.device.type == "cuda"])
    return [(d, generator_state(d)) for d in devices]


@contextlib.contextmanager
def replaying(states: list[tuple[torch.device, torch.Tensor]]) -> Iterator[None]:
    """Inside: the generators at `states` (`generator_states`), so an execution draws the
    seeds and offsets one drew from there; after: every one as it was before."""
    now = [(d, generator_state(d)) for d, _ in states]
    for d, st in states:
        set_generator_state(d, st)
    try:
        yield
    finally:
        for d, st in now:
            set_generator_state(d, st)


def as_int64(x: int) -> int:
    """A 64-bit pattern as the signed value a kernel's `long long` parameter packs."""
    x &= MASK64
    return x - (1 << 64) if x >= 1 << 63 else x
