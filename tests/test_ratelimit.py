"""The token bucket guarding fresh look-ups (and imitating the kubelet's own limit)."""

from __future__ import annotations

from manualclock import ManualClock

from exporter.ratelimit import TokenBucket


def test_burst_then_refill_at_rate() -> None:
    """A full bucket allows ``burst`` calls at once, then one per 1/rate seconds, no hoarding."""
    clock = ManualClock(100.0)
    bucket = TokenBucket(rate_per_s=2.0, burst=3, clock=clock)
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5
    assert [bucket.try_take(), bucket.try_take()] == [True, False]
    clock.now += 60  # a long quiet spell refills to burst, not beyond
    assert [bucket.try_take() for _ in range(4)] == [True, True, True, False]


def test_half_a_token_lets_no_call_through() -> None:
    """A quarter second after the one token went, half a token is there: no call, or
    look-ups would run ahead of the rate that keeps them under the kubelet's limit."""
    clock = ManualClock(100.0)
    bucket = TokenBucket(rate_per_s=2.0, burst=1, clock=clock)
    assert bucket.try_take()
    clock.now += 0.25
    assert not bucket.try_take()
    clock.now += 0.25
    assert bucket.try_take()
