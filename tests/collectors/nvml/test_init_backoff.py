"""nvmlInit after a failure: retried with back-off, not every poll."""

from __future__ import annotations

import pytest
from fake_nvml_support import FakeGpu, FakeNvml
from manualclock import ManualClock

from exporter.collectors.base import Collector, CollectorContext
from exporter.collectors.gpu_processes import GpuProcessesCollector
from exporter.collectors.nvml import INIT_RETRY_INITIAL_S, NvmlCollector
from exporter.errors import CollectorError, CollectorUnavailable

UUID = "GPU-8f3c5e2a-1b4d-4c6e-9f0a-2d7b8e1c3f50"


class TestInitBackoff:
    @pytest.mark.parametrize("make", [NvmlCollector, GpuProcessesCollector])
    def test_a_failed_init_is_not_retried_until_the_back_off_ends(
        self, fake_nvml: FakeNvml, make: type[NvmlCollector | GpuProcessesCollector]
    ) -> None:
        """Within the back-off the failure is repeated without asking the driver (now
        loaded) again; after it, init is retried and works. Both NVML collectors share
        the one session, so both follow the same policy."""
        clock = ManualClock(1000.0)
        collector: Collector = make(CollectorContext(), clock=clock)
        try:
            with pytest.raises(CollectorUnavailable, match="driver is not loaded"):
                collector.collect()
            fake_nvml.configure(FakeGpu(UUID))
            clock.now += INIT_RETRY_INITIAL_S / 2
            with pytest.raises(CollectorUnavailable, match="driver is not loaded"):
                collector.collect()
            clock.now += INIT_RETRY_INITIAL_S
            collector.collect()  # initialised now: no exception
        finally:
            collector.close()

    def test_the_back_off_doubles_up_to_its_cap(self, fake_nvml: FakeNvml) -> None:
        """Each failure puts the next try twice as far off, at most INIT_RETRY_MAX_S;
        until then the last failure is repeated as it was (an error, not "unavailable"),
        without asking the driver, whose answer meanwhile changes at every step."""
        clock = ManualClock(1000.0)
        start = clock.now
        collector = NvmlCollector(CollectorContext(), clock=clock)
        # nvml.h codes the driver answers in turn: UNKNOWN, OPERATING_SYSTEM.
        codes = {999: "UNKNOWN", 17: "OPERATING_SYSTEM"}
        seen: list[tuple[float, str, str]] = []

        def poll(at: float) -> None:
            clock.now = start + at
            try:
                collector.collect()
            except CollectorError as error:
                seen.append((at, type(error).__name__, str(error)))
            else:
                seen.append((at, "ok", ""))

        try:
            tries = (0.0, 10.0, 30.0, 70.0, 150.0, 310.0, 610.0)  # +10, 20, 40, 80, 160, 300
            for step, at in enumerate(tries):
                code = list(codes)[step % 2]
                fake_nvml.configure(FakeGpu(UUID), init_error=code)
                if step:
                    poll(at - 0.5)  # still the last try's failure
                poll(at)  # tried: this step's failure
            fake_nvml.configure(FakeGpu(UUID))
            poll(910.0 - 0.5)
            poll(910.0)
        finally:
            collector.close()

        expected: list[tuple[float, str, str]] = []
        for step, at in enumerate(tries):
            if step:
                last = codes[list(codes)[(step - 1) % 2]]
                expected.append((at - 0.5, "CollectorError", f"nvmlInit failed: {last}"))
            name = codes[list(codes)[step % 2]]
            expected.append((at, "CollectorError", f"nvmlInit failed: {name}"))
        expected += [(909.5, "CollectorError", "nvmlInit failed: UNKNOWN"), (910.0, "ok", "")]
        assert expected == seen
