"""OutageLog and Throttle: one line per start, change and end; one per interval."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from manualclock import ManualClock
from structlog.testing import capture_logs

from exporter.outage import OutageLog, Throttle, flush_held_lines


def events(logs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["event"], e["log_level"]) for e in logs]


class TestOutageLog:
    def test_repeats_of_one_failure_log_once(self) -> None:
        """A hundred identical failures are one warning."""
        outage = OutageLog("kubelet", clock=ManualClock(100.0))
        with capture_logs() as logs:
            for _ in range(100):
                outage.failed(kind="KubeletUnavailable", error="List: UNAVAILABLE")
        assert [("kubelet_failed", "warning")] == events(logs)
        assert ("KubeletUnavailable", "List: UNAVAILABLE") == (logs[0]["kind"], logs[0]["error"])

    def test_a_change_of_kind_is_logged(self) -> None:
        """A failure of another kind is a new line, naming the previous kind and the count."""
        outage = OutageLog("kubelet", clock=ManualClock(100.0))
        with capture_logs() as logs:
            outage.failed(kind="KubeletUnavailable", error="a")
            outage.failed(kind="KubeletUnavailable", error="a")
            outage.failed(kind="KubeletRateLimited", error="b")
            outage.failed(kind="KubeletRateLimited", error="b")
        assert [("kubelet_failed", "warning"), ("kubelet_failure_changed", "warning")] == events(
            logs
        )
        assert ("KubeletRateLimited", "KubeletUnavailable", 3) == (
            logs[1]["kind"],
            logs[1]["previous_kind"],
            logs[1]["failures"],
        )

    def test_a_change_of_key_within_one_kind_is_logged(self) -> None:
        """Same kind, another key (which call failed): a line; the same key again: none;
        a new outage forgets the key."""
        outage = OutageLog("kubelet", clock=ManualClock(100.0))
        with capture_logs() as logs:
            outage.failed(kind="KubeletRateLimited", error="a", key=True)
            outage.failed(kind="KubeletRateLimited", error="b", key=False)
            outage.failed(kind="KubeletRateLimited", error="b", key=False)
            outage.succeeded()
            outage.failed(kind="KubeletRateLimited", error="b", key=False)
        assert [e["event"] for e in logs] == [
            "kubelet_failed",
            "kubelet_failure_changed",
            "kubelet_recovered",
            "kubelet_failed",
        ]

    def test_the_end_is_logged_with_count_and_duration(self) -> None:
        """Recovery says how many failures there were and for how long."""
        clock = ManualClock(100.0)
        outage = OutageLog("kubelet", clock=clock)
        with capture_logs() as logs:
            outage.succeeded()
            for _ in range(7):
                outage.failed(kind="KubeletUnavailable", error="a")
                clock.now += 10
            outage.succeeded(socket="/s")
            outage.succeeded()
        assert [("kubelet_failed", "warning"), ("kubelet_recovered", "info")] == events(logs)
        assert {"failures": 7, "duration_seconds": 70.0, "last_kind": "KubeletUnavailable"} == {
            k: logs[1][k] for k in ("failures", "duration_seconds", "last_kind")
        }

    def test_the_duration_is_given_to_the_millisecond(self) -> None:
        """An outage shorter than a second still says how long it was, in milliseconds."""
        clock = ManualClock(100.0)
        outage = OutageLog("kubelet", clock=clock)
        with capture_logs() as logs:
            outage.failed(kind="KubeletUnavailable", error="a")
            clock.advance(0.2504)
            outage.succeeded()
        assert 0.25 == logs[1]["duration_seconds"]

    def test_a_new_outage_starts_afresh(self) -> None:
        """After a recovery the next failure is logged again, counted from one."""
        outage = OutageLog("kubelet", clock=ManualClock(100.0))
        with capture_logs() as logs:
            outage.failed(kind="A", error="a")
            outage.succeeded()
            outage.failed(kind="A", error="a")
            outage.succeeded()
        assert ["kubelet_failed", "kubelet_recovered"] * 2 == [e["event"] for e in logs]
        assert [1, 1] == [e["failures"] for e in logs if e["event"] == "kubelet_recovered"]

    def test_a_flapping_failure_is_not_a_line_every_poll(self) -> None:
        """A kubelet whose rate limit another client spends fails every other poll: each
        failure is an outage of one poll, and two lines each made a line every poll
        (60 a minute at 1 s polls) for as long as the neighbour stays. After two outages,
        one outage a minute is told; those that came and went in between are counted in
        the next line, and none is left untold once the flapping stops."""
        clock = ManualClock(100.0)
        outage = OutageLog("kubelet", clock=clock)
        with capture_logs() as logs:
            for _ in range(300):  # 10 minutes of polls 1 s apart, every other one failing
                outage.failed(kind="KubeletRateLimited", error="rejected by rate limit")
                clock.advance(1.0)
                outage.succeeded()
                clock.advance(1.0)
            for _ in range(120):  # the neighbour is gone: 2 minutes of good polls
                outage.succeeded()
                clock.advance(1.0)
        untold = sum(e.get("outages_not_logged", 0) for e in logs)
        told = sum(1 for e in logs if e["event"] == "kubelet_failed")
        # Two outages at once, then one a minute over 12 minutes: two lines each at most.
        assert (True, 300) == (len(logs) <= 2 * (2 + 12), told + untold), len(logs)
        assert "kubelet_recovered" == logs[-1]["event"]

    def test_a_long_outage_after_flapping_is_told_within_a_minute(self) -> None:
        """An outage that starts while the lines of a flapping one are held back is told
        once a minute has passed, not only when it ends."""
        clock = ManualClock(100.0)
        outage = OutageLog("kubelet", clock=clock)
        with capture_logs() as logs:
            for _ in range(3):
                outage.failed(kind="KubeletRateLimited", error="rate")
                clock.advance(1.0)
                outage.succeeded()
                clock.advance(1.0)
            began = clock.now
            told_after = None
            for _ in range(120):
                outage.failed(kind="KubeletUnavailable", error="gone")
                if told_after is None and logs[-1].get("kind") == "KubeletUnavailable":
                    told_after = clock.now - began
                clock.advance(1.0)
        assert told_after is not None
        assert told_after <= 60.0
        # The third short outage came and went untold: the late line counts it.
        assert ("kubelet_failed", 1) == (logs[-1]["event"], logs[-1]["outages_not_logged"])

    def test_outages_untold_at_exit_are_told_by_the_flush(self) -> None:
        """The exit's flush tells the outages that came and went untold: a kubelet that
        flapped in the last minute before a stop is not left out of the log."""
        clock = ManualClock(100.0)
        outage = OutageLog("flapped_at_exit", clock=clock)
        with capture_logs() as logs:
            for _ in range(5):
                outage.failed(kind="KubeletUnavailable", error="gone")
                clock.advance(1.0)
                outage.succeeded()
                clock.advance(1.0)
            told = len([e for e in logs if e["event"].startswith("flapped_at_exit")])
            flush_held_lines()
            flush_held_lines()
        ours = [e for e in logs if e["event"].startswith("flapped_at_exit")]  # not earlier tests'
        assert (4, "flapped_at_exit_recovered", 3, 3) == (
            told,
            ours[-1]["event"],
            ours[-1]["outages_not_logged"],
            ours[-1]["failures"],
        )
        assert 5 == len(ours)

    def test_an_outage_going_on_untold_at_exit_is_told_by_the_flush(self) -> None:
        """A kubelet that flapped, then went down for good less than a minute before a
        stop: the exit's flush tells that outage's start (its last failure), counting
        the short one untold, instead of a kubelet_recovered line that would end the log
        as if the kubelet were back."""
        clock = ManualClock(100.0)
        outage = OutageLog("kubelet", clock=clock)
        with capture_logs() as logs:
            for _ in range(3):
                outage.failed(kind="KubeletUnavailable", error="gone")
                clock.advance(1.0)
                outage.succeeded(socket="/s")
                clock.advance(1.0)
            for n in range(3):
                outage.failed(kind="KubeletUnavailable", error=f"gone for good {n}", socket="/s")
                clock.advance(10.0)
            told = len(logs)
            flush_held_lines()
            flush_held_lines()
        assert (4, 5) == (told, len(logs))
        assert {
            "event": "kubelet_failed",
            "kind": "KubeletUnavailable",
            "error": "gone for good 2",
            "outages_not_logged": 1,
            "socket": "/s",
            "log_level": "warning",
        } == logs[-1]

    def test_the_line_telling_untold_outages_sums_them(self) -> None:
        """The kubelet_recovered line that tells outages which came and went untold gives
        their failures and time summed, the last one's kind and the success's fields; the
        next such line counts only the outages since."""
        clock = ManualClock(100.0)
        outage = OutageLog("kubelet", clock=clock)

        def short_outage(kind: str, failures: int) -> None:
            for _ in range(failures):
                outage.failed(kind=kind, error="e")
                clock.advance(0.625)
            outage.succeeded(socket="/s")
            clock.advance(1.0)

        with capture_logs() as logs:
            for _ in range(2):  # told: the burst
                short_outage("KubeletUnavailable", 1)
            told = len(logs)
            short_outage("KubeletUnavailable", 2)
            short_outage("KubeletUnavailable", 2)
            short_outage("KubeletRateLimited", 2)
            untold = len(logs)
            clock.advance(60.0)
            outage.succeeded(socket="/s")
            short_outage("KubeletUnavailable", 1)  # untold: the minute's line was spent
            clock.advance(60.0)
            outage.succeeded(socket="/s")
        fields = ("event", "outages_not_logged", "failures", "duration_seconds", "last_kind")
        assert (4, 4) == (told, untold)
        assert [
            ("kubelet_recovered", 3, 6, 3.75, "KubeletRateLimited", "/s"),
            ("kubelet_recovered", 1, 1, 0.625, "KubeletUnavailable", "/s"),
        ] == [(*(e[f] for f in fields), e["socket"]) for e in logs[4:]]

    def test_after_two_outages_one_starting_within_the_minute_waits_for_its_line(
        self,
    ) -> None:
        """Two outages are told at once; a third starting 40 s after the first has no line
        until a minute has passed since the first was told, then it is told."""
        clock = ManualClock(100.0)
        outage = OutageLog("kubelet", clock=clock)
        with capture_logs() as logs:
            for _ in range(2):
                outage.failed(kind="KubeletUnavailable", error="gone")
                clock.advance(0.5)
                outage.succeeded()
            clock.now = 140.0
            outage.failed(kind="KubeletUnavailable", error="gone")
            held = len(logs)
            clock.now = 161.0
            outage.failed(kind="KubeletUnavailable", error="gone")
        assert (4, "kubelet_failed") == (held, logs[-1]["event"])

    def test_a_lone_outage_says_nothing_of_untold_ones(self) -> None:
        """A lone outage's lines are as they always were: no outages_not_logged."""
        clock = ManualClock(100.0)
        outage = OutageLog("kubelet", clock=clock)
        with capture_logs() as logs:
            outage.failed(kind="KubeletUnavailable", error="gone", socket="/s")
            clock.advance(1.0)
            outage.succeeded(socket="/s")
        assert [
            {
                "event": "kubelet_failed",
                "kind": "KubeletUnavailable",
                "error": "gone",
                "socket": "/s",
                "log_level": "warning",
            },
            {
                "event": "kubelet_recovered",
                "failures": 1,
                "last_kind": "KubeletUnavailable",
                "duration_seconds": 1.0,
                "socket": "/s",
                "log_level": "info",
            },
        ] == logs


class TestThrottle:
    async def test_what_an_interval_held_back_is_told_when_it_ends(self) -> None:
        """Under a loop, the held calls are logged at the interval's end with the last
        one's fields, with no call after them; then nothing more."""
        throttle = Throttle("accept_failed", interval_s=0.05)
        with capture_logs() as logs:
            for n in range(10):
                throttle.warning(error="EMFILE", attempt=n)
            for _ in range(100):  # a bound, not a timing assertion
                if len(logs) >= 2:
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.1)  # room for a line too many
        assert [(0, 0), (8, 9)] == [(e["suppressed_since_last"], e["attempt"]) for e in logs]

    async def test_a_lone_call_schedules_nothing_to_tell(self) -> None:
        throttle = Throttle("accept_failed", interval_s=0.05)
        with capture_logs() as logs:
            throttle.warning(error="EMFILE")
            await asyncio.sleep(0.2)
        assert [0] == [e["suppressed_since_last"] for e in logs]

    async def test_a_call_at_the_interval_end_leaves_that_interval_one_line(self) -> None:
        """A call that comes when the interval has ended, before its flush ran (the loop
        busy, or an I/O callback ahead of the timer in the same turn), is told at once and
        tells the held ones: the flush left pending must not then tell the next interval's
        first held call too, a second line within the interval."""
        clock = ManualClock(100.0)
        throttle = Throttle("accept_failed", interval_s=60.0, clock=clock)
        with capture_logs() as logs:
            throttle.warning(attempt=0)  # told
            clock.now = 159.95
            throttle.warning(attempt=1)  # held: the flush is due in 0.05 s, the interval's end
            clock.now = 160.0
            throttle.warning(attempt=2)  # a new interval: told now, counting attempt 1
            throttle.warning(attempt=3)  # held: told at 220, not earlier
            await asyncio.sleep(0.3)  # past the first interval's flush, had it been left
        assert [(0, 0), (1, 2)] == [(e["suppressed_since_last"], e["attempt"]) for e in logs]

    async def test_burst_after_burst_each_is_told_when_its_interval_ends(self) -> None:
        """The flush is asked for again in every interval that holds calls back, not only in
        the first (the clock is a test's; the loop's timers are real and short)."""
        clock = ManualClock(100.0)
        throttle = Throttle("accept_failed", interval_s=60.0, clock=clock)
        with capture_logs() as logs:
            throttle.warning(attempt=0)
            for told, (now, attempts) in enumerate(((159.99, (1, 2)), (219.98, (3, 4))), 2):
                clock.now = now  # 0.01 s before the interval ends
                for attempt in attempts:
                    throttle.warning(attempt=attempt)
                for _ in range(100):  # a bound, not a timing assertion
                    if len(logs) >= told:
                        break
                    await asyncio.sleep(0.05)
        assert [(0, 0), (1, 2), (1, 4)] == [
            (e["suppressed_since_last"], e["attempt"]) for e in logs
        ]

    async def test_a_flood_asks_the_loop_for_one_flush_due_when_the_interval_ends(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """One timer per interval, however many calls it holds back (a timer each would
        grow the loop's heap with the flood), and due at the interval's end, not an
        interval after the first held call."""
        loop = asyncio.get_running_loop()
        delays: list[float] = []
        call_later = loop.call_later

        def recording(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
            delays.append(delay)
            return call_later(delay, callback, *args)

        monkeypatch.setattr(loop, "call_later", recording)
        clock = ManualClock(100.0)
        throttle = Throttle("accept_failed", interval_s=60.0, clock=clock)
        with capture_logs():
            throttle.warning(error="EMFILE")
            clock.now = 130.0
            for _ in range(1000):
                throttle.warning(error="EMFILE")
        assert [pytest.approx(30.0)] == delays

    def test_one_line_per_interval_with_the_count_held_back(self) -> None:
        """Within an interval only the first call logs; the next one says how many were held."""
        clock = ManualClock(100.0)
        throttle = Throttle("accept_failed", interval_s=10.0, clock=clock)
        with capture_logs() as logs:
            for _ in range(1000):
                throttle.warning(error="EMFILE")
            clock.now += 10
            throttle.warning(error="EMFILE")
        assert [0, 999] == [e["suppressed_since_last"] for e in logs]

    def test_each_line_counts_only_what_it_held_back(self) -> None:
        """The count starts over after each line: it is not the total since the start."""
        clock = ManualClock(100.0)
        throttle = Throttle("accept_failed", interval_s=10.0, clock=clock)
        with capture_logs() as logs:
            for held in (3, 5, 0):
                for _ in range(held + 1):
                    throttle.warning(error="EMFILE")
                clock.now += 10
        assert [0, 3, 5] == [e["suppressed_since_last"] for e in logs]


class TestFlushThrottles:
    async def test_what_is_held_at_exit_is_told_once(self) -> None:
        """At exit the interval's end never comes: flush_held_lines tells what each throttle
        holds, counting the rest, and the timer it cancels tells nothing more."""
        clock = ManualClock(100.0)
        held = Throttle("held_at_exit", interval_s=0.05, clock=clock)
        quiet = Throttle("none_held_at_exit", interval_s=0.05, clock=clock)
        with capture_logs() as logs:
            for attempt in range(4):
                held.warning(attempt=attempt)
            quiet.warning(attempt=0)
            flush_held_lines()
            flush_held_lines()  # nothing is held any more
            await asyncio.sleep(0.2)  # past the cancelled timer's due time
        ours = [e for e in logs if e["event"].endswith("held_at_exit")]  # not earlier tests'
        assert [("held_at_exit", 0, 0), ("none_held_at_exit", 0, 0), ("held_at_exit", 2, 3)] == [
            (e["event"], e["suppressed_since_last"], e["attempt"]) for e in ours
        ]

    def test_without_a_loop_the_held_calls_are_told_at_exit_too(self) -> None:
        clock = ManualClock(100.0)
        throttle = Throttle("held_without_a_loop", interval_s=10.0, clock=clock)
        with capture_logs() as logs:
            for attempt in range(3):
                throttle.warning(attempt=attempt)
            flush_held_lines()
        ours = [e for e in logs if e["event"] == "held_without_a_loop"]  # not earlier tests'
        assert [(0, 0), (1, 2)] == [(e["suppressed_since_last"], e["attempt"]) for e in ours]

    def test_flush_with_nothing_held_logs_nothing(self) -> None:
        """flush() is public: on a throttle holding nothing it tells nothing (no line
        counting -1 held back)."""
        clock = ManualClock(100.0)
        throttle = Throttle("nothing_held", interval_s=10.0, clock=clock)
        with capture_logs() as logs:
            throttle.flush()
            throttle.warning(attempt=0)
            throttle.flush()
        ours = [e for e in logs if e["event"] == "nothing_held"]
        assert [(0, 0)] == [(e["suppressed_since_last"], e["attempt"]) for e in ours]
