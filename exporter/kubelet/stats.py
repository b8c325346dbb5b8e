"""Counts and latencies of the calls made to the kubelet, as plain data.

Kept apart from the gRPC client so the exposition can render them without importing
gRPC, and so the counters stay the client's own (nothing converts them in between).
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass

__all__ = [
    "LATENCY_BUCKETS_S",
    "PRESET_CODES",
    "KubeletRequestStats",
    "LatencyHistogram",
    "RequestCount",
    "StatsRecorder",
]

# Upper bounds of the request latency histogram; a local unix socket answers in
# milliseconds, a busy or hung kubelet in seconds up to the deadline.
LATENCY_BUCKETS_S = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    math.inf,
)


@dataclass(frozen=True, slots=True)
class RequestCount:
    """Requests of one method that ended with one gRPC code ("OK", "UNAVAILABLE", ...)."""

    method: str
    code: str
    count: int


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Latency of one method's requests, shaped like a Prometheus histogram."""

    method: str
    buckets: tuple[tuple[float, int], ...]  # (upper bound in seconds, cumulative count); inf last
    sum_seconds: float
    count: int


@dataclass(frozen=True, slots=True)
class KubeletRequestStats:
    """Every real call to the kubelet so far; local refusals are not calls."""

    requests: tuple[RequestCount, ...] = ()  # sorted by (method, code)
    durations: tuple[LatencyHistogram, ...] = ()  # sorted by method

    def count(self, *, method: str, code: str) -> int:
        """Calls of ``method`` that ended with ``code``; 0 when there were none."""
        return next((r.count for r in self.requests if (r.method, r.code) == (method, code)), 0)


# The codes a PodResources call can end with, counted from 0 for every method the
# client calls: a series that first appears at 1 is an increase rate() never sees
# (prometheus/docs instrumentation "Avoid missing metrics"; go-grpc-prometheus
# pre-registers every code likewise). INTERNAL: a reply that does not decode.
PRESET_CODES = (
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "RESOURCE_EXHAUSTED",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
)


class StatsRecorder:
    """Counts and times calls as they happen; ``snapshot()`` copies them out. Each of
    ``methods`` has a count of every ``PRESET_CODES`` code from the start; any other
    method (v1alpha1 List, called only on a kubelet without v1) from its first call."""

    def __init__(self, methods: tuple[str, ...] = ()) -> None:
        self._codes: Counter[tuple[str, str]] = Counter(
            dict.fromkeys(((m, c) for m in methods for c in PRESET_CODES), 0)
        )
        self._buckets: dict[str, list[int]] = {}  # per bucket, not cumulative
        self._sums: dict[str, float] = {}

    def record(self, *, method: str, code: str, seconds: float) -> None:
        if method not in self._buckets:  # its first call: its other codes count from 0
            self._codes.update(dict.fromkeys(((method, c) for c in PRESET_CODES), 0))
        self._codes[method, code] += 1
        counts = self._buckets.setdefault(method, [0] * len(LATENCY_BUCKETS_S))
        counts[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
        self._sums[method] = self._sums.get(method, 0.0) + seconds

    def snapshot(self) -> KubeletRequestStats:
        durations = []
        for method in sorted(self._buckets):
            cumulative, total = [], 0
            for bound, n in zip(LATENCY_BUCKETS_S, self._buckets[method], strict=True):
                total += n
                cumulative.append((bound, total))
            durations.append(
                LatencyHistogram(
                    method=method,
                    buckets=tuple(cumulative),
                    sum_seconds=self._sums[method],
                    count=total,
                )
            )
        return KubeletRequestStats(
            requests=tuple(
                RequestCount(method=m, code=c, count=n) for (m, c), n in sorted(self._codes.items())
            ),
            durations=tuple(durations),
        )
