"""SimulatedNvmlSource through NvmlCollector: the demo node's GPU telemetry."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from exporter.collectors.base import COLLECTOR_ERRORS, CollectorContext
from exporter.collectors.gpu_metrics import (
    GPU_ECC_ERRORS,
    GPU_ENERGY,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_SM_CLOCK,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
)
from exporter.collectors.nvml import NvmlCollector
from exporter.model import DeviceIdentity, DeviceReading, Readings, Sample
from exporter.sim.gpus import SimulatedNvmlSource
from exporter.sim.hardware import GIB, demo_hardware

HARDWARE = demo_hardware()
GPU_0, GPU_1, GPU_2, GPU_3 = HARDWARE.gpus
MODEL = "NVIDIA H100 80GB HBM3"
NO_ECC_ERRORS = (
    Sample(GPU_ECC_ERRORS, 0.0, ("corrected",)),
    Sample(GPU_ECC_ERRORS, 0.0, ("uncorrected",)),
)


class Clock:
    """A clock the test sets by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def collector(clock: Clock) -> Iterator[NvmlCollector]:
    """An NvmlCollector on the simulated demo GPUs."""
    nvml = NvmlCollector(CollectorContext(), source=SimulatedNvmlSource(HARDWARE, clock=clock))
    yield nvml
    nvml.close()


def figure(readings: Readings, device_id: str, name: str) -> float:
    """The one value of family ``name`` for ``device_id``."""
    (device,) = (d for d in readings.devices if d.device_id == device_id)
    (value,) = (s.value for s in device.samples if s.spec.name == name)
    return value


class TestWholeGpus:
    def test_busy_gpu_at_time_zero(self, collector: NvmlCollector) -> None:
        """GPU 0 (85 % busy) in base units: power, memory and heat follow its utilization."""
        readings = collector.collect(device_ids=frozenset({GPU_0.uuid}))

        expected = DeviceReading(
            GPU_0.uuid,
            DeviceIdentity(GPU_0.uuid, "0000:17:00.0", MODEL, "nvidia"),
            (
                Sample(GPU_UTILIZATION, 0.85),
                Sample(GPU_MEMORY_USED, 80 * GIB * 85 // 100),
                Sample(GPU_MEMORY_TOTAL, 80 * GIB),
                Sample(GPU_POWER, 556.5),  # 700 W * (0.2 + 0.7 * 0.85)
                Sample(GPU_ENERGY, 48_081_600.0),  # 556.5 W for a day
                Sample(GPU_TEMPERATURE, 72.0),
                Sample(GPU_SM_CLOCK, 1.98e9),
                *NO_ECC_ERRORS,
            ),
        )
        assert expected == readings.devices[0]

    def test_idle_gpu(self, collector: NvmlCollector) -> None:
        """GPU 1 sits idle: no utilization or memory, idle power and clock."""
        readings = collector.collect(device_ids=frozenset({GPU_1.uuid}))

        expected = (
            Sample(GPU_UTILIZATION, 0.0),
            Sample(GPU_MEMORY_USED, 0.0),
            Sample(GPU_MEMORY_TOTAL, 80 * GIB),
            Sample(GPU_POWER, 140.0),
            Sample(GPU_ENERGY, 12_096_000.0),
            Sample(GPU_TEMPERATURE, 30.0),
            Sample(GPU_SM_CLOCK, 345e6),
            *NO_ECC_ERRORS,
        )
        assert expected == readings.devices[0].samples

    def test_every_gpu_reported(self, collector: NvmlCollector) -> None:
        """With no kubelet IDs every GPU and MIG device comes under its own UUID, no errors."""
        readings = collector.collect(device_ids=frozenset())

        mig_uuids = [mig.uuid for mig in GPU_2.mig_devices]
        expected_ids = [GPU_0.uuid, GPU_1.uuid, GPU_2.uuid, *mig_uuids, GPU_3.uuid]
        expected_errors = (Sample(COLLECTOR_ERRORS, 0.0, ("nvml", "GPU_IS_LOST")),)
        assert (expected_ids, expected_errors) == (
            [d.device_id for d in readings.devices],
            readings.node_samples,
        )


class TestMig:
    def test_mig_devices_report_memory(self, collector: NvmlCollector) -> None:
        """A MIG device has its profile in the model and its own memory, 60 % used like GPU 2."""
        mig = GPU_2.mig_devices[0]

        readings = collector.collect(device_ids=frozenset({mig.uuid}))

        expected = DeviceReading(
            mig.uuid,
            DeviceIdentity(mig.uuid, "0000:b1:00.0", f"{MODEL} MIG 3g.40gb", "nvidia"),
            (Sample(GPU_MEMORY_USED, 24 * GIB), Sample(GPU_MEMORY_TOTAL, 40 * GIB)),
        )
        assert expected == readings.devices[0]

    def test_mig_gpu_has_no_utilization(self, collector: NvmlCollector) -> None:
        """Like NVML, a MIG-enabled GPU answers no utilization; its other figures remain."""
        readings = collector.collect(device_ids=frozenset({GPU_2.uuid}))

        expected = {
            GPU_MEMORY_USED.name,
            GPU_MEMORY_TOTAL.name,
            GPU_POWER.name,
            GPU_ENERGY.name,
            GPU_TEMPERATURE.name,
            GPU_SM_CLOCK.name,
            GPU_ECC_ERRORS.name,
        }
        assert expected == {s.spec.name for s in readings.devices[0].samples}

    def test_gke_gpu_instance_name(self, collector: NvmlCollector) -> None:
        """nvidia2/gi2 is GPU 2's second GPU instance."""
        readings = collector.collect(device_ids=frozenset({"nvidia2/gi2"}))

        expected = ("nvidia2/gi2", GPU_2.mig_devices[1].uuid)
        assert expected == (readings.devices[0].device_id, readings.devices[0].identity.uuid)


class TestOverTime:
    def test_utilization_wobbles_near_its_base(
        self, collector: NvmlCollector, clock: Clock
    ) -> None:
        """Utilization stays within 10 % of the base and moves; an idle GPU stays idle."""
        seen: set[float] = set()
        idle: set[float] = set()
        for second in range(0, 60, 5):
            clock.now = float(second)
            readings = collector.collect(device_ids=frozenset())
            seen.add(figure(readings, GPU_0.uuid, GPU_UTILIZATION.name))
            idle.add(figure(readings, GPU_1.uuid, GPU_UTILIZATION.name))

        assert 0.76 <= min(seen) < max(seen) <= 0.94
        assert {0.0} == idle

    def test_energy_grows_with_the_clock(self, collector: NvmlCollector, clock: Clock) -> None:
        """Energy is a counter: 100 s later GPU 0 has used 100 s of its mean power more."""
        before = figure(collector.collect(device_ids=frozenset()), GPU_0.uuid, GPU_ENERGY.name)
        clock.now = 100.0
        after = figure(collector.collect(device_ids=frozenset()), GPU_0.uuid, GPU_ENERGY.name)

        expected = (48_081_600.0, 48_137_250.0)
        assert expected == (before, after)
