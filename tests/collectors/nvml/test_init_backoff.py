"""nvmlInit after a failure: retried with back-off, not every poll."""

from __future__ import annotations

import pytest
from fake_nvml_support import FakeGpu, FakeNvml

from exporter.collectors.base import Collector, CollectorContext
from exporter.collectors.gpu_processes import GpuProcessesCollector
from exporter.collectors.nvml import INIT_RETRY_INITIAL_S, NvmlCollector
from exporter.errors import CollectorUnavailable


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class TestInitBackoff:
    @pytest.mark.parametrize("make", [NvmlCollector, GpuProcessesCollector])
    def test_a_failed_init_is_not_retried_until_the_back_off_ends(
        self, fake_nvml: FakeNvml, make: type[NvmlCollector | GpuProcessesCollector]
    ) -> None:
        """Within the back-off the failure is repeated without asking the driver (now
        loaded) again; after it, init is retried and works. Both NVML collectors share
        the one session, so both follow the same policy."""
        clock = Clock()
        collector: Collector = make(CollectorContext(), clock=clock)
        try:
            with pytest.raises(CollectorUnavailable, match="driver is not loaded"):
                collector.collect()
            fake_nvml.configure(FakeGpu("GPU-8f3c5e2a-1b4d-4c6e-9f0a-2d7b8e1c3f50"))
            clock.now += INIT_RETRY_INITIAL_S / 2
            with pytest.raises(CollectorUnavailable, match="driver is not loaded"):
                collector.collect()
            clock.now += INIT_RETRY_INITIAL_S
            collector.collect()  # initialised now: no exception
        finally:
            collector.close()
