"""SimulatedNvmlSource through NvmlCollector: the demo node's GPU telemetry.

Which GPU a kubelet ID (the demo's UUIDs and time-slicing replicas, GKE names) finds is
checked through the resolver and the join (``attribution_support``), as the exporter does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from attribution_support import attributed_names
from manualclock import ManualClock

from exporter.collectors.base import CollectorContext
from exporter.collectors.gpu_metrics import (
    GPU_CLOCKS_THROTTLED,
    GPU_DRAM_ACTIVE,
    GPU_ECC_ERRORS,
    GPU_ENERGY,
    GPU_FABRIC_HEALTH_ISSUE,
    GPU_FABRIC_STATE,
    GPU_FABRIC_STATUS,
    GPU_GRAPHICS_ENGINE_ACTIVE,
    GPU_MEMORY_BANDWIDTH_UTILIZATION,
    GPU_MEMORY_TEMPERATURE,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_NVLINK_ERRORS,
    GPU_NVLINK_LINKS,
    GPU_NVLINK_RECEIVE,
    GPU_NVLINK_TRANSMIT,
    GPU_PCIE_RECEIVE,
    GPU_PCIE_REPLAYS,
    GPU_PCIE_TRANSMIT,
    GPU_PIPE_ACTIVE,
    GPU_POWER,
    GPU_RECOVERY_ACTION,
    GPU_REMAPPED_ROWS,
    GPU_ROW_REMAP_FAILED,
    GPU_ROW_REMAP_PENDING,
    GPU_SM_ACTIVE,
    GPU_SM_CLOCK,
    GPU_SM_OCCUPANCY,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
    GPU_VIDEO_UTILIZATION,
    GPU_XID_ERRORS,
)
from exporter.collectors.nvml import (
    NvmlCollector,
    NvmlError,
    NvmlFabric,
    NvmlGpmMetrics,
    NvmlGpmSample,
    NvmlGpuInstancePlacement,
    NvmlHandle,
)
from exporter.config import DEFAULT_POLL_INTERVAL_S
from exporter.model import (
    CollectorIssue,
    DeviceIdentity,
    DeviceReading,
    HardwareKey,
    KeyKind,
    Readings,
    Sample,
)
from exporter.sim.gpus import (
    NVLINK_BURST_AFTER_DRAINS,
    XID_AFTER_DRAINS,
    SimulatedNvmlSource,
    _SimHandle,
)
from exporter.sim.hardware import GIB, SimGpu, SimHardware, demo_hardware

REPO = Path(__file__).resolve().parents[3]
HARDWARE = demo_hardware()
GPU_0, GPU_1, GPU_2, GPU_3 = HARDWARE.gpus[:4]  # 4 and 5 are DRA's (exporter.sim.dra)
DRA_GPU_4, DRA_GPU_5, FREE_GPU_6 = HARDWARE.gpus[4:]  # 6: nobody's, busy (gpu_processes)
MODEL = "NVIDIA H100 80GB HBM3"
NO_ECC_ERRORS = (
    Sample(GPU_ECC_ERRORS, 0.0, ("corrected",)),
    Sample(GPU_ECC_ERRORS, 0.0, ("uncorrected",)),
)
NO_REMAPPED_ROWS = (
    Sample(GPU_REMAPPED_ROWS, 0.0, ("correctable",)),
    Sample(GPU_REMAPPED_ROWS, 0.0, ("uncorrectable",)),
    Sample(GPU_ROW_REMAP_PENDING, 0.0),
    Sample(GPU_ROW_REMAP_FAILED, 0.0),
)
THROTTLE_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sync_boost",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
NOT_THROTTLED = tuple(Sample(GPU_CLOCKS_THROTTLED, 0.0, (r,)) for r in THROTTLE_REASONS)
# Watched for Xid events from the first poll; these simulated GPUs raise none.
NO_XID_ERRORS = (Sample(GPU_XID_ERRORS, 0.0),)
NO_NVLINK_ERRORS = tuple(
    Sample(GPU_NVLINK_ERRORS, 0.0, (kind,))
    for kind in ("crc_flit", "crc_data", "replay", "recovery", "ecc_data")
)
ALL_NVLINKS_UP = (  # an H100 SXM board's 18
    Sample(GPU_NVLINK_LINKS, 18.0, ("active",)),
    Sample(GPU_NVLINK_LINKS, 0.0, ("inactive",)),
)
# Registered, and its health mask reporting each problem absent.
FABRIC_REGISTERED = (
    Sample(GPU_FABRIC_STATE, 3.0),
    Sample(GPU_FABRIC_STATUS, 0.0),
    *(
        Sample(GPU_FABRIC_HEALTH_ISSUE, 0.0, (issue,))
        for issue in (
            "degraded_bandwidth",
            "route_recovery",
            "route_unhealthy",
            "access_timeout_recovery",
            "incorrect_configuration",
        )
    ),
)
NO_VIDEO = (
    Sample(GPU_VIDEO_UTILIZATION, 0.0, ("encoder",)),
    Sample(GPU_VIDEO_UTILIZATION, 0.0, ("decoder",)),
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(0.0)


@pytest.fixture
def collector(clock: ManualClock) -> Iterator[NvmlCollector]:
    """An NvmlCollector on the simulated demo GPUs, both on ``clock``, measuring GPM at
    every poll (test_gpm.py has the interval's rules)."""
    source = SimulatedNvmlSource(HARDWARE, clock=clock)
    context = CollectorContext(nvml_gpm_interval_s=0.0)
    nvml = NvmlCollector(context, source=source, clock=clock)
    yield nvml
    nvml.close()


def device(readings: Readings, name: str) -> DeviceReading:
    """The one reading the collector named ``name`` (a GPU or MIG UUID)."""
    (found,) = (d for d in readings.devices if d.name == name)
    return found


def figure(readings: Readings, name: str, family: str) -> float:
    """The one value of ``family`` for the device named ``name``."""
    (value,) = (s.value for s in device(readings, name).samples if s.spec.name == family)
    return value


class TestWholeGpus:
    def test_busy_gpu_at_time_zero(self, collector: NvmlCollector) -> None:
        """GPU 0 (85 % busy) in base units: power, memory and heat follow its utilization."""
        readings = collector.collect()

        expected = DeviceReading(
            GPU_0.uuid,
            (
                HardwareKey(KeyKind.GPU_UUID, GPU_0.uuid),
                HardwareKey(KeyKind.NVIDIA_MINOR, "0"),
                HardwareKey(KeyKind.PCI, "0000:17:00.0"),
            ),
            DeviceIdentity(GPU_0.uuid, "0000:17:00.0", MODEL, "nvidia"),
            (
                Sample(GPU_UTILIZATION, 0.85),
                Sample(GPU_MEMORY_BANDWIDTH_UTILIZATION, 0.56),  # two thirds, whole percent
                Sample(GPU_MEMORY_USED, 80 * GIB * 85 // 100),
                Sample(GPU_MEMORY_TOTAL, 80 * GIB),
                Sample(GPU_POWER, 556.5),  # 700 W * (0.2 + 0.7 * 0.85)
                Sample(GPU_ENERGY, 48_081_600.0),  # 556.5 W for a day
                Sample(GPU_TEMPERATURE, 72.0),
                Sample(GPU_SM_CLOCK, 1.98e9),
                *NOT_THROTTLED,  # 85 %: below the power cap's 90 %
                *NO_ECC_ERRORS,
                *NO_REMAPPED_ROWS,
                *NO_VIDEO,
                Sample(GPU_MEMORY_TEMPERATURE, 77.0),  # 5 °C above the GPU
                # Its link trained at 8 of 16 lanes: 30 replays a minute for a day.
                Sample(GPU_PCIE_REPLAYS, 43_200.0),
                Sample(GPU_RECOVERY_ACTION, 0.0),  # no fault: none asked
                *NO_NVLINK_ERRORS,
                # 150 GB/s at 85 % each way for a day
                Sample(GPU_NVLINK_TRANSMIT, 1.1016e16),
                Sample(GPU_NVLINK_RECEIVE, 1.1016e16),
                *ALL_NVLINKS_UP,
                *FABRIC_REGISTERED,
                *NO_XID_ERRORS,
            ),
            standalone=True,
        )
        assert expected == device(readings, GPU_0.uuid)

    def test_gpm_figures_from_the_second_poll(
        self, collector: NvmlCollector, clock: ManualClock
    ) -> None:
        """A busy H100's GPM figures, shares of its utilization at the later poll: none
        at the first poll, which takes the first sample."""
        first = collector.collect()
        clock.now = 10.0
        second = collector.collect()
        busy = figure(second, GPU_0.uuid, GPU_UTILIZATION.name) * 100
        gpm = (GPU_GRAPHICS_ENGINE_ACTIVE, GPU_SM_ACTIVE, GPU_SM_OCCUPANCY, GPU_PIPE_ACTIVE)
        gpm += (GPU_DRAM_ACTIVE,)
        expected = [
            (GPU_GRAPHICS_ENGINE_ACTIVE.name, (), 1.0),
            (GPU_SM_ACTIVE.name, (), 0.9),
            (GPU_SM_OCCUPANCY.name, (), 0.4),
            (GPU_PIPE_ACTIVE.name, ("tensor",), 0.6),
            (GPU_PIPE_ACTIVE.name, ("fp64",), 0.02),
            (GPU_PIPE_ACTIVE.name, ("fp32",), 0.25),
            (GPU_PIPE_ACTIVE.name, ("fp16",), 0.1),
            (GPU_DRAM_ACTIVE.name, (), 2 / 3),
        ]
        assert (
            [],
            [(name, labels, round(share * busy, 2) / 100) for name, labels, share in expected],
        ) == tuple(
            [
                (s.spec.name, s.label_values, s.value)
                for s in device(readings, GPU_0.uuid).samples
                if s.spec in gpm
            ]
            for readings in (first, second)
        )

    def test_pcie_traffic_counted_from_the_second_poll(
        self, collector: NvmlCollector, clock: ManualClock
    ) -> None:
        """A busy H100's PCIe bytes: its rates at the later poll (20 and 80 MiB/s a
        percent of utilization) times the 10 s between the polls."""
        first = collector.collect()
        clock.now = 10.0
        second = collector.collect()
        busy = figure(second, GPU_0.uuid, GPU_UTILIZATION.name) * 100
        pcie = (GPU_PCIE_TRANSMIT, GPU_PCIE_RECEIVE)
        assert (
            [],
            [
                (GPU_PCIE_TRANSMIT.name, round(20 * busy, 2) * 1024 * 1024 * 10),
                (GPU_PCIE_RECEIVE.name, round(80 * busy, 2) * 1024 * 1024 * 10),
            ],
        ) == tuple(
            [(s.spec.name, s.value) for s in device(readings, GPU_0.uuid).samples if s.spec in pcie]
            for readings in (first, second)
        )

    def test_power_capped_at_the_top_of_its_wobble(
        self, collector: NvmlCollector, clock: ManualClock
    ) -> None:
        """GPU 0 is 94 % busy a quarter minute in (85 % and a tenth): at its power cap."""
        clock.now = 15.0
        readings = collector.collect()
        assert figure(readings, GPU_0.uuid, GPU_UTILIZATION.name) == 0.94
        assert figure(readings, GPU_0.uuid, GPU_POWER.name) == GPU_0.power_limit_watts
        assert [("sw_power_cap", 1.0)] == [
            (s.label_values[0], s.value)
            for s in device(readings, GPU_0.uuid).samples
            if s.spec is GPU_CLOCKS_THROTTLED and s.value
        ]

    def test_idle_gpu(self, collector: NvmlCollector) -> None:
        """GPU 1 sits idle: no utilization or memory, idle power and clock."""
        readings = collector.collect()

        expected = (
            Sample(GPU_UTILIZATION, 0.0),
            Sample(GPU_MEMORY_BANDWIDTH_UTILIZATION, 0.0),
            Sample(GPU_MEMORY_USED, 0.0),
            Sample(GPU_MEMORY_TOTAL, 80 * GIB),
            Sample(GPU_POWER, 140.0),
            Sample(GPU_ENERGY, 12_096_000.0),
            Sample(GPU_TEMPERATURE, 30.0),
            Sample(GPU_SM_CLOCK, 345e6),
            *NOT_THROTTLED,  # idle is no slowdown
            *NO_ECC_ERRORS,
            *NO_REMAPPED_ROWS,
            *NO_VIDEO,
            Sample(GPU_MEMORY_TEMPERATURE, 35.0),
            Sample(GPU_PCIE_REPLAYS, 0.0),  # a link at its full width
            Sample(GPU_RECOVERY_ACTION, 0.0),
            *NO_NVLINK_ERRORS,
            Sample(GPU_NVLINK_TRANSMIT, 0.0),  # idle since the driver loaded
            Sample(GPU_NVLINK_RECEIVE, 0.0),
            *ALL_NVLINKS_UP,
            *FABRIC_REGISTERED,
            *NO_XID_ERRORS,
        )
        assert expected == device(readings, GPU_1.uuid).samples

    def test_nvlinks_of_a_gpu_that_lost_one(self, collector: NvmlCollector) -> None:
        """DRA GPU 4 lost link 7 after replays and recoveries; MIG-enabled GPU 2 has no
        NVLink series at all (NVML would report its links down)."""
        readings = collector.collect()
        families = (GPU_NVLINK_LINKS, GPU_NVLINK_ERRORS)

        def nvlink(uuid: str) -> list[tuple[str, tuple[str, ...], float]]:
            return [
                (s.spec.name, s.label_values, s.value)
                for s in device(readings, uuid).samples
                if s.spec in families
            ]

        errors = GPU_NVLINK_ERRORS.name
        assert (
            [
                (errors, ("crc_flit",), 1180.0),
                (errors, ("crc_data",), 0.0),
                (errors, ("replay",), 42.0),
                (errors, ("recovery",), 3.0),
                (errors, ("ecc_data",), 0.0),
                (GPU_NVLINK_LINKS.name, ("active",), 17.0),
                (GPU_NVLINK_LINKS.name, ("inactive",), 1.0),
            ],
            [],
        ) == (nvlink(DRA_GPU_4.uuid), nvlink(GPU_2.uuid))

    def test_a_gpu_without_nvlinks_has_no_nvlink_series(self, clock: ManualClock) -> None:
        """A GPU without NVLinks (a PCIe card) answers NOT_SUPPORTED, as NVML does: no
        NVLink series of it, and no issue; the other GPUs keep theirs."""
        pcie = replace(GPU_1, nvlinks=0)
        hardware = replace(HARDWARE, gpus=tuple(pcie if g is GPU_1 else g for g in HARDWARE.gpus))
        nvml = NvmlCollector(
            CollectorContext(), source=SimulatedNvmlSource(hardware, clock=clock), clock=clock
        )
        try:
            readings = nvml.collect()
        finally:
            nvml.close()
        families = (GPU_NVLINK_LINKS, GPU_NVLINK_ERRORS, GPU_NVLINK_TRANSMIT, GPU_NVLINK_RECEIVE)

        def nvlink(uuid: str) -> list[Sample]:
            return [s for s in device(readings, uuid).samples if s.spec in families]

        assert ([], list(ALL_NVLINKS_UP), ()) == (
            nvlink(GPU_1.uuid),
            nvlink(GPU_0.uuid)[-2:],
            readings.issues,
        )

    def test_every_gpu_reported(self, collector: NvmlCollector) -> None:
        """Every GPU and MIG device comes under its own UUID, all standalone, no issues."""
        readings = collector.collect()

        mig_uuids = [mig.uuid for mig in GPU_2.mig_devices]
        expected_names = [
            GPU_0.uuid,
            GPU_1.uuid,
            GPU_2.uuid,
            *mig_uuids,
            GPU_3.uuid,
            DRA_GPU_4.uuid,
            DRA_GPU_5.uuid,
            DRA_GPU_5.mig_devices[0].uuid,
            FREE_GPU_6.uuid,
        ]
        expected = (expected_names, {True}, ())
        assert expected == (
            [d.name for d in readings.devices],
            {d.standalone for d in readings.devices},
            readings.issues,
        )

    def test_demo_ids_find_their_gpus(self, collector: NvmlCollector) -> None:
        """UUIDs, time-slicing replicas and nvidiaN find their GPU through the join."""
        found = attributed_names(
            collector.collect(), GPU_0.uuid, f"{GPU_3.uuid}::1", "nvidia1", "nvidia3/vgpu0"
        )

        expected = {
            GPU_0.uuid: GPU_0.uuid,
            f"{GPU_3.uuid}::1": GPU_3.uuid,
            "nvidia1": GPU_1.uuid,
            "nvidia3/vgpu0": GPU_3.uuid,
        }
        assert expected == found


class TestMig:
    def test_mig_devices_report_memory(self, collector: NvmlCollector) -> None:
        """A MIG device has its profile in the model and its own memory, 60 % used like GPU 2."""
        mig = GPU_2.mig_devices[0]

        readings = collector.collect()

        expected = DeviceReading(
            mig.uuid,
            (
                HardwareKey(KeyKind.MIG_UUID, mig.uuid),
                HardwareKey(KeyKind.MIG_PATH, f"{GPU_2.uuid}/1/0"),
                HardwareKey(KeyKind.NVIDIA_MINOR_GI, "2/1"),
                HardwareKey(KeyKind.MIG_PLACEMENT, "2/9/0"),
            ),
            DeviceIdentity(mig.uuid, "0000:b1:00.0", f"{MODEL} MIG 3g.40gb", "nvidia"),
            (Sample(GPU_MEMORY_USED, 24 * GIB), Sample(GPU_MEMORY_TOTAL, 40 * GIB)),
            standalone=True,
        )
        assert expected == device(readings, mig.uuid)

    def test_mig_gpu_has_no_utilization(self, collector: NvmlCollector) -> None:
        """Like NVML, a MIG-enabled GPU answers no utilization, of its cores, its memory or
        its video engines (nvml.h: not supported on MIG-enabled GPUs); its other figures
        remain."""
        readings = collector.collect()

        expected = {
            GPU_MEMORY_USED.name,
            GPU_MEMORY_TOTAL.name,
            GPU_POWER.name,
            GPU_ENERGY.name,
            GPU_TEMPERATURE.name,
            GPU_SM_CLOCK.name,
            GPU_CLOCKS_THROTTLED.name,
            GPU_ECC_ERRORS.name,
            GPU_MEMORY_TEMPERATURE.name,
            GPU_PCIE_REPLAYS.name,
            GPU_RECOVERY_ACTION.name,
            GPU_XID_ERRORS.name,
        }
        assert expected == {s.spec.name for s in device(readings, GPU_2.uuid).samples}

    def test_mig_devices_gpm_at_their_gpus_load(
        self, collector: NvmlCollector, clock: ManualClock
    ) -> None:
        """From the second poll each MIG device has GPM figures, at its GPU's load: the
        MIG-enabled GPU's own, DRAM bandwidth from its GPU instance, which it has alone."""
        collector.collect()
        clock.now = 10.0
        readings = collector.collect()
        gpm = (GPU_GRAPHICS_ENGINE_ACTIVE, GPU_SM_ACTIVE, GPU_SM_OCCUPANCY, GPU_PIPE_ACTIVE)
        gpm += (GPU_DRAM_ACTIVE,)

        def figures(name: str) -> dict[tuple[str, tuple[str, ...]], float]:
            return {
                (s.spec.name, s.label_values): s.value
                for s in device(readings, name).samples
                if s.spec in gpm
            }

        whole = figures(GPU_2.uuid)
        assert (8, {mig.uuid: whole for mig in GPU_2.mig_devices}) == (
            len(whole),
            {mig.uuid: figures(mig.uuid) for mig in GPU_2.mig_devices},
        )

    def test_mig_devices_have_no_pcie_traffic(
        self, collector: NvmlCollector, clock: ManualClock
    ) -> None:
        """PCIe traffic is counted per whole GPU (as DCGM serves it), though the simulated
        GPM would answer it for a MIG device too: the MIG-enabled GPU has its counters,
        its MIG devices none."""
        collector.collect()
        clock.now = 10.0
        readings = collector.collect()
        pcie = (GPU_PCIE_TRANSMIT, GPU_PCIE_RECEIVE)

        def counters(name: str) -> list[str]:
            return [s.spec.name for s in device(readings, name).samples if s.spec in pcie]

        assert (
            [GPU_PCIE_TRANSMIT.name, GPU_PCIE_RECEIVE.name],
            {mig.uuid: [] for mig in GPU_2.mig_devices},
        ) == (counters(GPU_2.uuid), {mig.uuid: counters(mig.uuid) for mig in GPU_2.mig_devices})

    def test_gke_gpu_instance_and_mig_ids(self, collector: NvmlCollector) -> None:
        """nvidia2/gi2 is GPU 2's second GPU instance; MIG-<uuid> its MIG device."""
        mig_1, mig_2, _ = GPU_2.mig_devices

        found = attributed_names(collector.collect(), "nvidia2/gi2", mig_1.uuid)

        assert {"nvidia2/gi2": mig_2.uuid, mig_1.uuid: mig_1.uuid} == found

    @pytest.mark.parametrize("instance_gpm_refused", [False, True])
    def test_what_is_kept_per_device_stays_bounded_over_mig_reconfigurations(
        self, clock: ManualClock, instance_gpm_refused: bool
    ) -> None:
        """Each MIG reconfiguration names its MIG devices, and their GPU instances, anew:
        what the collector keeps per device goes with the old ones, so a node whose MIG
        layout churns for months keeps what one layout needs. So too where the GPU
        instances refuse GPM (kept under "<MIG UUID>/gpu-instance" as not to be asked)."""
        gpus = HARDWARE.gpus
        source = (_GpuInstanceGpmRefused if instance_gpm_refused else _Reconfigured)(
            HARDWARE, clock=clock
        )
        nvml = NvmlCollector(CollectorContext(nvml_gpm_interval_s=0.0), source=source, clock=clock)

        def kept() -> int:
            held = (*vars(nvml).values(), *vars(nvml._xids).values())
            return sum(len(v) for v in held if isinstance(v, dict | set))

        def remade(generation: int) -> tuple[SimGpu, ...]:
            return tuple(
                replace(
                    gpu,
                    mig_devices=tuple(
                        replace(mig, uuid=f"MIG-{generation:08x}-{gpu.index:04x}-{n:04x}-0000-0")
                        for n, mig in enumerate(gpu.mig_devices)
                    ),
                )
                for gpu in gpus
            )

        sizes = []
        try:
            for generation in range(200):
                source.gpus = remade(generation)
                for _ in range(2):  # the second measures GPM from the first's samples
                    clock.advance(1.0)
                    assert () == nvml.collect().issues
                sizes.append(kept())
        finally:
            nvml.close()
        assert [sizes[0]] * len(sizes) == sizes

    def test_gpm_support_asked_once_of_a_mig_device_with_a_legacy_uuid(
        self, clock: ManualClock
    ) -> None:
        """A driver before R470 names a MIG device MIG-GPU-<uuid>/<gi>/<ci>, a "/" in
        it: whether it can be sampled is kept while it is listed, asked once."""
        source = _AskedGpm(HARDWARE, clock=clock)
        source.gpus = tuple(
            replace(
                gpu,
                mig_devices=tuple(
                    replace(mig, uuid=f"MIG-{gpu.uuid}/{n + 1}/0")
                    for n, mig in enumerate(gpu.mig_devices)
                ),
            )
            for gpu in HARDWARE.gpus
        )
        nvml = NvmlCollector(CollectorContext(nvml_gpm_interval_s=0.0), source=source, clock=clock)
        asked = []
        try:
            for _ in range(3):
                clock.advance(1.0)
                nvml.collect()
                asked.append(source.asked)
                source.asked = 0
        finally:
            nvml.close()
        assert [asked[0], 0, 0] == asked


class _Reconfigured(SimulatedNvmlSource):
    """The simulated GPUs with ``gpus`` to reconfigure their MIG devices while NVML runs:
    a GPU's handle stays (a pointer to the GPU, in NVML), and its MIG devices are those
    of its configuration now."""

    def __init__(self, hardware: SimHardware, *, clock: ManualClock) -> None:
        super().__init__(hardware, clock=clock)
        self.gpus = hardware.gpus

    def _now(self, handle: NvmlHandle) -> NvmlHandle:
        uuid = self.uuid(handle)
        return NvmlHandle(_SimHandle(next(g for g in self.gpus if g.uuid == uuid)))

    def mig_device_handle(self, handle: NvmlHandle, index: int) -> NvmlHandle:
        return super().mig_device_handle(self._now(handle), index)

    def gpm_mig_sample(self, handle: NvmlHandle, gpu_instance: int) -> NvmlGpmSample:
        return super().gpm_mig_sample(self._now(handle), gpu_instance)


class _AskedGpm(_Reconfigured):
    """Reconfigured GPUs counting nvmlGpmQueryDeviceSupport calls in ``asked``."""

    asked = 0

    def gpm_supported(self, handle: NvmlHandle) -> bool:
        self.asked += 1
        return super().gpm_supported(handle)


class _GpuInstanceGpmRefused(_Reconfigured):
    """Reconfigured GPUs whose MIG devices' GPU instances answer GPM NOT_SUPPORTED."""

    def gpm_mig_sample(self, handle: NvmlHandle, gpu_instance: int) -> NvmlGpmSample:
        raise NvmlError("NOT_SUPPORTED")


class TestMigPlacement:
    # H100 80GB GPU instance profiles: ID -> (placement starts, slots taken).
    PLACEMENTS = {
        19: (range(7), 1),  # 1g.10gb
        15: ((0, 2, 4, 6), 2),  # 1g.20gb
        14: ((0, 2, 4), 2),  # 2g.20gb
        9: ((0, 4), 4),  # 3g.40gb
        5: ((0,), 4),  # 4g.40gb
        0: ((0,), 8),  # 7g.80gb
    }

    def test_every_gpu_instance_under_its_placement(self, collector: NvmlCollector) -> None:
        """GPU 2's 3g, 2g and 1g instances and GPU 5's DRA-made 1g one, by their slots."""
        readings = collector.collect()

        found = {
            d.name: k.value
            for d in readings.devices
            for k in d.keys
            if k.kind is KeyKind.MIG_PLACEMENT
        }
        mig_1, mig_2, mig_3 = GPU_2.mig_devices
        (dra_mig,) = DRA_GPU_5.mig_devices
        expected = {
            mig_1.uuid: "2/9/0",
            mig_2.uuid: "2/14/4",
            mig_3.uuid: "2/19/6",
            dra_mig.uuid: "5/19/3",
        }
        assert expected == found

    def test_layouts_fit_the_board(self) -> None:
        """Each simulated GPU instance sits where its profile may, and none overlap."""
        misplaced: list[str] = []
        for gpu in HARDWARE.gpus:
            taken: set[int] = set()
            for mig in gpu.mig_devices:
                starts, size = self.PLACEMENTS[mig.profile_id]
                slots = set(range(mig.placement_start, mig.placement_start + size))
                if mig.placement_start not in starts or slots & taken:
                    misplaced.append(mig.uuid)
                taken |= slots
        assert [] == misplaced

    def test_placement_asked_once_per_mig_device(self, clock: ManualClock) -> None:
        """A GPU instance's placement is fixed: later polls take it without asking NVML."""
        asked: list[int] = []

        class Counting(SimulatedNvmlSource):
            def gpu_instance_placement(
                self, handle: NvmlHandle, gpu_instance_id: int
            ) -> NvmlGpuInstancePlacement:
                asked.append(gpu_instance_id)
                return super().gpu_instance_placement(handle, gpu_instance_id)

        nvml = NvmlCollector(CollectorContext(), source=Counting(HARDWARE, clock=clock))
        try:
            polls = [nvml.collect() for _ in range(3)]
        finally:
            nvml.close()

        placed = [
            sorted(k.value for d in poll.devices for k in d.keys if k.kind is KeyKind.MIG_PLACEMENT)
            for poll in polls
        ]
        expected = ([1, 2, 3, 5], [["2/14/4", "2/19/6", "2/9/0", "5/19/3"]] * 3)
        assert expected == (sorted(asked), placed)


class TestOverTime:
    def test_utilization_wobbles_near_its_base(
        self, collector: NvmlCollector, clock: ManualClock
    ) -> None:
        """Utilization stays within 10 % of the base and moves; an idle GPU stays idle."""
        seen: set[float] = set()
        idle: set[float] = set()
        for second in range(0, 60, 5):
            clock.now = float(second)
            readings = collector.collect()
            seen.add(figure(readings, GPU_0.uuid, GPU_UTILIZATION.name))
            idle.add(figure(readings, GPU_1.uuid, GPU_UTILIZATION.name))

        assert 0.76 <= min(seen) < max(seen) <= 0.94
        assert {0.0} == idle

    def test_energy_grows_with_the_clock(
        self, collector: NvmlCollector, clock: ManualClock
    ) -> None:
        """Energy is a counter: 100 s later GPU 0 has used 100 s of its mean power more."""
        before = figure(collector.collect(), GPU_0.uuid, GPU_ENERGY.name)
        clock.now = 100.0
        after = figure(collector.collect(), GPU_0.uuid, GPU_ENERGY.name)

        expected = (48_081_600.0, 48_137_250.0)
        assert expected == (before, after)

    def test_nvlink_traffic_grows_with_the_clock_from_the_drivers_load(
        self, collector: NvmlCollector, clock: ManualClock
    ) -> None:
        """NVLink traffic is a counter since the driver loaded (a day before 0): 100 s
        on, GPU 0 has sent 100 s more at 150 GB/s times 85 %; before 0 (a clock set
        back) it stays at its value at 0, never below."""
        sent = []
        for now in (-60.0, 0.0, 100.0):
            clock.now = now
            sent.append(figure(collector.collect(), GPU_0.uuid, GPU_NVLINK_TRANSMIT.name))

        assert [1.1016e16, 1.1016e16, 1.102875e16] == sent

    def test_pcie_direction_unanswered_for_an_interval_keeps_its_count(
        self, clock: ManualClock
    ) -> None:
        """A PCIe direction GPM does not answer for one interval (that metric's own
        UNKNOWN: an issue) adds nothing that poll and keeps its count, no reset; the
        other direction counts on, and so does the first from the next poll."""

        class Unanswered(SimulatedNvmlSource):
            """1 MiB/s sent and 2 received, but no transmit rate at 20 s."""

            def gpm_metrics(
                self, older: NvmlGpmSample, newer: NvmlGpmSample, metric_ids: tuple[int, ...]
            ) -> NvmlGpmMetrics:
                answered = super().gpm_metrics(older, newer, metric_ids)
                if 20 not in metric_ids:
                    return answered
                lost = clock.now == 20.0
                rates = {20: None if lost else 1.0, 21: 2.0}
                values = tuple(
                    rates.get(metric_id, value)
                    for metric_id, value in zip(metric_ids, answered.values, strict=True)
                )
                return NvmlGpmMetrics(values, NvmlError("UNKNOWN") if lost else None)

        source = Unanswered(HARDWARE, clock=clock)
        context = CollectorContext(nvml_gpm_interval_s=0.0)
        nvml = NvmlCollector(context, source=source, clock=clock)
        polls = []
        try:
            for now in (0.0, 10.0, 20.0, 30.0):
                clock.now = now
                polls.append(nvml.collect())
        finally:
            nvml.close()

        pcie = (GPU_PCIE_TRANSMIT, GPU_PCIE_RECEIVE)
        mib = 1024 * 1024
        failed = CollectorIssue("UNKNOWN", f"{GPU_0.uuid}: gpm_metrics: NVML UNKNOWN")
        assert [
            ({GPU_PCIE_TRANSMIT.name: 10.0 * mib, GPU_PCIE_RECEIVE.name: 20.0 * mib}, []),
            ({GPU_PCIE_TRANSMIT.name: 10.0 * mib, GPU_PCIE_RECEIVE.name: 40.0 * mib}, [failed]),
            ({GPU_PCIE_TRANSMIT.name: 20.0 * mib, GPU_PCIE_RECEIVE.name: 60.0 * mib}, []),
        ] == [
            (
                {s.spec.name: s.value for s in device(poll, GPU_0.uuid).samples if s.spec in pcie},
                [issue for issue in poll.issues if issue.detail.startswith(GPU_0.uuid)],
            )
            for poll in polls[1:]
        ]


class TestSourceAsNvml:
    """SimulatedNvmlSource answers as NVML's own calls do."""

    @pytest.fixture
    def source(self, clock: ManualClock) -> SimulatedNvmlSource:
        source = SimulatedNvmlSource(HARDWARE, clock=clock)
        source.init()
        return source

    def test_refuses_calls_before_init(self, clock: ManualClock) -> None:
        """Before nvmlInit every call answers UNINITIALIZED."""
        with pytest.raises(NvmlError) as caught:
            SimulatedNvmlSource(HARDWARE, clock=clock).device_count()
        assert caught.value.error_name == "UNINITIALIZED"

    def test_a_gpu_without_nvlinks_is_in_no_fabric(self, clock: ManualClock) -> None:
        """A PCIe card (no NVLinks) sits on no NVSwitch board: fabric state NOT_SUPPORTED
        (0), no health mask; an HGX GPU's registration is completed (3), successfully,
        its health mask reporting every problem absent (FALSE, 2, in each of the four
        two-bit fields; NONE, 1, for the configuration at bit 8)."""
        hardware = replace(HARDWARE, gpus=(replace(GPU_0, nvlinks=0), GPU_1))
        source = SimulatedNvmlSource(hardware, clock=clock)
        source.init()
        healthy = 0b1_1010_1010
        assert [
            NvmlFabric(state=0, status=0),
            NvmlFabric(state=3, status=0, health_mask=healthy),
        ] == [source.fabric(source.device_handle(index)) for index in range(2)]

    def test_gpm_between_two_samples_of_one_device_in_order(
        self, source: SimulatedNvmlSource, clock: ManualClock
    ) -> None:
        """GPM metrics only from two samples of one device, the older first, as the fake
        libnvidia-ml (and, by nvml.h, NVML) has it; a metric not simulated is None."""
        gpu, other = source.device_handle(0), source.device_handle(1)
        older, elsewhere = source.gpm_sample(gpu), source.gpm_sample(other)
        clock.now = 10.0
        newer = source.gpm_sample(gpu)
        refused = []
        for pair in ((newer, older), (older, elsewhere)):
            with pytest.raises(NvmlError) as caught:
                source.gpm_metrics(*pair, (2,))
            refused.append(caught.value.error_name)
        busy = source.utilization(gpu).gpu_percent
        assert (["INVALID_ARGUMENT"] * 2, (round(0.9 * busy, 2), None)) == (
            refused,
            source.gpm_metrics(older, newer, (2, 99)).values,
        )

    def test_pci_bus_id_as_nvml_writes_it(self, source: SimulatedNvmlSource) -> None:
        """nvmlPciInfo_t.busId: an 8-digit domain, upper-case hex."""
        assert source.pci_bus_id(source.device_handle(2)) == "00000000:B1:00.0"

    def test_a_mig_device_is_its_own_device(self, source: SimulatedNvmlSource) -> None:
        """A MIG device's key differs from its GPU's, and GPU instance placements are
        NOT_SUPPORTED where MIG mode is off."""
        gpu = source.device_handle(2)
        mig = source.mig_device_handle(gpu, 0)
        with pytest.raises(NvmlError) as caught:
            source.gpu_instance_placement(source.device_handle(0), 1)
        assert (source.device_key(gpu) != source.device_key(mig), caught.value.error_name) == (
            True,
            "NOT_SUPPORTED",
        )

    @pytest.mark.parametrize("engine", ["encoder_percent", "decoder_percent"])
    def test_a_mig_device_has_no_video_engines_of_its_own(
        self, source: SimulatedNvmlSource, engine: str
    ) -> None:
        """A MIG device's handle answers NOT_SUPPORTED for the video engines, as the
        fake libnvidia-ml's does; the collector asks only whole GPUs anyway."""
        mig = source.mig_device_handle(source.device_handle(2), 0)
        with pytest.raises(NvmlError) as caught:
            getattr(source, engine)(mig)
        assert caught.value.error_name == "NOT_SUPPORTED"

    @pytest.mark.parametrize("engine", ["encoder_percent", "decoder_percent"])
    def test_a_mig_enabled_gpu_answers_no_video_engine(
        self, source: SimulatedNvmlSource, engine: str
    ) -> None:
        """nvml.h: querying encoder or decoder utilization is not supported on MIG-enabled
        GPUs, as the utilization rates are not; a GPU with MIG off answers."""
        with pytest.raises(NvmlError) as caught:
            getattr(source, engine)(source.device_handle(2))
        assert (caught.value.error_name, getattr(source, engine)(source.device_handle(0))) == (
            "NOT_SUPPORTED",
            0,
        )

    def test_a_mig_device_has_no_replay_count(self, source: SimulatedNvmlSource) -> None:
        """A MIG device shares its GPU's link: its handle answers NOT_SUPPORTED for the
        replay counter, as for the GPU's other figures, while its GPU answers."""
        gpu = source.device_handle(2)
        with pytest.raises(NvmlError) as caught:
            source.pcie_replays(source.mig_device_handle(gpu, 0))
        assert (source.pcie_replays(gpu), caught.value.error_name) == (0, "NOT_SUPPORTED")

    def test_links_counted_and_asked_as_nvml_answers(self, source: SimulatedNvmlSource) -> None:
        """DRA GPU 4's field 91 counts its 18 links, link 7 down, the others up; a link
        past its last (or below 0) answers INVALID_ARGUMENT, as a driver's does."""
        gpu = source.device_handle(4)
        states = [source.nvlink_active(gpu, link) for link in range(18)]
        refused = []
        for link in (18, -1):
            with pytest.raises(NvmlError) as caught:
                source.nvlink_active(gpu, link)
            refused.append(caught.value.error_name)

        assert (18, [link != 7 for link in range(18)], ["INVALID_ARGUMENT"] * 2) == (
            source.nvlink_fields(gpu).link_count,
            states,
            refused,
        )

    def test_a_mig_enabled_gpu_reports_every_link_inactive(
        self, source: SimulatedNvmlSource
    ) -> None:
        """NVML reports a MIG-enabled GPU's links down (the bug DCGM works around,
        200682374), and so does the simulator (the collector does not ask them); its MIG
        device's handle answers NOT_SUPPORTED."""
        gpu = source.device_handle(2)
        with pytest.raises(NvmlError) as caught:
            source.nvlink_active(source.mig_device_handle(gpu, 0), 0)

        assert ([False] * 18, "NOT_SUPPORTED") == (
            [source.nvlink_active(gpu, link) for link in range(18)],
            caught.value.error_name,
        )

    def test_idle_gpu_says_idle(self, source: SimulatedNvmlSource) -> None:
        """An idle GPU's clock event reasons are nvmlClocksEventReasonGpuIdle alone."""
        assert source.clocks_event_reasons(source.device_handle(1)) == 0x1

    def test_xids_raised_once_in_order_and_dropped_with_their_set(
        self, source: SimulatedNvmlSource
    ) -> None:
        """GPU 6's Xid comes once, however often it is registered, XID_AFTER_DRAINS
        drains (polls) after: its counters are served at 0 before, so that the Xid
        alert's increase() sees it."""
        events = source.xid_event_set()
        gpu_6 = source.device_handle(6)
        source.register_xid_events(gpu_6, events)
        source.register_xid_events(gpu_6, events)
        quiet = [source.next_xid(events) for _ in range(XID_AFTER_DRAINS)]
        found = source.next_xid(events)
        after = source.next_xid(events), source.next_xid(events)
        assert (quiet, found and (source.uuid(found[0]), found[1]), after) == (
            [None] * XID_AFTER_DRAINS,
            (FREE_GPU_6.uuid, 31),
            (None, None),
        )

    def test_an_xid_comes_after_its_own_gpus_first_watch(self, source: SimulatedNvmlSource) -> None:
        """A GPU first watched after some drains still has XID_AFTER_DRAINS quiet ones:
        counted from its own watch, not from the first drain."""
        events = source.xid_event_set()
        before = [source.next_xid(events) for _ in range(XID_AFTER_DRAINS)]
        source.register_xid_events(source.device_handle(6), events)
        quiet = [source.next_xid(events) for _ in range(XID_AFTER_DRAINS)]
        found = source.next_xid(events)
        assert (before + quiet, found and (source.uuid(found[0]), found[1])) == (
            [None] * (2 * XID_AFTER_DRAINS),
            (FREE_GPU_6.uuid, 31),
        )

    @pytest.mark.parametrize(
        "drains", [XID_AFTER_DRAINS, NVLINK_BURST_AFTER_DRAINS], ids=["xid", "nvlink_burst"]
    )
    def test_a_fault_comes_after_a_scrape_at_the_shipped_interval_saw_before(
        self, drains: int
    ) -> None:
        """At the default poll interval, the quiet drains before the demo's Xid, and
        before GPU 4's NVLink burst, outlast the shipped ServiceMonitor's scrape
        interval: Prometheus scrapes the counts from before first, so the alerts'
        increase() (and rate()) see the fault."""
        monitor = yaml.safe_load(
            (REPO / "manifests/components/prometheus-operator/servicemonitor.yaml").read_text()
        )
        (endpoint,) = monitor["spec"]["endpoints"]
        scrape_s = float(endpoint["interval"].removesuffix("s"))
        assert drains * DEFAULT_POLL_INTERVAL_S > scrape_s

    def test_nvlink_burst_comes_after_the_counters_first_read_and_stays(
        self, source: SimulatedNvmlSource
    ) -> None:
        """GPU 4's NVLink errors are those from before the exporter started until
        NVLINK_BURST_AFTER_DRAINS drains (polls) after its counters are first read, then
        risen by its burst of CRC errors and replays; counters, they stay so after."""
        events = source.xid_event_set()
        gpu_4 = source.device_handle(4)

        def poll() -> dict[str, int]:
            errors = dict(source.nvlink_fields(gpu_4).errors)
            assert source.next_xid(events) is None  # the poll's drain: no Xid on GPU 4
            return errors

        before = {"crc_flit": 1180, "crc_data": 0, "replay": 42, "recovery": 3, "ecc_data": 0}
        after = {**before, "crc_flit": 37180, "replay": 1342}
        polls = [poll() for _ in range(NVLINK_BURST_AFTER_DRAINS + 3)]
        assert [before] * NVLINK_BURST_AFTER_DRAINS + [after] * 3 == polls

    def test_an_nvlink_burst_comes_after_its_own_gpus_first_read(
        self, source: SimulatedNvmlSource
    ) -> None:
        """A GPU whose NVLink counters are first read after some drains still has
        NVLINK_BURST_AFTER_DRAINS quiet ones: counted from its own first read."""
        events = source.xid_event_set()
        for _ in range(NVLINK_BURST_AFTER_DRAINS):
            source.next_xid(events)
        gpu_4 = source.device_handle(4)
        crc = []
        for _ in range(NVLINK_BURST_AFTER_DRAINS + 1):
            crc.append(dict(source.nvlink_fields(gpu_4).errors)["crc_flit"])
            source.next_xid(events)
        assert [1180] * NVLINK_BURST_AFTER_DRAINS + [37180] == crc

    def test_freeing_the_event_set_drops_unread_xids(self, source: SimulatedNvmlSource) -> None:
        """An Xid not read before its event set is freed is gone, due or waiting."""
        events = source.xid_event_set()
        source.register_xid_events(source.device_handle(6), events)
        source.free_event_set(events)
        events = source.xid_event_set()
        drains = [source.next_xid(events) for _ in range(XID_AFTER_DRAINS + 2)]
        assert [None] * (XID_AFTER_DRAINS + 2) == drains

    def test_process_samples_once_per_clock_and_per_gpu(
        self, source: SimulatedNvmlSource, clock: ManualClock
    ) -> None:
        """Samples newer than the last seen time stamp, of this GPU's processes only;
        none new at the same clock."""
        gpu_3 = source.device_handle(3)
        samples = source.process_utilization(gpu_3, 0)
        again = source.process_utilization(gpu_3, samples[0].timestamp_us)
        assert ({s.pid for s in samples}, again) == ({5150, 5151}, ())
