"""Progress comes at least every 10 s (or every round), as plain lines off a terminal."""

import io

from fedclust_jax.progress import PROGRESS_EVERY_S, ChunkSchedule, Progress, chunk_length


def simulate(rounds, seconds_per_round, compile_s=3.0, fixed=None):
    """Chunk ends and the wall time each chunk took, under a fake clock."""
    now = [0.0]
    schedule = ChunkSchedule(rounds, fixed, clock=lambda: now[0])
    start, chunks = 0, []
    while start < rounds:
        stop = schedule.next_stop(start)
        took = (stop - start) * seconds_per_round + (compile_s if not chunks else 0.0)
        now[0] += took
        chunks.append((stop, took))
        start = stop
    return chunks


def test_chunks_keep_reports_within_ten_seconds():
    for spr in (1e-4, 0.01, 0.3, 2.0, 9.0):
        chunks = simulate(300, spr)
        assert chunks[-1][0] == 300
        assert all(took <= PROGRESS_EVERY_S for _, took in chunks[1:]), (spr, chunks)
        assert len(lengths(chunks)) <= 3  # few compiled chunk lengths


def lengths(chunks):
    return {b - a for (a, _), (b, _) in zip([(0, 0)] + chunks, chunks)}


def test_fast_rounds_run_in_few_chunks_and_slow_rounds_one_at_a_time():
    assert len(simulate(300, 0.05)) == 5            # 1, 1, then 100, 100, 98
    assert [s for s, _ in simulate(5, 240.0)] == [1, 2, 3, 4, 5]


def test_a_rest_faster_than_a_compile_stays_at_one_round_a_chunk():
    """298 rounds of 0.1 ms (0.03 s) or 2 of 10 ms cost less than the 3 s compile of a
    longer chunk: one program; 298 rounds of 20 ms (6 s) are worth a second one."""
    assert lengths(simulate(300, 1e-4)) == {1}
    assert lengths(simulate(4, 0.01)) == {1}
    assert lengths(simulate(300, 0.02)) == {1, 149}


def test_fixed_chunk_length_is_a_divisor():
    assert [s for s, _ in simulate(12, 1.0, fixed=5)] == [4, 8, 12] or \
        [s for s, _ in simulate(12, 1.0, fixed=5)] == [6, 12]
    assert chunk_length(300, None) == 30


class Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def test_plain_lines_off_a_terminal_and_resume_message():
    s = Stream(False)
    bar = Progress("ifca", 10, start=4, stream=s, min_interval_s=0.0)
    bar.update(7, "train loss 1")
    bar.update(10)
    text = s.getvalue()
    assert "\r" not in text
    assert text.splitlines()[0] == "ifca: resuming from round 4 of 10"
    assert "7/10" in text and "10/10" in text and len(text.splitlines()) == 3


def test_terminal_updates_in_place():
    s = Stream(True)
    bar = Progress("ifca", 2, stream=s)
    bar.update(1)
    bar.update(2)
    assert s.getvalue().count("\r") == 2 and s.getvalue().endswith("\n")


def test_off_terminal_lines_are_rate_limited_but_the_last_is_written():
    s = Stream(False)
    bar = Progress("fedavg", 100, stream=s, min_interval_s=3600.0)
    for done in range(1, 101):
        bar.update(done)
    lines = s.getvalue().splitlines()
    assert len(lines) == 2 and "100/100" in lines[-1]
