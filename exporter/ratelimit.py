"""A token bucket: ``burst`` calls at once, refilled at ``rate_per_s``.

The same shape as golang.org/x/time/rate, which the kubelet uses to guard its socket:
the exporter guards its fresh look-ups with it, and the simulated kubelet imitates the
kubelet's limit with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    def __init__(
        self, *, rate_per_s: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._rate_per_s = rate_per_s
        self._burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._updated = clock()

    def try_take(self) -> bool:
        """Spend one token if there is one."""
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._updated) * self._rate_per_s)
        self._updated = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True
