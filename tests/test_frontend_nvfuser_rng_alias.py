"""RNG and aliased outputs as nvFuser defines them (issue 10, item 5): uniform / normal
with rng_seed and rng_offset give the same numbers for the same pair; without them each
call draws from PyTorch's generator (distinct numbers, the generator advances, and
torch.manual_seed repeats a run). add_output(t, alias_input) writes into the input and,
unless t is also added without it, is not returned; added both ways it is returned where
the plain add_output put it, as the updated input (Thunder's copy_)."""
import torch

from fuser import DataType, FusionDefinition


def _rng_fusion(seeded: bool):
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1, -1], contiguity=[True, True])
        kw = {}
        if seeded:
            kw = dict(rng_seed=fd.define_scalar(dtype=DataType.Int), rng_offset=fd.define_scalar(dtype=DataType.Int))
        shape = [t.size(0), t.size(1)]
        fd.add_output(fd.ops.uniform(fd.define_scalar(-1.0), fd.define_scalar(1.0), shape, **kw))
        fd.add_output(fd.ops.normal(fd.define_scalar(2.0), fd.define_scalar(0.5), shape, dtype=DataType.Double, **kw))
    return fd


def test_seed_and_offset_reproduce_the_numbers():
    fd = _rng_fusion(seeded=True)
    x = torch.empty(64, 32)
    u1, n1 = fd.execute([x, 1234, 8])
    u2, n2 = fd.execute([x, 1234, 8])
    assert torch.equal(u1, u2) and torch.equal(n1, n2)
    u3, n3 = fd.execute([x, 1234, 12])  # another offset
    u4, _ = fd.execute([x, 99, 8])  # another seed
    assert not torch.equal(u1, u3) and not torch.equal(n1, n3) and not torch.equal(u1, u4)
    # the distributions asked for
    assert u1.dtype == torch.float32 and n1.dtype == torch.float64
    assert bool(((u1 >= -1) & (u1 < 1)).all()) and abs(u1.mean().item()) < 0.1
    assert abs(n1.mean().item() - 2.0) < 0.05 and abs(n1.std().item() - 0.5) < 0.05


def test_seeded_numbers_do_not_touch_the_generator():
    fd = _rng_fusion(seeded=True)
    torch.manual_seed(5)
    state = torch.get_rng_state()
    fd.execute([torch.empty(4, 4), 1, 0])
    assert torch.equal(torch.get_rng_state(), state)


def test_unseeded_draws_from_pytorchs_generator_and_advances_it():
    fd = _rng_fusion(seeded=False)
    x = torch.empty(16, 8)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    u1, n1 = fd.execute([x])
    assert not torch.equal(torch.get_rng_state(), before)  # the generator advanced
    u2, n2 = fd.execute([x])
    assert not torch.equal(u1, u2) and not torch.equal(n1, n2)  # distinct numbers per call
    torch.manual_seed(0)  # PyTorch's seed repeats the run
    u3, n3 = fd.execute([x])
    assert torch.equal(u1, u3) and torch.equal(n1, n3)


def test_rand_like_and_randn_like_follow_the_same_rules():
    with FusionDefinition() as fd:
        t = fd.define_tensor(shape=[-1], contiguity=[True])
        seed, offset = fd.define_scalar(dtype=DataType.Int), fd.define_scalar(dtype=DataType.Int)
        fd.add_output(fd.ops.rand_like(t, rng_seed=seed, rng_offset=offset))
        fd.add_output(fd.ops.randn_like(t))
    x = torch.empty(32)
    a1, b1 = fd.execute([x, 3, 4])
    a2, b2 = fd.execute([x, 3, 4])
    assert torch.equal(a1, a2) and not torch.equal(b1, b2)


# --- aliased outputs ------------------------------------------------------------------------------------
def test_alias_only_writes_into_the_input_and_is_not_returned():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        b = fd.define_tensor(shape=[-1], contiguity=[True])
        fd.add_output(fd.ops.mul(a, b), alias_input=a)
        fd.add_output(fd.ops.add(a, b))
    x, y = torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0])
    (s,) = fd.execute([x, y])
    assert x.tolist() == [3.0, 8.0]  # written in place
    assert s.tolist() == [4.0, 6.0]  # computed from the input as it was


def test_alias_then_plain_output_returns_the_updated_input_in_the_plain_position():
    # Thunder's copy_: set(x) written into the destination, and the same tensor also returned
    with FusionDefinition() as fd:
        src = fd.define_tensor(shape=[-1], contiguity=[True])
        dst = fd.define_tensor(shape=[-1], contiguity=[True])
        copied = fd.ops.set(fd.ops.mul(src, 2.0))
        fd.add_output(copied, alias_input=dst)
        fd.add_output(fd.ops.neg(src))
        fd.add_output(copied)
    assert fd.outputs() == [5, 4]
    x, y = torch.tensor([1.0, 2.0]), torch.zeros(2)
    neg, out = fd.execute([x, y])
    assert y.tolist() == [2.0, 4.0] and neg.tolist() == [-1.0, -2.0]
    assert out is y  # the returned tensor is the input it was written into


def test_plain_then_alias_output_keeps_its_position():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        r = fd.ops.add(a, 1.0)
        fd.add_output(r)
        fd.add_output(fd.ops.mul(a, 3.0))
        fd.add_output(r, alias_input=a)
    x = torch.tensor([1.0, 2.0])
    r_out, m = fd.execute([x])
    assert r_out is x and x.tolist() == [2.0, 3.0] and m.tolist() == [3.0, 6.0]
    # validate compares against the reference on the inputs as they were before the update
    fd.validate([torch.tensor([5.0, 6.0])])


def test_aliased_definition_reprints_and_rebuilds():
    with FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1], contiguity=[True])
        r = fd.ops.add(a, 1.0)
        fd.add_output(r, alias_input=a)
        fd.add_output(r)
    assert "fd.add_output(T2, T0)\n    fd.add_output(T2)\n" in str(fd)
    again = FusionDefinition(fd.id())
    x = torch.tensor([0.0, 1.0])
    (out,) = again.execute([x])
    assert out is x and x.tolist() == [1.0, 2.0]
