"""The ETA follows measured progress (mlmix/progress.py): once a phase has finished, the next phase's
line scales its expectation and the rest's by the measured pace; the flop rate is a median over a
window, so a loaded machine is seen as loaded."""

import time

import pytest

from mlmix import progress


def _lines(monkeypatch) -> list[str]:
    said: list[str] = []
    monkeypatch.setattr(progress, "say", said.append)
    monkeypatch.setattr(progress, "_interactive", lambda stream: False)
    monkeypatch.setenv(progress.THRESHOLD_ENV, "0")
    return said


def test_eta_follows_the_measured_pace(monkeypatch):
    said = _lines(monkeypatch)
    monkeypatch.setattr(progress, "flop_rate", lambda: 1e9)
    clock = iter([0.0, 4.0, 10.0, 10.0])  # phase "a" takes 4 s for an expected 1 s
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    with progress.Progress("job", [("a", 1.0), ("b", 2.0), ("c", 3.0)]) as bar:
        with bar.phase("a"):
            pass
        assert bar.pace() == pytest.approx((4.0 + 1.5) / (1.0 + 1.5))  # shrunk by a quarter of the 6 s
        with bar.phase("b"):
            pass
    a, b = said[1:3]
    assert a == "job: a (expected 1 s)"
    # b: 2.2 x 2 s expected; the rest (b and c): 2.2 x 5 s = 11 s
    assert b == "job: b (expected 4 s at the pace so far, 2.2x the estimate; ETA 11 s)"


def test_one_short_misestimated_phase_barely_moves_the_pace(monkeypatch):
    _lines(monkeypatch)
    monkeypatch.setattr(progress, "flop_rate", lambda: 1e9)
    clock = iter([0.0, 0.1, 1.0, 1.0])  # a 17 s phase done in 0.1 s, before a 600 s one
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    with progress.Progress("job", [("a", 17.0), ("b", 600.0), ("c", 100.0)]) as bar:
        with bar.phase("a"):
            pass
        assert 0.9 < bar.pace() < 1.0


def test_pace_unknown_until_a_phase_worth_measuring_has_finished(monkeypatch):
    _lines(monkeypatch)
    with progress.Progress("job", [("a", 0.01), ("b", 5.0)]) as bar:
        assert bar.pace() is None
        with bar.phase("a"):
            time.sleep(0.02)
        assert bar.pace() is None  # 0.01 s expected: too little to scale a 5 s estimate by


def test_flop_rate_is_a_median_over_the_window(monkeypatch):
    """Products alternately fast and slow (a machine shared with other jobs): the best-of-two rate of
    the old measurement saw only the fast ones; the median sees the slow majority."""
    monkeypatch.setattr(progress, "product_times", lambda: [0.01, 0.10, 0.01, 0.10, 0.10])
    progress.flop_rate.cache_clear()
    try:
        rate = progress.flop_rate()
    finally:
        progress.flop_rate.cache_clear()
    assert rate == pytest.approx(2 * 512**3 / 0.10)


def test_product_times_fill_the_window():
    times = progress.product_times(window=0.05, most=1000)
    assert len(times) >= 3 and all(t > 0 for t in times)
    assert sum(times) >= 0.03  # repeated for (about) the window, not stopped after two
