"""The kubelet request counts and latency histogram, as StatsRecorder keeps them."""

from __future__ import annotations

from exporter.config import DEFAULT_KUBELET_TIMEOUT_S
from exporter.kubelet.stats import LATENCY_BUCKETS_S, KubeletRequestStats, StatsRecorder


def _buckets(recorder: StatsRecorder, method: str) -> dict[float, int]:
    """The cumulative count of each bucket of ``method``'s histogram, by upper bound."""
    (histogram,) = (h for h in recorder.snapshot().durations if h.method == method)
    return dict(histogram.buckets)


class TestLatencyHistogram:
    def test_a_call_on_a_bound_is_in_that_bound_s_bucket(self) -> None:
        """Buckets are "less than or equal": a call of exactly 5 ms counts in le=0.005,
        one a little longer only from le=0.01 on."""
        recorder = StatsRecorder()
        recorder.record(method="List", code="OK", seconds=0.005)
        recorder.record(method="List", code="OK", seconds=0.0051)
        buckets = _buckets(recorder, "List")
        assert (buckets[0.0025], buckets[0.005], buckets[0.01]) == (0, 1, 2)

    def test_a_call_past_the_last_bound_counts_in_inf_only(self) -> None:
        """A call longer than the largest finite bound (a hung kubelet) is in +Inf."""
        recorder = StatsRecorder()
        recorder.record(method="List", code="DEADLINE_EXCEEDED", seconds=30.0)
        buckets = _buckets(recorder, "List")
        assert (buckets[LATENCY_BUCKETS_S[-2]], buckets[float("inf")]) == (0, 1)

    def test_a_call_cut_at_the_default_deadline_is_in_a_finite_bucket(self) -> None:
        """A call the default --kubelet.timeout ends, a little late, still lands below
        +Inf: a hung kubelet shows as calls of the deadline's length."""
        recorder = StatsRecorder()
        recorder.record(
            method="List", code="DEADLINE_EXCEEDED", seconds=DEFAULT_KUBELET_TIMEOUT_S + 0.1
        )
        finite = [n for bound, n in _buckets(recorder, "List").items() if bound != float("inf")]
        assert 1 == finite[-1]

    def test_sum_is_the_seconds_of_every_call(self) -> None:
        """_sum adds up every call's seconds, so rate(_sum)/rate(_count) is the mean."""
        recorder = StatsRecorder()
        for seconds in (0.25, 0.5, 2.0):
            recorder.record(method="List", code="OK", seconds=seconds)
        (histogram,) = recorder.snapshot().durations
        assert (histogram.sum_seconds, histogram.count) == (2.75, 3)

    def test_histograms_are_sorted_by_method(self) -> None:
        """Histograms come out by method name, whatever order the calls were made in:
        the page is the same for the same calls."""
        recorder = StatsRecorder()
        for method in ("List", "GetAllocatableResources", "Get"):
            recorder.record(method=method, code="OK", seconds=0.001)
        methods = [h.method for h in recorder.snapshot().durations]
        assert ["Get", "GetAllocatableResources", "List"] == methods


class TestCount:
    def test_a_method_and_code_never_seen_count_0(self) -> None:
        """count() of a call never made is 0, as its series would read."""
        recorder = StatsRecorder(methods=("List",))
        recorder.record(method="List", code="UNAVAILABLE", seconds=0.001)
        stats = recorder.snapshot()
        assert (1, 0, 0, 0) == (
            stats.count(method="List", code="UNAVAILABLE"),
            stats.count(method="List", code="OK"),
            stats.count(method="Get", code="UNAVAILABLE"),
            KubeletRequestStats().count(method="List", code="OK"),
        )
