"""The watch that names a GPU communication a peer never joins (fuser/host/communication.py),
checked on the CPU with stand-in events: the GPU launch test (tests/test_multidevice_launch.py)
shows it on a real NCCL hang."""
from __future__ import annotations

from fuser.host.communication import _Watch


class _Event:
    """An event that reports what the test says."""

    def __init__(self) -> None:
        self.done = False

    def query(self) -> bool:
        return self.done


def test_the_watch_names_each_overdue_communication_once_and_recycles_finished_events(capsys):
    w = _Watch()
    w.timeout_s = 5.0
    first, second, third = _Event(), _Event(), _Event()
    w.queue.extend([(100.0, first, "Communication 0 (allreduce of T2)"),
                    (101.0, second, "Communication 1 (allgather of T4)"),
                    (109.0, third, "Communication 2 (allreduce of T6)")])
    w.check(99.0)  # nothing past its deadline: no event is even asked
    assert len(w.queue) == 3 and not w.spare and capsys.readouterr().err == ""
    first.done = True
    w.check(102.0)  # past two deadlines: the first finished (its event is kept to record
    # again), the second did not and is named; the third's deadline is still ahead
    err = capsys.readouterr().err
    assert w.spare == [first] and [q[1] for q in w.queue] == [third], w.queue
    assert "fuser: rank 0: Communication 1 (allgather of T4) has not finished after 5 s" in err, err
    assert "Communication 0" not in err and "Communication 2" not in err, err
    w.check(103.0)
    assert capsys.readouterr().err == ""  # not named again


def test_a_hung_collective_replayed_from_a_graph_ends_the_process(capsys, monkeypatch):
    """NCCL's watchdog does not see collectives replayed from a CUDA graph: once named, the
    watch ends the process instead of leaving the rank waiting forever."""
    from types import SimpleNamespace

    from fuser.host import communication

    monkeypatch.setattr(communication, "val_str", lambda v: v.name)  # (a stand-in tensor)
    ended = []
    w = _Watch()
    w.timeout_s = 5.0
    w.abort = lambda: ended.append(True)
    replayed = communication._Replayed((SimpleNamespace(number=0, kind="allreduce", inp=SimpleNamespace(name="T2")),))
    plain, hung = _Event(), _Event()
    w.queue.extend([(100.0, plain, "Communication 1 (allgather of T4)"), (101.0, hung, replayed)])
    w.check(100.5)  # a plainly issued one is named: NCCL's watchdog ends the process later
    assert "Communication 1 (allgather of T4) has not finished" in capsys.readouterr().err and not ended
    w.check(102.0)
    err = capsys.readouterr().err
    assert "Communication 0 (allreduce of T2) (replayed from a CUDA graph) has not finished" in err, err
    assert "ending the process" in err and ended == [True], err
