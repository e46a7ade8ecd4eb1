"""`python -m fuser demo` on the CPU: seed 001 segmented, run through the reference executor
(what ran is named per segment) and checked against eager PyTorch."""
from fuser.cli.demo import run_demo


def test_demo_names_what_ran_and_matches_eager(capsys):
    assert run_demo("cpu") == 0
    out = capsys.readouterr().out
    assert "reference (inner_outer_persistent)" in out
    assert "all 5 outputs match eager PyTorch" in out
    assert "torch.compile" not in out  # timings are for the GPU
