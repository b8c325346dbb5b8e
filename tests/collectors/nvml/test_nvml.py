"""NvmlCollector through the real pynvml bindings, against the fake libnvidia-ml.so.1.

Each test reads the whole node, as the collector always does: every GPU under its UUID,
minor number and PCI address, every MIG device under its UUID and instance path. Where
a test asks which device a kubelet ID or DRA device name finds, it goes through
``exporter.resolver`` and the join (``attribution_support``), so the collector's keys
and the resolver must agree.
"""

from __future__ import annotations

import ctypes
import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest
from attribution_support import attributed, attributed_names, claimed_names
from fake_nvml_support import (
    FUNCTION_NOT_FOUND,
    GIB,
    NO_PERMISSION,
    NOT_FOUND,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeGpu,
    FakeMig,
    FakeNvml,
    FakeNvmlLibrary,
)
from freshprocess import run_python

import exporter.collectors.nvml as nvml_module
from exporter.collectors.base import CollectorContext, CollectorError, CollectorUnavailable
from exporter.collectors.gpu_metrics import (
    GPU_CLOCKS_THROTTLED,
    GPU_DRIVER_INFO,
    GPU_ECC_ERRORS,
    GPU_ENERGY,
    GPU_FABRIC_HEALTH_ISSUE,
    GPU_FABRIC_STATE,
    GPU_FABRIC_STATUS,
    GPU_MEMORY_BANDWIDTH_UTILIZATION,
    GPU_MEMORY_TEMPERATURE,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_NVLINK_ERRORS,
    GPU_NVLINK_LINKS,
    GPU_NVLINK_RECEIVE,
    GPU_NVLINK_TRANSMIT,
    GPU_PCIE_REPLAYS,
    GPU_POWER,
    GPU_RECOVERY_ACTION,
    GPU_REMAPPED_ROWS,
    GPU_RETIRED_PAGES,
    GPU_RETIRED_PAGES_PENDING,
    GPU_ROW_REMAP_FAILED,
    GPU_ROW_REMAP_PENDING,
    GPU_SM_CLOCK,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
    GPU_VIDEO_UTILIZATION,
    GPU_XID_ERRORS,
    GPU_XID_ERRORS_BY_CODE,
)
from exporter.collectors.nvml import NVLINK_ERROR_TYPES, NvmlCollector, NvmlError, _field_number
from exporter.collectors.runner import CollectorRunner
from exporter.model import (
    CollectorIssue,
    CollectorRun,
    DeviceIdentity,
    DeviceReading,
    HardwareKey,
    KeyKind,
    MetricSpec,
    Readings,
    Sample,
)

UUID_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
UUID_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
UUID_C = "GPU-cccccccc-1111-2222-3333-444444444444"
MIG_1 = "MIG-11111111-aaaa-bbbb-cccc-dddddddddddd"
MIG_2 = "MIG-22222222-aaaa-bbbb-cccc-dddddddddddd"
MIG_3 = "MIG-33333333-aaaa-bbbb-cccc-dddddddddddd"

GPU_A = FakeGpu(UUID_A, minor=0, pci="00000000:17:00.0")
GPU_B = FakeGpu(UUID_B, minor=1, pci="00000000:B1:00.0", util=(30, 10), power_mw=250_000)
MIG_GPU = FakeGpu(
    UUID_A,
    minor=0,
    pci="00000000:B1:00.0",
    # A MIG-enabled board answers no device-wide utilization.
    fail=(("util", NOT_SUPPORTED),),
    migs=(
        FakeMig(0, MIG_1, gpu_instance=1, compute_instance=0, placement=(9, 0, 4)),
        # Slot 1 is empty; gi 2 (3g.40gb in slots 4-7) has two compute instances, in
        # reverse slot order.
        FakeMig(2, MIG_2, 2, 1, name="NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", placement=(9, 4, 4)),
        FakeMig(3, MIG_3, 2, 0, name="NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", placement=(9, 4, 4)),
    ),
)


# Each slowdown's bit by nvml.h's name for it, as NVIDIA's bindings spell it.
THROTTLE_REASONS = tuple(
    (label, getattr(pynvml, f"nvmlClocksEventReason{name}"))
    for label, name in (
        ("sw_power_cap", "SwPowerCap"),
        ("hw_slowdown", "HwSlowdown"),
        ("sync_boost", "SyncBoost"),
        ("sw_thermal_slowdown", "SwThermalSlowdown"),
        ("hw_thermal_slowdown", "HwThermalSlowdown"),
        ("hw_power_brake_slowdown", "HwPowerBrakeSlowdown"),
    )
)


def throttled(mask: int) -> tuple[Sample, ...]:
    """podresources_gpu_clocks_throttled for nvml.h's clocks event reason bits."""
    return tuple(
        Sample(GPU_CLOCKS_THROTTLED, 1.0 if mask & bit else 0.0, (reason,))
        for reason, bit in THROTTLE_REASONS
    )


def remapped(correctable: int, uncorrectable: int, pending: int, failed: int) -> tuple[Sample, ...]:
    """The row-remapping samples of nvmlDeviceGetRemappedRows' four answers."""
    return (
        Sample(GPU_REMAPPED_ROWS, float(correctable), ("correctable",)),
        Sample(GPU_REMAPPED_ROWS, float(uncorrectable), ("uncorrectable",)),
        Sample(GPU_ROW_REMAP_PENDING, float(pending)),
        Sample(GPU_ROW_REMAP_FAILED, float(failed)),
    )


def retired(single_bit: int, double_bit: int, pending: int) -> tuple[Sample, ...]:
    """The page retirement samples of a GPU that retires pages."""
    return (
        Sample(GPU_RETIRED_PAGES, float(single_bit), ("multiple_single_bit_ecc",)),
        Sample(GPU_RETIRED_PAGES, float(double_bit), ("double_bit_ecc",)),
        Sample(GPU_RETIRED_PAGES_PENDING, float(pending)),
    )


def nvlink_samples(gpu: FakeGpu) -> tuple[Sample, ...]:
    """The NVLink samples of a fake GPU (MIG off): its error totals NVML answers, its
    traffic in bytes, and its links by state."""
    errors = tuple(
        Sample(GPU_NVLINK_ERRORS, float(count), (kind,))
        for kind, count in zip(NVLINK_ERROR_TYPES, gpu.nvlink_errors, strict=True)
        if count is not None
    )
    traffic = tuple(
        Sample(spec, kib * 1024.0)
        for spec, kib in zip(
            (GPU_NVLINK_TRANSMIT, GPU_NVLINK_RECEIVE),
            gpu.nvlink_traffic_kib or (None, None),
            strict=True,
        )
        if kib is not None
    )
    down = len(set(gpu.nvlinks_down) & set(range(gpu.nvlinks)))
    links = (
        (
            Sample(GPU_NVLINK_LINKS, float(gpu.nvlinks - down), ("active",)),
            Sample(GPU_NVLINK_LINKS, float(down), ("inactive",)),
        )
        if gpu.nvlinks
        else ()
    )
    # Not asked of a MIG-enabled GPU: NVML reports its links down.
    return () if not gpu.nvlinks or gpu.migs else errors + traffic + links


def fabric_samples(gpu: FakeGpu) -> tuple[Sample, ...]:
    """A fake GPU's fabric registration samples (MIG off): the state in a fabric, the
    status once it is completed (3)."""
    if gpu.fabric is None or gpu.migs or gpu.fabric[0] == 0:
        return ()
    state, status = gpu.fabric
    if state != 3:
        return (Sample(GPU_FABRIC_STATE, float(state)),)
    return (Sample(GPU_FABRIC_STATE, float(state)), Sample(GPU_FABRIC_STATUS, float(status)))


def samples(gpu: FakeGpu, *, without: tuple[str, ...] = ()) -> tuple[Sample, ...]:
    """What the collector makes of a fake GPU's figures, less the ``without`` ones."""
    by_figure = {
        "util": (
            Sample(GPU_UTILIZATION, gpu.util[0] / 100),
            Sample(GPU_MEMORY_BANDWIDTH_UTILIZATION, gpu.util[1] / 100),
        ),
        "memory": (
            Sample(GPU_MEMORY_USED, float(gpu.memory[1])),
            Sample(GPU_MEMORY_TOTAL, float(gpu.memory[0])),
        ),
        "power": (Sample(GPU_POWER, gpu.power_mw / 1000),),
        "energy": (Sample(GPU_ENERGY, gpu.energy_mj / 1000),),
        "temperature": (Sample(GPU_TEMPERATURE, float(gpu.temperature)),),
        "clock": (Sample(GPU_SM_CLOCK, gpu.sm_clock_mhz * 1e6),),
        "clocks_event": throttled(gpu.clocks_event),
        "ecc": (
            Sample(GPU_ECC_ERRORS, float(gpu.ecc[0]), ("corrected",)),
            Sample(GPU_ECC_ERRORS, float(gpu.ecc[1]), ("uncorrected",)),
        ),
        "remap": remapped(*gpu.remap),
        "retired": () if gpu.retired is None else retired(*gpu.retired),
        "video": (
            Sample(GPU_VIDEO_UTILIZATION, gpu.video[0] / 100, ("encoder",)),
            Sample(GPU_VIDEO_UTILIZATION, gpu.video[1] / 100, ("decoder",)),
        ),
        "memory_temperature": ()
        if gpu.memory_temperature is None
        else (Sample(GPU_MEMORY_TEMPERATURE, float(gpu.memory_temperature)),),
        "replays": (Sample(GPU_PCIE_REPLAYS, float(gpu.pcie_replays)),),
        "recovery_action": ()
        if gpu.recovery_action is None
        else (Sample(GPU_RECOVERY_ACTION, float(gpu.recovery_action)),),
        "nvlink": nvlink_samples(gpu),
        "fabric": fabric_samples(gpu),
        # Counted from events, not read: none raised unless a test raises one.
        "xid": NO_XIDS,
    }
    return tuple(s for figure, group in by_figure.items() if figure not in without for s in group)


def gpu_reading(
    gpu: FakeGpu, pci_address: str, figures: tuple[Sample, ...] | None = None
) -> DeviceReading:
    """A whole GPU as the collector reports it: under UUID, minor and PCI address."""
    return DeviceReading(
        name=gpu.uuid,
        keys=(
            HardwareKey(KeyKind.GPU_UUID, gpu.uuid),
            HardwareKey(KeyKind.NVIDIA_MINOR, str(gpu.minor)),
            HardwareKey(KeyKind.PCI, pci_address),
        ),
        identity=DeviceIdentity(gpu.uuid, pci_address, gpu.name, "nvidia"),
        samples=samples(gpu) if figures is None else figures,
        standalone=True,
    )


async def last_of_polls(collector: NvmlCollector, polls: int) -> CollectorRun:
    """The collector's run in the last of ``polls`` polls through the real runner, which
    keeps the cumulative error counts."""
    runner = CollectorRunner([collector], timeout_s=30)
    try:
        for _ in range(polls - 1):
            await runner.run_all()
        (last,) = await runner.run_all()
    finally:
        runner.close()
    return last


def mig_reading(
    gpu: FakeGpu,
    mig: FakeMig,
    pci_address: str,
    *,
    answers_for_instance: bool,
    placed: bool = True,
) -> DeviceReading:
    """A MIG device: under its UUID and instance path, and -- if it is its GPU instance's
    first compute instance -- ``<minor>/<gi>`` and, where ``placed``, ``<minor>/<profile
    ID>/<placement start>``; only memory, like real MIG devices."""
    keys = [
        HardwareKey(KeyKind.MIG_UUID, mig.uuid),
        HardwareKey(KeyKind.MIG_PATH, f"{gpu.uuid}/{mig.gpu_instance}/{mig.compute_instance}"),
    ]
    if answers_for_instance:
        keys.append(HardwareKey(KeyKind.NVIDIA_MINOR_GI, f"{gpu.minor}/{mig.gpu_instance}"))
        if placed:
            profile_id, start, _size = mig.placement
            keys.append(HardwareKey(KeyKind.MIG_PLACEMENT, f"{gpu.minor}/{profile_id}/{start}"))
    return DeviceReading(
        name=mig.uuid,
        keys=tuple(keys),
        identity=DeviceIdentity(mig.uuid, pci_address, mig.name, "nvidia"),
        samples=(
            Sample(GPU_MEMORY_USED, float(mig.memory[1])),
            Sample(GPU_MEMORY_TOTAL, float(mig.memory[0])),
        ),
        standalone=True,
    )


# A watched GPU that raised no Xid: its total, from 0.
NO_XIDS = (Sample(GPU_XID_ERRORS, 0.0),)
# What every poll of the fake reports of its driver (fake_nvml.c's defaults).
DRIVER = (Sample(GPU_DRIVER_INFO, 1.0, ("nvidia", "580.82.07", "13.0")),)


def collect_counting(
    fake_nvml: FakeNvml, collector: NvmlCollector, *calls: str
) -> tuple[Readings, tuple[int, ...]]:
    """One poll, and how many times it made each of the fake's ``calls``."""
    before = [fake_nvml.library.calls(call) for call in calls]
    readings = collector.collect()
    made = tuple(fake_nvml.library.calls(c) - b for c, b in zip(calls, before, strict=True))
    return readings, made


def issue(error: str, device: str, call: str) -> CollectorIssue:
    """A failed read as the collector reports it: which device, which call, which error."""
    return CollectorIssue(error, f"{device}: {call}: NVML {error}")


# A fresh process's first lines: where this host has a real NVML library, "no library"
# cannot be shown, so the script says so and stops (the test then skips).
_EXIT_WHERE_REAL_NVML = """try:
    ctypes.CDLL("libnvidia-ml.so.1")
except OSError:
    pass
else:
    print(json.dumps({"real_nvml": True}))
    raise SystemExit
"""


def _counted(run: CollectorRun) -> dict[str, int]:
    """A run's error counts above 0 (the preset labels start at 0)."""
    return {name: count for name, count in run.error_counts if count}


class TestWholeGpus:
    def test_reads_every_figure_in_base_units(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU comes under its UUID, minor and PCI keys with every figure in base units."""
        fake_nvml.configure(GPU_A)

        readings = collector.collect()

        expected_samples = (
            Sample(GPU_UTILIZATION, 0.85),
            Sample(GPU_MEMORY_BANDWIDTH_UTILIZATION, 0.40),  # the same call's memory rate
            Sample(GPU_MEMORY_USED, 20 * GIB),  # v2: reserved memory is not "used"
            Sample(GPU_MEMORY_TOTAL, 80 * GIB),
            Sample(GPU_POWER, 456.789),
            Sample(GPU_ENERGY, 123_456_789.012),
            Sample(GPU_TEMPERATURE, 55.0),
            Sample(GPU_SM_CLOCK, 1_755_000_000.0),
            *throttled(0x4),  # held at its power limit: sw_power_cap 1, the others 0
            Sample(GPU_ECC_ERRORS, 3.0, ("corrected",)),  # volatile, not aggregate
            Sample(GPU_ECC_ERRORS, 1.0, ("uncorrected",)),
            Sample(GPU_REMAPPED_ROWS, 2.0, ("correctable",)),  # over the GPU's life
            Sample(GPU_REMAPPED_ROWS, 5.0, ("uncorrectable",)),
            Sample(GPU_ROW_REMAP_PENDING, 1.0),  # waits for a GPU reset
            Sample(GPU_ROW_REMAP_FAILED, 0.0),
            Sample(GPU_VIDEO_UTILIZATION, 0.12, ("encoder",)),  # NVENC
            Sample(GPU_VIDEO_UTILIZATION, 0.30, ("decoder",)),  # NVDEC
            Sample(GPU_MEMORY_TEMPERATURE, 63.0),  # a field value, its HBM sensor
            Sample(GPU_PCIE_REPLAYS, 4.0),
            Sample(GPU_RECOVERY_ACTION, 0.0),  # the driver asks none
            Sample(GPU_NVLINK_ERRORS, 14.0, ("crc_flit",)),  # all links together
            Sample(GPU_NVLINK_ERRORS, 2.0, ("crc_data",)),
            Sample(GPU_NVLINK_ERRORS, 3.0, ("replay",)),
            Sample(GPU_NVLINK_ERRORS, 1.0, ("recovery",)),  # ecc_data: NOT_SUPPORTED
            Sample(GPU_NVLINK_TRANSMIT, 7 * GIB),  # KiB, all links (scope UINT_MAX)
            Sample(GPU_NVLINK_RECEIVE, 9 * GIB),
            Sample(GPU_NVLINK_LINKS, 17.0, ("active",)),  # 18, link 5 down
            Sample(GPU_NVLINK_LINKS, 1.0, ("inactive",)),
            Sample(GPU_FABRIC_STATE, 3.0),  # registered with the NVLink fabric
            Sample(GPU_FABRIC_STATUS, 0.0),  # successfully
            Sample(GPU_XID_ERRORS, 0.0),  # watched from this poll on; none raised
        )
        expected = DeviceReading(
            name=UUID_A,
            keys=(
                HardwareKey(KeyKind.GPU_UUID, UUID_A),
                HardwareKey(KeyKind.NVIDIA_MINOR, "0"),
                HardwareKey(KeyKind.PCI, "0000:17:00.0"),
            ),
            identity=DeviceIdentity(UUID_A, "0000:17:00.0", "NVIDIA H100 80GB HBM3", "nvidia"),
            samples=expected_samples,
            standalone=True,
        )
        assert Readings(node_samples=DRIVER, devices=(expected,)) == readings

    def test_each_clocks_event_reason_that_is_a_slowdown(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """nvml.h's clocks event reason bits, each slowdown a series of its own; idle,
        application clocks and display clocks are no slowdown and have none."""
        idle, app_clocks, display = 0x1, 0x2, 0x100
        mask = 0x8 | 0x40 | idle | app_clocks | display  # hw_slowdown, hw_thermal_slowdown
        fake_nvml.configure(replace(GPU_A, clocks_event=mask))
        (gpu,) = collector.collect().devices
        assert [("hw_slowdown", 1.0), ("hw_thermal_slowdown", 1.0)] == [
            (s.label_values[0], s.value)
            for s in gpu.samples
            if s.spec is GPU_CLOCKS_THROTTLED and s.value
        ]
        assert 6 == sum(1 for s in gpu.samples if s.spec is GPU_CLOCKS_THROTTLED)

    def test_row_remapping_answers_each_in_its_series(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A failed remapping and no pending one (the default GPU has the opposite): each
        of nvmlDeviceGetRemappedRows' four answers lands in its own series."""
        fake_nvml.configure(replace(GPU_A, remap=(7, 3, 0, 1)))
        (gpu,) = collector.collect().devices
        assert remapped(7, 3, 0, 1) == tuple(
            s
            for s in gpu.samples
            if s.spec in (GPU_REMAPPED_ROWS, GPU_ROW_REMAP_PENDING, GPU_ROW_REMAP_FAILED)
        )

    @pytest.mark.parametrize("pages", [(3, 1, 1), (0, 0, 0), (0, 2, 0)])
    def test_a_gpu_before_ampere_retires_pages(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, pages: tuple[int, int, int]
    ) -> None:
        """A V100 retires pages instead of remapping rows: pages for each cause (NVML's
        size query, then the addresses; none at all answers the size query alone) and
        the pending status, each in its own series."""
        gpu = replace(
            GPU_A, name="Tesla V100-SXM2-32GB", retired=pages, fail=(("remap", NOT_SUPPORTED),)
        )
        fake_nvml.configure(gpu)
        (reading,) = collector.collect().devices
        assert retired(*pages) == tuple(
            s for s in reading.samples if s.spec in (GPU_RETIRED_PAGES, GPU_RETIRED_PAGES_PENDING)
        )
        assert not any(s.spec is GPU_REMAPPED_ROWS for s in reading.samples)

    @pytest.mark.parametrize("code", [NOT_SUPPORTED, FUNCTION_NOT_FOUND])
    def test_no_row_remapper_is_no_series_and_no_error(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, code: int
    ) -> None:
        """A GPU before Ampere answers NOT_SUPPORTED, a driver before R450 has no such
        call (FUNCTION_NOT_FOUND): neither is a fault, so no series and no issue."""
        gpu = replace(GPU_A, fail=(("remap", code),))
        fake_nvml.configure(gpu)
        readings = collector.collect()
        expected = gpu_reading(gpu, "0000:17:00.0", samples(gpu, without=("remap",)))
        assert ((expected,), ()) == (readings.devices, readings.issues)

    def test_no_memory_sensor_is_no_series_and_no_error(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A board without a memory sensor (GDDR) answers the field NOT_SUPPORTED in the
        field's own return, the call itself succeeding: no series, no issue."""
        gpu = replace(GPU_A, memory_temperature=None)
        fake_nvml.configure(gpu)
        readings = collector.collect()
        expected = gpu_reading(gpu, "0000:17:00.0", samples(gpu))
        assert ((expected,), ()) == (readings.devices, readings.issues)

    @pytest.mark.parametrize(
        ("failing", "code", "name"),
        [
            ("memory_temp", UNKNOWN, "UNKNOWN"),
            ("memory_temp", 2, "INVALID_ARGUMENT"),
            ("memory_temp", NO_PERMISSION, "NO_PERMISSION"),
            ("fields", UNKNOWN, "UNKNOWN"),
        ],
        ids=["field-unknown", "field-invalid-argument", "field-no-permission", "whole-call"],
    )
    def test_a_failed_memory_temperature_is_its_issue(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, failing: str, code: int, name: str
    ) -> None:
        """A field whose own return is an error (any but NOT_SUPPORTED, those below it
        too: a failed field's value is undefined, nvml.h), or the field values call
        failing itself, loses that figure only (the call fails the recovery action and
        NVLink figures too), named as nvml.h names the error."""
        gpu = replace(GPU_A, fail=((failing, code),))
        fake_nvml.configure(gpu)
        readings = collector.collect()
        whole_call = ("recovery_action", "nvlink") if failing == "fields" else ()
        lost = ("memory_temperature", *whole_call)
        expected = gpu_reading(gpu, "0000:17:00.0", samples(gpu, without=lost))
        assert ((expected,), tuple(issue(name, UUID_A, figure) for figure in lost)) == (
            readings.devices,
            readings.issues,
        )

    @pytest.mark.parametrize(
        ("value_type", "member", "value", "expected"),
        [
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 71, 71.0),
            (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", 70.5, 70.5),
            (pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -3, -3.0),
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", 65, 65.0),
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**40, float(2**40)),
        ],
    )
    def test_a_field_value_is_read_by_its_type(
        self, value_type: int, member: str, value: float, expected: float
    ) -> None:
        """pynvml's own c_nvmlFieldValue_t: the union member its valueType names."""
        field = pynvml.c_nvmlFieldValue_t()
        field.valueType = value_type
        setattr(field.value, member, value)
        assert expected == _field_number(pynvml, field)

    def test_a_field_value_of_an_unknown_type_is_unknown(self) -> None:
        field = pynvml.c_nvmlFieldValue_t()
        field.valueType = pynvml.NVML_VALUE_TYPE_COUNT
        with pytest.raises(NvmlError) as raised:
            _field_number(pynvml, field)
        assert "UNKNOWN" == raised.value.error_name

    @pytest.mark.parametrize(
        ("value_type", "member", "value"),
        [
            (pynvml.NVML_VALUE_TYPE_DOUBLE, "dVal", -0.25),
            # Below all bits set: that is NVML_VALUE_NOT_AVAILABLE (TestNotAvailable).
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 2**32 - 2),
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG, "ulVal", 2**40),
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**64 - 2),
            (pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG, "sllVal", -5),
            (pynvml.NVML_VALUE_TYPE_SIGNED_INT, "siVal", -5),
            (pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT, "usVal", 65),
        ],
    )
    def test_a_field_value_is_its_member_alone_at_its_width(
        self, value_type: int, member: str, value: float
    ) -> None:
        """Every value type, read at its member's width and signedness only: the union's
        other bytes are whatever the driver left there (all ones here), and a value past
        the range of a narrower or differently signed member would read otherwise."""
        field = pynvml.c_nvmlFieldValue_t()
        field.value.ullVal = 2**64 - 1
        field.valueType = value_type
        setattr(field.value, member, value)
        assert float(value) == _field_number(pynvml, field)

    def test_the_fake_answers_each_field_in_its_own_return(self, fake_nvml: FakeNvml) -> None:
        """The fake as nvml.h has it: the call succeeds and each field says whether it could
        answer; "fail memory_temp" fails that field alone, and other field IDs are not
        answered, so a collector that asked the wrong field would see NOT_SUPPORTED."""
        fake_nvml.configure(replace(GPU_A, fail=(("memory_temp", UNKNOWN),)))
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            fields = pynvml.nvmlDeviceGetFieldValues(
                handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP, pynvml.NVML_FI_DEV_MEMORY_TEMP + 1]
            )
        finally:
            pynvml.nvmlShutdown()
        assert [UNKNOWN, NOT_SUPPORTED] == [int(field.nvmlReturn) for field in fields]

    def test_a_driver_before_r535_answers_by_the_old_name(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """R535 renamed throttle reasons to clocks event reasons: an older driver answers
        nvmlDeviceGetCurrentClocksThrottleReasons, asked from then on."""
        fake_nvml.configure(replace(GPU_A, clocks_event=0x20), driver_version="525.147.05")
        before = fake_nvml.library.calls("clocks_event")
        asked_new = fake_nvml.library.calls("clocks_event_reasons")
        for _ in range(2):
            (gpu,) = collector.collect().devices
            assert throttled(0x20) == tuple(
                s for s in gpu.samples if s.spec is GPU_CLOCKS_THROTTLED
            )
        # The new name asked once, the old one each poll from then on.
        assert (1, 2) == (
            fake_nvml.library.calls("clocks_event_reasons") - asked_new,
            fake_nvml.library.calls("clocks_event") - before,
        )

    def test_a_failed_read_by_the_new_name_is_not_an_old_driver(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """Only FUNCTION_NOT_FOUND says the driver predates R535: a recent driver whose
        clocks event read fails once (UNKNOWN) is that poll's issue, and the next poll
        asks the new name again, not the old one for good (gone in CUDA 14)."""
        failing = tmp_path / "clocks_event_fails"
        failing.touch()
        fake_nvml.configure(
            replace(GPU_A, clocks_event=0x4, fail_while=(("clocks_event", UNKNOWN, failing),)),
            driver_version="580.65.06",
        )
        during = collector.collect()
        failing.unlink()
        asked_new = fake_nvml.library.calls("clocks_event_reasons")
        after = collector.collect()
        assert (["UNKNOWN"], throttled(0x4), 1) == (
            [i.error for i in during.issues],
            tuple(s for s in after.devices[0].samples if s.spec is GPU_CLOCKS_THROTTLED),
            fake_nvml.library.calls("clocks_event_reasons") - asked_new,
        )

    def test_pci_address_in_kernel_form(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """NVML's 00000000:B1:00.0 becomes the kernel's 0000:b1:00.0, in key and identity."""
        fake_nvml.configure(GPU_B)

        (reading,) = collector.collect().devices

        expected = (HardwareKey(KeyKind.PCI, "0000:b1:00.0"), "0000:b1:00.0")
        assert expected == (reading.keys[-1], reading.identity.pci_address)

    def test_every_gpu_reported_in_nvml_order(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Every GPU of the node is reported, whatever the kubelet holds."""
        fake_nvml.configure(GPU_A, GPU_B)

        readings = collector.collect()

        expected = Readings(
            node_samples=DRIVER,
            devices=(gpu_reading(GPU_A, "0000:17:00.0"), gpu_reading(GPU_B, "0000:b1:00.0")),
        )
        assert expected == readings

    def test_kubelet_ids_find_their_gpu(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """UUIDs, replicas and PCI addresses find their GPU through the join; others none."""
        fake_nvml.configure(GPU_A, GPU_B)

        found = attributed_names(
            collector.collect(),
            UUID_A,
            f"{UUID_B}::3",
            "0000:b1:00.0",
            "0000:af:00.1",
            "card0-0",
            "GPU-ffffffff-1111-2222-3333-444444444444",
        )

        expected = {
            UUID_A: UUID_A,
            f"{UUID_B}::3": UUID_B,
            "0000:b1:00.0": UUID_B,
            "0000:af:00.1": None,
            "card0-0": None,
            "GPU-ffffffff-1111-2222-3333-444444444444": None,
        }
        assert expected == found

    @pytest.mark.parametrize(("reason", "bit"), THROTTLE_REASONS)
    def test_each_slowdown_bit_is_its_own_reason(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, reason: str, bit: int
    ) -> None:
        """One clocks event reason bit at a time: that reason's series is 1, the others 0."""
        fake_nvml.configure(replace(GPU_A, clocks_event=bit))
        (gpu,) = collector.collect().devices
        assert [reason] == [
            s.label_values[0] for s in gpu.samples if s.spec is GPU_CLOCKS_THROTTLED and s.value
        ]

    @pytest.mark.parametrize(
        ("bus_id", "address"),
        [
            # NVML prints hex in capitals; the kernel (and the kubelet) in small letters.
            ("00000000:B1:1F.7", "0000:b1:1f.7"),
            ("00000001:3A:0C.1", "0001:3a:0c.1"),
            ("00010000:01:00.0", "10000:01:00.0"),  # a VMD domain: wider than 4 digits
        ],
    )
    def test_every_part_of_the_bus_id_in_kernel_form(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, bus_id: str, address: str
    ) -> None:
        """Domain, bus, device and function each as the kernel writes them."""
        fake_nvml.configure(replace(GPU_A, pci=bus_id))
        (reading,) = collector.collect().devices
        assert (HardwareKey(KeyKind.PCI, address), address) == (
            reading.keys[-1],
            reading.identity.pci_address,
        )

    @pytest.mark.parametrize(
        "bus_id",
        [
            "garbage",
            "00000000:17:00.00",
            "00000000:17:00",
            "0:17:00.0",  # NVML pads the domain to 8 digits (4 in busIdLegacy)
            "100000000:17:00.0",  # wider than NVML's unsigned int domain
            "00000000:17:20.0",  # no slot past 0x1f
        ],
    )
    def test_a_bus_id_of_no_known_form_is_no_pci_key(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, bus_id: str
    ) -> None:
        """A bus ID that is not NVML's form gives no PCI key (rather than a wrong one or a
        failed poll); the GPU keeps its other keys and figures."""
        gpu = replace(GPU_A, pci=bus_id)
        fake_nvml.configure(gpu)
        readings = collector.collect()
        expected = replace(
            gpu_reading(gpu, "unused"),
            keys=(
                HardwareKey(KeyKind.GPU_UUID, UUID_A),
                HardwareKey(KeyKind.NVIDIA_MINOR, "0"),
            ),
            identity=DeviceIdentity(UUID_A, None, gpu.name, "nvidia"),
        )
        assert ((expected,), ()) == (readings.devices, readings.issues)

    def test_retired_pages_series_as_documented(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU before Ampere: the page retirement families by name, each sample with
        its labels by name (cause=...), as README and the alert rules use them."""
        fake_nvml.configure(replace(GPU_A, retired=(3, 1, 1), fail=(("remap", NOT_SUPPORTED),)))
        (reading,) = collector.collect().devices
        assert [
            ("podresources_gpu_retired_pages", {"cause": "multiple_single_bit_ecc"}, 3.0),
            ("podresources_gpu_retired_pages", {"cause": "double_bit_ecc"}, 1.0),
            ("podresources_gpu_retired_pages_pending", {}, 1.0),
        ] == [
            (s.spec.name, dict(zip(s.spec.labels, s.label_values, strict=True)), s.value)
            for s in reading.samples
            if s.spec in (GPU_RETIRED_PAGES, GPU_RETIRED_PAGES_PENDING)
        ]

    def test_a_gpu_without_mig_says_so_without_an_issue(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU before Ampere answers NOT_SUPPORTED for its MIG mode: a whole GPU, read
        in full, and no issue."""
        gpu = replace(GPU_A, name="Tesla V100-SXM2-32GB", fail=(("mig_mode", NOT_SUPPORTED),))
        fake_nvml.configure(gpu)
        readings = collector.collect()
        assert ((gpu_reading(gpu, "0000:17:00.0"),), ()) == (readings.devices, readings.issues)

    @pytest.mark.parametrize(
        ("figure", "first_keys", "first_model"),
        [
            ("name", 3, None),
            ("pci", 2, "NVIDIA H100 80GB HBM3"),
            ("minor", 2, "NVIDIA H100 80GB HBM3"),
        ],
    )
    def test_an_identity_read_that_failed_is_asked_again(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        tmp_path: Path,
        figure: str,
        first_keys: int,
        first_model: str | None,
    ) -> None:
        """A GPU's name, PCI address or minor number that fails once (UNKNOWN) is missing
        from that poll, not for the life of the process: the next poll reads it."""
        failing = tmp_path / "identity_fails"
        failing.touch()
        fake_nvml.configure(replace(GPU_A, fail_while=((figure, UNKNOWN, failing),)))
        (first,) = collector.collect().devices
        failing.unlink()
        (second,) = collector.collect().devices
        assert (first_keys, first_model, gpu_reading(GPU_A, "0000:17:00.0")) == (
            len(first.keys),
            first.identity.model,
            second,
        )

    def test_an_identity_nvml_does_not_support_is_read_once(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A minor number NVML does not support is no issue and no key, and like the
        rest of a GPU's identity it is not asked again."""
        fake_nvml.configure(replace(GPU_A, fail=(("minor", NOT_SUPPORTED),)))
        collector.collect()
        readings, (uuid_calls,) = collect_counting(fake_nvml, collector, "uuid")
        (reading,) = readings.devices
        assert (0, [KeyKind.GPU_UUID, KeyKind.PCI], ()) == (
            uuid_calls,
            [k.kind for k in reading.keys],
            readings.issues,
        )

    @pytest.mark.parametrize(("figure", "call"), [("handle", "device_handle"), ("uuid", "uuid")])
    def test_a_gpu_nvml_cannot_name_is_left_out(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, figure: str, call: str
    ) -> None:
        """A GPU whose handle or UUID read fails has no reading (nothing to name it by)
        and is an issue; the GPUs after it are read."""
        fake_nvml.configure(replace(GPU_A, fail=((figure, UNKNOWN),)), GPU_B)
        readings = collector.collect()
        expected = Readings(
            node_samples=DRIVER,
            devices=(gpu_reading(GPU_B, "0000:b1:00.0"),),
            issues=(issue("UNKNOWN", "GPU index 0", call),),
        )
        assert expected == readings

    def test_a_gpu_whose_handle_is_refused_is_one_issue_until_nvml_restarts(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """NO_PERMISSION for a GPU's handle: the exporter may not open that GPU's device
        node, which does not change while it runs. One issue, then the GPU is not asked
        for again (so the error count does not grow every poll for ever) until NVML is
        initialised afresh; the GPUs after it are read."""
        fake_nvml.configure(replace(GPU_A, fail=(("handle", NO_PERMISSION),)), GPU_B)
        refused = CollectorIssue(
            "NO_PERMISSION",
            "GPU index 0: device_handle: NVML NO_PERMISSION",
        )
        first = collector.collect()
        second, (asked_again,) = collect_counting(fake_nvml, collector, "handle")
        collector.close()
        after_restart = collector.collect()
        gpu_b = (gpu_reading(GPU_B, "0000:b1:00.0"),)
        assert ((refused,), (), (refused,)) == (
            first.issues,
            second.issues,
            after_restart.issues,
        )
        assert (gpu_b, gpu_b, gpu_b, 0) == (
            first.devices,
            second.devices,
            after_restart.devices,
            asked_again,
        )

    @pytest.mark.parametrize(
        ("error", "issues"),
        [(UNKNOWN, (issue("UNKNOWN", "GPU index 0", "device_handle"),)), (NOT_SUPPORTED, ())],
    )
    def test_a_handle_refused_for_another_reason_is_asked_every_poll(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        error: str,
        issues: tuple[CollectorIssue, ...],
    ) -> None:
        """Only NO_PERMISSION is remembered: a handle that failed otherwise may come next
        time, so it is asked again each poll (an error counted each time, NOT_SUPPORTED
        never)."""
        fake_nvml.configure(replace(GPU_A, fail=(("handle", error),)), GPU_B)
        first = collector.collect()
        second, (handle_calls,) = collect_counting(fake_nvml, collector, "handle")
        assert (issues, issues, 1) == (
            first.issues,
            second.issues,
            handle_calls,  # GPU 0's: GPU 1's handle is kept
        )

    def test_the_current_mig_mode_counts_not_the_pending_one(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """MIG mode turned off but not yet in effect (no GPU reset since): the GPU is
        still in MIG mode and its MIG devices are read."""
        fake_nvml.configure(replace(MIG_GPU, mig_pending=0))
        assert [UUID_A, MIG_1, MIG_3, MIG_2] == [d.name for d in collector.collect().devices]


def device(readings: Readings, name: str) -> DeviceReading:
    return next(d for d in readings.devices if d.name == name)


def nvlink_figures(readings: Readings, uuid: str) -> list[tuple[str, tuple[str, ...], float]]:
    """The NVLink samples of one device: (family, labels, value)."""
    families = (GPU_NVLINK_LINKS, GPU_NVLINK_ERRORS, GPU_NVLINK_TRANSMIT, GPU_NVLINK_RECEIVE)
    return [
        (s.spec.name, s.label_values, s.value)
        for s in device(readings, uuid).samples
        if s.spec in families
    ]


def fabric_figures(readings: Readings, uuid: str) -> list[tuple[str, float]]:
    """The fabric registration samples of one device: (family, value)."""
    return [
        (s.spec.name, s.value)
        for s in device(readings, uuid).samples
        if s.spec in (GPU_FABRIC_STATE, GPU_FABRIC_STATUS)
    ]


def links(active: int, inactive: int) -> list[tuple[str, tuple[str, ...], float]]:
    return [
        (GPU_NVLINK_LINKS.name, ("active",), float(active)),
        (GPU_NVLINK_LINKS.name, ("inactive",), float(inactive)),
    ]


# nvml.h return codes the NVLink tests have a field or link answer
INVALID_ARGUMENT_CODE = 2  # NVML_ERROR_INVALID_ARGUMENT
TIMEOUT_CODE = 10  # NVML_ERROR_TIMEOUT


class TestNvLink:
    def test_counted_links_are_each_asked_once(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Where the driver counts the links (field 91), exactly those are asked their
        state, in one field values call with the error totals and the traffic."""
        fake_nvml.configure(replace(GPU_A, nvlink_errors=(None,) * 5, nvlink_traffic_kib=None))
        readings, asked = collect_counting(fake_nvml, collector, "nvlink_state", "fields")

        # three field values calls: the memory's temperature, the recovery action, NVLink's
        assert (links(17, 1), (18, 3), ()) == (
            nvlink_figures(readings, UUID_A),
            asked,
            readings.issues,
        )

    def test_uncounted_links_are_probed_to_the_first_past_the_last(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A driver that does not know field 91 (NOT_SUPPORTED) has its links asked from 0
        until one answers INVALID_ARGUMENT (past the GPU's last), which is no error."""
        gpu = replace(GPU_A, nvlinks=12, nvlinks_counted=False, nvlinks_down=(0, 11))
        fake_nvml.configure(gpu)
        readings, (asked,) = collect_counting(fake_nvml, collector, "nvlink_state")

        assert (links(10, 2), 13, ()) == (
            nvlink_figures(readings, UUID_A)[-2:],
            asked,
            readings.issues,
        )

    def test_a_count_of_none_is_trusted(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Field 91 answering 0 is no NVLink, as DCGM takes it: no link is asked (not
        probed as where the field is unknown), no link series; the counters stay."""
        fake_nvml.configure(replace(GPU_A, nvlink_count=0))
        readings, (nvlink_state_calls,) = collect_counting(fake_nvml, collector, "nvlink_state")
        counters = [  # GPU_A's error totals and traffic, without its links
            (s.spec.name, s.label_values, s.value) for s in nvlink_samples(GPU_A)[:-2]
        ]

        assert (counters, 0, ()) == (
            nvlink_figures(readings, UUID_A),
            nvlink_state_calls,
            readings.issues,
        )

    def test_a_counted_link_that_answers_an_error_is_skipped(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Below the count, a link answering INVALID_ARGUMENT is skipped, as DCGM skips
        it, and the links after it are still asked: numbering may have gaps."""
        gpu = replace(GPU_A, nvlinks=18, nvlinks_absent=(2, 3), nvlinks_down=(17,))
        fake_nvml.configure(gpu)
        readings = collector.collect()

        assert (links(15, 1), ()) == (nvlink_figures(readings, UUID_A)[-2:], readings.issues)

    def test_no_nvlink_is_no_series_and_no_error(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A PCIe card without NVLinks answers the fields and the first link's state
        NOT_SUPPORTED: no NVLink series, no issue, one state call a poll."""
        fake_nvml.configure(replace(GPU_A, nvlinks=0))
        readings, (nvlink_state_calls,) = collect_counting(fake_nvml, collector, "nvlink_state")

        assert ([], 1, ()) == (
            nvlink_figures(readings, UUID_A),
            nvlink_state_calls,
            readings.issues,
        )

    def test_all_links_inactive_is_reported_not_dropped(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Links that answer SUCCESS but disabled (a PCIe card without its bridge) are
        inactive links, counted: 0 active of 12."""
        gpu = replace(GPU_A, nvlinks=12, nvlinks_down=tuple(range(12)))
        fake_nvml.configure(gpu)

        assert links(0, 12) == nvlink_figures(collector.collect(), UUID_A)[-2:]

    def test_a_mig_enabled_gpu_is_not_asked(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """NVML reports a MIG-enabled GPU's links down (DCGM's bug 200682374): neither its
        link states nor its NVLink fields are asked, and it has no NVLink series; with
        MIG turned off it has them again."""
        mig_off = fake_nvml.config_path.parent / "mig-off"
        fake_nvml.configure(replace(MIG_GPU, mig_off_flag=mig_off))
        with_mig, (asked_with_mig,) = collect_counting(fake_nvml, collector, "nvlink_state")
        mig_off.touch()
        without_mig = collector.collect()

        assert ([], 0, links(17, 1)) == (
            nvlink_figures(with_mig, UUID_A),
            asked_with_mig,
            nvlink_figures(without_mig, UUID_A)[-2:],
        )

    def test_a_gpu_whose_mig_mode_is_unknown_is_not_asked(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Where the MIG-mode read fails, the GPU may be MIG-enabled, whose links NVML
        reports down: its NVLink figures are not asked that poll (a gap, not every link
        inactive), and the failed read is the one issue."""
        fake_nvml.configure(replace(MIG_GPU, fail=(("mig_mode", UNKNOWN),)))
        readings, (nvlink_state_calls,) = collect_counting(fake_nvml, collector, "nvlink_state")

        assert ([], 0, (issue("UNKNOWN", UUID_A, "mig_enabled"),)) == (
            nvlink_figures(readings, UUID_A),
            nvlink_state_calls,
            readings.issues,
        )

    def test_a_link_whose_state_fails_is_unknown_and_the_rest_stays(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A link whose state answers another error (UNKNOWN) is counted unknown and the
        error reported once a poll, however many links fail; the other links, the error
        totals and the traffic stay (a failing link must not take the GPU's NVLink series
        with it, nor end an alert on them)."""
        gpu = replace(GPU_A, nvlink_state_errors=((3, UNKNOWN), (9, UNKNOWN)))
        fake_nvml.configure(gpu)
        readings = collector.collect()

        totals_and_traffic = [  # the four error totals, then the bytes each way
            (s.spec.name, s.label_values, s.value)
            for s in nvlink_samples(gpu)
            if s.spec is not GPU_NVLINK_LINKS
        ]
        expected = [
            *totals_and_traffic,
            *links(15, 1),  # link 5 inactive, 3 and 9 unknown
            (GPU_NVLINK_LINKS.name, ("unknown",), 2.0),
        ]
        assert (expected, (issue("UNKNOWN", UUID_A, "nvlink"),)) == (
            nvlink_figures(readings, UUID_A),
            readings.issues,
        )

    def test_links_failing_differently_report_the_first_error(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Links whose states fail with different errors are each unknown; the poll's one
        issue is the first link's error."""
        fake_nvml.configure(replace(GPU_A, nvlink_state_errors=((3, UNKNOWN), (9, NOT_FOUND))))
        readings = collector.collect()
        assert (
            [*links(15, 1), (GPU_NVLINK_LINKS.name, ("unknown",), 2.0)],
            (issue("UNKNOWN", UUID_A, "nvlink"),),
        ) == (nvlink_figures(readings, UUID_A)[-3:], readings.issues)

    def test_every_link_failing_is_every_link_unknown(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Every link's state failing (the figure's own fail line): 0 active, 18 unknown,
        one issue, and the GPU's other figures stay."""
        fake_nvml.configure(replace(GPU_A, fail=(("nvlink_state", UNKNOWN),)))
        readings = collector.collect()

        assert (
            [*links(0, 0), (GPU_NVLINK_LINKS.name, ("unknown",), 18.0)],
            (issue("UNKNOWN", UUID_A, "nvlink"),),
            0.85,
        ) == (
            nvlink_figures(readings, UUID_A)[-3:],
            readings.issues,
            next(s.value for s in device(readings, UUID_A).samples if s.spec is GPU_UTILIZATION),
        )

    def test_every_error_total_under_its_own_type(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Each of the five *_ERROR_COUNT_TOTAL fields, all answered, is served under its
        own type, ecc_data (field 160) too: none dropped, none under another's label."""
        fake_nvml.configure(replace(GPU_A, nvlink_errors=(11, 22, 33, 44, 55)))
        errors = GPU_NVLINK_ERRORS.name

        assert [
            (errors, ("crc_flit",), 11.0),
            (errors, ("crc_data",), 22.0),
            (errors, ("replay",), 33.0),
            (errors, ("recovery",), 44.0),
            (errors, ("ecc_data",), 55.0),
            (GPU_NVLINK_TRANSMIT.name, (), 7 * GIB),
            (GPU_NVLINK_RECEIVE.name, (), 9 * GIB),
            *links(17, 1),
        ] == nvlink_figures(collector.collect(), UUID_A)

    def test_traffic_one_way_only_is_served_that_way(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Where the driver answers the received data but not the sent (NOT_SUPPORTED),
        only the receive counter is served, and the other way round."""
        fake_nvml.configure(
            replace(GPU_A, nvlink_traffic_kib=(None, 1024)),
            replace(GPU_B, nvlink_traffic_kib=(2048, None)),
        )
        readings = collector.collect()
        families = (GPU_NVLINK_TRANSMIT.name, GPU_NVLINK_RECEIVE.name)

        def traffic(uuid: str) -> list[tuple[str, tuple[str, ...], float]]:
            return [f for f in nvlink_figures(readings, uuid) if f[0] in families]

        assert (
            [(GPU_NVLINK_RECEIVE.name, (), 1024.0 * 1024)],
            [(GPU_NVLINK_TRANSMIT.name, (), 2048.0 * 1024)],
        ) == (traffic(UUID_A), traffic(UUID_B))

    def test_fields_the_driver_does_not_know_are_left_out(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A driver that does not know the NVLink field IDs answers each INVALID_ARGUMENT:
        no counters, no issue, and the links are probed as where field 91 is unknown."""
        fake_nvml.configure(replace(GPU_A, fail=(("nvlink_fields", INVALID_ARGUMENT_CODE),)))
        readings, (nvlink_state_calls,) = collect_counting(fake_nvml, collector, "nvlink_state")

        assert (links(17, 1), 19, ()) == (
            nvlink_figures(readings, UUID_A),
            nvlink_state_calls,
            readings.issues,
        )

    @pytest.mark.parametrize(("code", "name"), [(UNKNOWN, "UNKNOWN"), (TIMEOUT_CODE, "TIMEOUT")])
    def test_a_field_answering_another_error_is_the_figures_issue(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, code: int, name: str
    ) -> None:
        """An NVLink field answering any error but NOT_SUPPORTED and INVALID_ARGUMENT
        (its value undefined, nvml.h) is left out and reported once, under the figure by
        that error's own name; the links are still asked (probed, the count failing too),
        so a failing field does not end the GPU's link series."""
        fake_nvml.configure(replace(GPU_A, fail=(("nvlink_fields", code),)))
        readings, (nvlink_state_calls,) = collect_counting(fake_nvml, collector, "nvlink_state")

        assert (links(17, 1), 19, (issue(name, UUID_A, "nvlink"),)) == (
            nvlink_figures(readings, UUID_A),
            nvlink_state_calls,
            readings.issues,
        )

    def test_one_field_failing_leaves_the_others(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """One NVLink field answering UNKNOWN (the receive traffic) loses that field only:
        the error totals, the transmit traffic and the links stay; one issue."""
        gpu = replace(GPU_A, nvlink_traffic_kib=(7_340_032, -2))
        fake_nvml.configure(gpu)
        readings = collector.collect()

        kept = [
            (s.spec.name, s.label_values, s.value)
            for s in nvlink_samples(replace(GPU_A, nvlink_traffic_kib=(7_340_032, None)))
        ]
        assert (kept, (issue("UNKNOWN", UUID_A, "nvlink"),)) == (
            nvlink_figures(readings, UUID_A),
            readings.issues,
        )

    def test_a_gpu_lost_in_a_field_is_abandoned(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """GPU_IS_LOST as an NVLink field's own answer abandons the GPU, as any figure's:
        it is not taken for a field the driver does not know."""
        fake_nvml.configure(replace(GPU_A, fail=(("nvlink_fields", GPU_IS_LOST_CODE),)))
        readings = collector.collect()

        assert ([], (issue("GPU_IS_LOST", UUID_A, "nvlink"),)) == (
            nvlink_figures(readings, UUID_A),
            readings.issues,
        )

    def test_counted_links_answering_not_supported_keep_the_counters(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Counted links that all answer NOT_SUPPORTED are each skipped: the error totals
        and traffic stay, there is no link series (not even 0 and 0), and no issue."""
        fake_nvml.configure(replace(GPU_A, fail=(("nvlink_state", NOT_SUPPORTED),)))
        readings, (nvlink_state_calls,) = collect_counting(fake_nvml, collector, "nvlink_state")
        errors = GPU_NVLINK_ERRORS.name
        counters = [
            (errors, ("crc_flit",), 14.0),
            (errors, ("crc_data",), 2.0),
            (errors, ("replay",), 3.0),
            (errors, ("recovery",), 1.0),
            (GPU_NVLINK_TRANSMIT.name, (), 7 * GIB),
            (GPU_NVLINK_RECEIVE.name, (), 9 * GIB),
        ]

        assert (counters, 18, ()) == (
            nvlink_figures(readings, UUID_A),
            nvlink_state_calls,
            readings.issues,
        )

    def test_uncounted_links_are_probed_up_to_nvmls_maximum(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Probing stops at NVML_NVLINK_MAX_LINKS (36, CUDA 13.3's nvml.h) even where
        every link answers: no link past nvml.h's maximum is asked."""
        gpu = replace(GPU_A, nvlinks=40, nvlinks_counted=False, nvlinks_down=())
        fake_nvml.configure(gpu)
        readings, (nvlink_state_calls,) = collect_counting(fake_nvml, collector, "nvlink_state")

        assert (links(36, 0), 36) == (
            nvlink_figures(readings, UUID_A)[-2:],
            nvlink_state_calls,
        )

    def test_an_uncounted_probe_that_never_ends_counts_no_failed_links(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A driver without field 91 whose every link answers UNKNOWN gives no answer to
        end the probe: the 36 failures are no evidence of 36 links, so there is no link
        series; the error is reported once, and the totals and traffic stay."""
        gpu = replace(GPU_A, nvlinks_counted=False, fail=(("nvlink_state", UNKNOWN),))
        fake_nvml.configure(gpu)
        readings = collector.collect()

        assert (nvlink_samples(GPU_A)[:-2], (issue("UNKNOWN", UUID_A, "nvlink"),)) == (
            tuple(
                s
                for s in device(readings, UUID_A).samples
                if s.spec.name.startswith("podresources_gpu_nvlink_")
            ),
            readings.issues,
        )

    def test_an_uncounted_probe_keeps_a_failed_link_before_its_end(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Where the probe ends properly (INVALID_ARGUMENT past the last link), a link
        before that end that failed is a link: counted unknown, even the last one."""
        gpu = replace(
            GPU_A,
            nvlinks=12,
            nvlinks_counted=False,
            nvlinks_down=(),
            nvlink_state_errors=((11, UNKNOWN),),
        )
        fake_nvml.configure(gpu)
        readings = collector.collect()
        unknown = (GPU_NVLINK_LINKS.name, ("unknown",), 1.0)

        assert ([*links(11, 0), unknown], (issue("UNKNOWN", UUID_A, "nvlink"),)) == (
            nvlink_figures(readings, UUID_A)[-3:],
            readings.issues,
        )

    def test_a_gpu_lost_at_a_link_is_abandoned(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """GPU_IS_LOST on a link's state abandons the GPU for the poll, as any figure's."""
        fake_nvml.configure(replace(GPU_A, lost_at=("nvlink_state", 3)))
        readings = collector.collect()

        assert ([], (issue("GPU_IS_LOST", UUID_A, "nvlink"),)) == (
            nvlink_figures(readings, UUID_A),
            readings.issues,
        )


# NVLink 5's counters by type as the fake answers them for BLACKWELL (all links
# together; each a multiple of 18 or above it, so one link's share would differ).
NVLINK5_COUNTS = (
    ("malformed_packet", 36),
    ("buffer_overrun", None),  # NOT_SUPPORTED: left out
    ("receive", 72),
    ("receive_remote", 90),
    ("receive_general", 108),
    ("local_link_integrity", 126),
    ("transmit_discard", 144),
    ("recovery", 505),
    ("recovery_failed", 18),
    ("effective", 162),
    ("symbol", 180),
)
BLACKWELL = replace(
    GPU_A,
    name="NVIDIA B200",
    arch=10,  # nvml.h's NVML_DEVICE_ARCH_BLACKWELL
    nvlink5_errors=tuple(count for _, count in NVLINK5_COUNTS),
    # The older totals, answered as a driver might answer them there: only the ECC one,
    # which DCGM reads on NVLink 5 too, is asked.
    nvlink_errors=(14, 2, 3, 1, 0),
)
# BLACKWELL's older totals, as a GPU before Blackwell gives them.
OLDER_TOTALS = [
    (GPU_NVLINK_ERRORS.name, (kind,), float(n))
    for kind, n in zip(NVLINK_ERROR_TYPES, (14, 2, 3, 1, 0), strict=True)
]


def nvlink5_figures(gpu: FakeGpu = BLACKWELL) -> list[tuple[str, tuple[str, ...], float]]:
    """A Blackwell fake GPU's NVLink samples: NVLink 5's counters, the ECC total, the
    traffic, the links."""
    errors = GPU_NVLINK_ERRORS.name
    counted = [(errors, (kind,), float(n)) for kind, n in NVLINK5_COUNTS if n is not None]
    return [
        *counted,
        (errors, ("ecc_data",), 0.0),
        (GPU_NVLINK_TRANSMIT.name, (), 7 * GIB),
        (GPU_NVLINK_RECEIVE.name, (), 9 * GIB),
        *links(17, 1),
    ]


class TestNvLink5:
    def test_a_blackwell_gpu_gives_nvlink5_counters_not_the_older_totals(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """From Blackwell, NVLink 5's counters are asked for all links together (scopeId
        UINT_MAX, as DCGM asks them), one that answers NOT_SUPPORTED left out; the older
        CRC, replay and recovery totals are not asked, even where the driver answers
        them; the ECC total, the traffic and the links are as before, in the same one
        field values call."""
        fake_nvml.configure(BLACKWELL)
        readings, (fields_calls,) = collect_counting(fake_nvml, collector, "fields")

        # three field values calls: the memory's temperature, the recovery action, NVLink's
        assert (nvlink5_figures(), 3, ()) == (
            nvlink_figures(readings, UUID_A),
            fields_calls,
            readings.issues,
        )

    @pytest.mark.parametrize(
        ("arch", "nvlink5"),
        [
            (9, False),  # Hopper: the older totals
            (10, True),  # Blackwell
            (13, True),  # Rubin, and what comes after
            (0xFFFFFFFF, False),  # NVML_DEVICE_ARCH_UNKNOWN
            ("missing", False),  # a driver without the call: before Blackwell
        ],
    )
    def test_the_architecture_chooses_the_counters(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, arch: int | str, nvlink5: bool
    ) -> None:
        """The GPU's architecture, not its NVLink version, says which counters it has;
        an architecture NVML cannot name, or no call to ask it, is taken for an older
        GPU. No issue either way."""
        fake_nvml.configure(replace(BLACKWELL, arch=arch))
        readings = collector.collect()
        expected = nvlink5_figures() if nvlink5 else [*OLDER_TOTALS, *nvlink5_figures()[-4:]]

        assert (expected, ()) == (nvlink_figures(readings, UUID_A), readings.issues)

    def test_an_architecture_not_supported_is_taken_for_an_older_gpu(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """NOT_SUPPORTED for the architecture is the driver's or the GPU's nature, not a
        fault: the GPU is taken for an older one, as without the call, and no issue."""
        fake_nvml.configure(replace(BLACKWELL, fail=(("architecture", NOT_SUPPORTED),)))
        readings = collector.collect()

        assert ([*OLDER_TOTALS, *nvlink5_figures()[-4:]], ()) == (
            nvlink_figures(readings, UUID_A),
            readings.issues,
        )

    def test_every_nvlink5_counter_is_served_under_its_own_type(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Each of NVLink 5's eleven counters, all answered with counts that differ, is
        served once under its own type: none left out (BLACKWELL's buffer overrun count
        is NOT_SUPPORTED, so dropping that field would go unseen there)."""
        counts = (36, 54, 72, 90, 108, 126, 144, 505, 18, 162, 180)
        fake_nvml.configure(replace(BLACKWELL, nvlink5_errors=counts))
        readings = collector.collect()
        expected = [
            (GPU_NVLINK_ERRORS.name, (kind,), float(n))
            for (kind, _), n in zip(NVLINK5_COUNTS, counts, strict=True)
        ]

        assert ([*expected, (GPU_NVLINK_ERRORS.name, ("ecc_data",), 0.0)], ()) == (
            nvlink_figures(readings, UUID_A)[:12],
            readings.issues,
        )

    def test_nvlink5_counters_refused_for_all_links_are_reported(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A Blackwell driver knows NVLink 5's field IDs, so INVALID_ARGUMENT for them at
        scopeId UINT_MAX refuses the scope (nvml.h documents a link ID): one issue a poll,
        not the counters gone without a word; the ECC total, the traffic and the links
        stay."""
        fake_nvml.configure(replace(BLACKWELL, nvlink5_per_link=True))
        readings = collector.collect()

        assert (nvlink5_figures()[-5:], (issue("INVALID_ARGUMENT", UUID_A, "nvlink"),)) == (
            nvlink_figures(readings, UUID_A),
            readings.issues,
        )

    def test_the_architecture_is_read_once(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Read once per GPU while NVML stays initialised, not every poll."""
        fake_nvml.configure(BLACKWELL, replace(GPU_B, arch=9))
        before = fake_nvml.library.calls("architecture")
        polls = [collector.collect() for _ in range(3)]

        assert (2, nvlink5_figures()) == (
            fake_nvml.library.calls("architecture") - before,
            nvlink_figures(polls[-1], UUID_A),
        )

    def test_the_architecture_is_read_again_after_nvml_is_initialised_afresh(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A new nvmlInit may hand the same handle to another GPU (a board swapped while
        the driver was unloaded): its architecture is read again."""
        fake_nvml.configure(BLACKWELL)
        collector.collect()
        collector.close()
        fake_nvml.configure(replace(BLACKWELL, arch=9))
        hopper = collector.collect()

        assert OLDER_TOTALS == nvlink_figures(hopper, UUID_A)[:5]

    def test_a_failed_architecture_read_is_reported_and_asked_again(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """An architecture read that fails otherwise (UNKNOWN) leaves the GPU's NVLink
        figures out that poll, one issue, rather than serve counters of the wrong kind;
        the next poll asks again and has them."""
        failing = fake_nvml.config_path.parent / "arch-fails"
        failing.touch()
        fake_nvml.configure(replace(BLACKWELL, fail_while=(("architecture", UNKNOWN, failing),)))
        failed = collector.collect()
        failing.unlink()
        recovered = collector.collect()

        assert ([], (issue("UNKNOWN", UUID_A, "nvlink"),), nvlink5_figures(), ()) == (
            nvlink_figures(failed, UUID_A),
            failed.issues,
            nvlink_figures(recovered, UUID_A),
            recovered.issues,
        )

    def test_a_gpu_lost_at_its_architecture_is_abandoned(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """GPU_IS_LOST on the architecture read abandons the GPU for the poll, as any
        figure's."""
        fake_nvml.configure(replace(BLACKWELL, lost_at=("architecture", 1)))
        readings = collector.collect()

        assert ([], (issue("GPU_IS_LOST", UUID_A, "nvlink"),)) == (
            nvlink_figures(readings, UUID_A),
            readings.issues,
        )


def recovery_action(readings: Readings, uuid: str) -> list[float]:
    """One device's recovery action samples (none or one)."""
    return [s.value for s in device(readings, uuid).samples if s.spec is GPU_RECOVERY_ACTION]


class TestRecoveryAction:
    @pytest.mark.parametrize("action", [0, 1, 2, 3, 4, 5, 6, 7, 9])
    def test_the_drivers_action_as_it_gives_it(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, action: int
    ) -> None:
        """nvml.h's nvmlDeviceGpuRecoveryAction_t as the driver answers it, a value newer
        than nvml.h's too (the alert names the ones it knows), and no issue."""
        fake_nvml.configure(replace(GPU_A, recovery_action=action))
        readings = collector.collect()
        assert ([float(action)], ()) == (recovery_action(readings, UUID_A), readings.issues)

    @pytest.mark.parametrize(
        "fail",
        [(), (("recovery_action", INVALID_ARGUMENT_CODE),)],
        ids=["not-supported", "older-driver"],
    )
    def test_a_driver_without_it_has_no_series_and_no_issue(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, fail: tuple[tuple[str, int], ...]
    ) -> None:
        """NOT_SUPPORTED, or INVALID_ARGUMENT from a driver older than the field (an ID it
        does not know), is no recovery to report: no series, no issue, every poll."""
        recovery = None if not fail else 0
        fake_nvml.configure(replace(GPU_A, recovery_action=recovery, fail=fail))
        polls = [collector.collect() for _ in range(2)]
        assert [([], ()), ([], ())] == [
            (recovery_action(readings, UUID_A), readings.issues) for readings in polls
        ]

    def test_a_failing_field_is_its_issue_and_the_rest_stays(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Another error in the field's own return loses that figure only, reported."""
        gpu = replace(GPU_A, fail=(("recovery_action", UNKNOWN),))
        fake_nvml.configure(gpu)
        readings = collector.collect()
        expected = gpu_reading(gpu, "0000:17:00.0", samples(gpu, without=("recovery_action",)))
        assert ((expected,), (issue("UNKNOWN", UUID_A, "recovery_action"),)) == (
            readings.devices,
            readings.issues,
        )


# nvml.h's fabric health mask problems as served, and a mask reporting each absent.
FABRIC_ISSUES = (
    "degraded_bandwidth",
    "route_recovery",
    "route_unhealthy",
    "access_timeout_recovery",
    "incorrect_configuration",
)
ALL_WELL = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8


def fabric_health(readings: Readings, uuid: str) -> dict[str, float]:
    """One device's fabric health samples: each problem's value."""
    return {
        s.label_values[0]: s.value
        for s in device(readings, uuid).samples
        if s.spec is GPU_FABRIC_HEALTH_ISSUE
    }


class TestFabric:
    @pytest.mark.parametrize(
        ("fabric", "v1_only", "expected"),
        [
            ((3, 0), False, [(GPU_FABRIC_STATE.name, 3.0), (GPU_FABRIC_STATUS.name, 0.0)]),
            # Registered, but Fabric Manager answered an error: its code.
            ((3, 999), False, [(GPU_FABRIC_STATE.name, 3.0), (GPU_FABRIC_STATUS.name, 999.0)]),
            # Not started (Fabric Manager down) or in progress: no status yet.
            ((1, 999), False, [(GPU_FABRIC_STATE.name, 1.0)]),
            ((2, 0), False, [(GPU_FABRIC_STATE.name, 2.0)]),
            # An R535 driver, without the V call: the older one answers the same.
            ((1, 0), True, [(GPU_FABRIC_STATE.name, 1.0)]),
            ((3, 0), True, [(GPU_FABRIC_STATE.name, 3.0), (GPU_FABRIC_STATUS.name, 0.0)]),
            ((3, 999), True, [(GPU_FABRIC_STATE.name, 3.0), (GPU_FABRIC_STATUS.name, 999.0)]),
            # No fabric (a PCIe card, an NVLink bridge): nothing.
            (None, False, []),
        ],
        ids=[
            "ok",
            "failed",
            "not-started",
            "in-progress",
            "r535",
            "r535-ok",
            "r535-failed",
            "none",
        ],
    )
    def test_registration_state_and_status(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        fabric: tuple[int, int] | None,
        v1_only: bool,
        expected: list[tuple[str, float]],
    ) -> None:
        """The state as NVML gives it, the status only once the state is completed
        (nvml.h: "Must be checked only if state returns complete"), through either call,
        and no issue."""
        fake_nvml.configure(replace(GPU_A, fabric=fabric, fabric_v1_only=v1_only))
        readings = collector.collect()
        served = [
            (s.spec.name, s.value)
            for s in device(readings, UUID_A).samples
            if s.spec in (GPU_FABRIC_STATE, GPU_FABRIC_STATUS)
        ]
        assert (expected, ()) == (served, readings.issues)

    @pytest.mark.parametrize(
        ("mask", "problems"),
        [
            # Nothing reported (an older GPU or fabric): no series.
            (0, {}),
            # Every problem reported absent: FALSE in each two-bit field, NONE (1) at 8.
            (ALL_WELL, dict.fromkeys(FABRIC_ISSUES, 0.0)),
            # Degraded bandwidth (TRUE, 1) and route recovery, the rest well.
            (
                ALL_WELL & ~0xF | 1 | 1 << 2,
                {
                    **dict.fromkeys(FABRIC_ISSUES, 0.0),
                    "degraded_bandwidth": 1.0,
                    "route_recovery": 1.0,
                },
            ),
            # An incorrect configuration, too few NVLinks (5), the rest well.
            (
                ALL_WELL & ~(0xF << 8) | 5 << 8,
                {**dict.fromkeys(FABRIC_ISSUES, 0.0), "incorrect_configuration": 1.0},
            ),
            # GPU state invalid (8), the highest configuration nvml.h names: it needs
            # the field's fourth bit, which a width of three bits would drop.
            (
                ALL_WELL & ~(0xF << 8) | 8 << 8,
                {**dict.fromkeys(FABRIC_ISSUES, 0.0), "incorrect_configuration": 1.0},
            ),
            # Only an unhealthy route and an access timeout recovery reported.
            (1 << 4 | 1 << 6, {"route_unhealthy": 1.0, "access_timeout_recovery": 1.0}),
            # The fields after them (partition assigned, fabric manager disconnected): not
            # read, nor does DCGM's health watch read them.
            (ALL_WELL | 1 << 12 | 2 << 14, dict.fromkeys(FABRIC_ISSUES, 0.0)),
        ],
        ids=[
            "none",
            "well",
            "degraded",
            "misconfigured",
            "gpu-state-invalid",
            "partial",
            "later-fields",
        ],
    )
    def test_health_mask_problems(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        mask: int,
        problems: dict[str, float],
    ) -> None:
        """Each problem of nvml.h's fabric health mask that DCGM's health watch fails a GPU
        on: 1 while reported, 0 while reported absent, no series while not reported;
        served beside the state whatever it is, and no issue."""
        fake_nvml.configure(replace(GPU_A, fabric=(2, 0), fabric_health=mask))
        readings = collector.collect()
        assert (problems, ()) == (fabric_health(readings, UUID_A), readings.issues)

    def test_no_health_from_the_older_call(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A driver before R550 has no health mask: the state and status alone."""
        gpu = replace(GPU_A, fabric_v1_only=True, fabric_health=ALL_WELL | 1)
        fake_nvml.configure(gpu)
        assert {} == fabric_health(collector.collect(), UUID_A)

    def test_the_older_call_is_chosen_once(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A driver without the V call answers FUNCTION_NOT_FOUND once; later polls ask
        the older call alone: one call a poll."""
        fake_nvml.configure(replace(GPU_A, fabric_v1_only=True))
        collector.collect()
        _, (fabric_calls,) = collect_counting(fake_nvml, collector, "fabric")
        assert 1 == fabric_calls

    def test_a_mig_enabled_gpu_is_not_asked(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """As its NVLinks: a MIG-enabled GPU is not asked its fabric registration."""
        fake_nvml.configure(MIG_GPU)
        readings, (fabric_calls,) = collect_counting(fake_nvml, collector, "fabric")
        assert (0, False) == (
            fabric_calls,
            any(s.spec is GPU_FABRIC_STATE for s in device(readings, UUID_A).samples),
        )

    @pytest.mark.parametrize(
        ("fail", "expected_issues"),
        [((), ()), ((("fabric", UNKNOWN),), (issue("UNKNOWN", UUID_A, "fabric"),))],
        ids=["answered", "failing"],
    )
    def test_a_driver_with_the_v_call_is_asked_it_alone(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        fail: tuple[tuple[str, int], ...],
        expected_issues: tuple[CollectorIssue, ...],
    ) -> None:
        """R550 on: one call a poll from the first, answered or failing; an error other
        than FUNCTION_NOT_FOUND or ARGUMENT_VERSION_MISMATCH is that poll's issue, not a
        reason to ask the older call too, or from then on."""
        fake_nvml.configure(replace(GPU_A, fail=fail))
        asked = []
        for _ in range(2):
            readings, (fabric_calls,) = collect_counting(fake_nvml, collector, "fabric")
            asked.append((fabric_calls, readings.issues))
        assert [(1, expected_issues)] * 2 == asked

    def test_a_driver_without_the_older_call_is_read_by_the_v_call(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """nvmlDeviceGetGpuFabricInfo is deprecated, gone in CUDA 14: a driver without it
        is read by the V call alone, and that is no issue."""

        def gone(*_: object) -> None:
            raise pynvml.NVMLError(FUNCTION_NOT_FOUND)

        monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuFabricInfo", gone)
        fake_nvml.configure(replace(GPU_A, fabric=(3, 999)))
        readings = [collector.collect() for _ in range(2)]
        assert [([(GPU_FABRIC_STATE.name, 3.0), (GPU_FABRIC_STATUS.name, 999.0)], ())] * 2 == [
            (fabric_figures(r, UUID_A), r.issues) for r in readings
        ]

    def test_a_driver_refusing_the_v2_struct_is_read_by_the_older_call(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A V call answering ARGUMENT_VERSION_MISMATCH to pynvml's v2 struct: the older
        call answers, chosen once, and that is no issue."""
        refused = []

        def mismatch(*_: object) -> None:
            refused.append(True)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)

        monkeypatch.setattr(pynvml, "nvmlDeviceGetGpuFabricInfoV", mismatch)
        fake_nvml.configure(replace(GPU_A, fabric=(2, 0)))
        readings = [collector.collect() for _ in range(2)]
        assert ([([(GPU_FABRIC_STATE.name, 2.0)], ())] * 2, 1) == (
            [(fabric_figures(r, UUID_A), r.issues) for r in readings],
            len(refused),
        )

    def test_a_pynvml_without_the_v_call_asks_the_older_call(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A pynvml before nvmlDeviceGetGpuFabricInfoV (before 12.550) has only the older
        call: it is the one asked, and that is no issue."""
        monkeypatch.delattr(pynvml, "nvmlDeviceGetGpuFabricInfoV")
        fake_nvml.configure(GPU_A)
        readings = collector.collect()
        assert ([(GPU_FABRIC_STATE.name, 3.0), (GPU_FABRIC_STATUS.name, 0.0)], ()) == (
            fabric_figures(readings, UUID_A),
            readings.issues,
        )


class TestOldDrivers:
    def test_a_driver_before_r510_reads_memory_by_the_first_call(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Without nvmlDeviceGetMemoryInfo_v2 (before R510) memory is read by the first
        call, whose used memory counts the reserved too; no issue, and v2 is not asked
        again."""
        fake_nvml.configure(GPU_A, driver_version="470.256.02")
        before = fake_nvml.library.calls("memory_v2")
        collector.collect()
        readings = collector.collect()
        total, used, reserved = GPU_A.memory
        assert (
            [Sample(GPU_MEMORY_USED, float(used + reserved)), Sample(GPU_MEMORY_TOTAL, total)],
            (),
            1,
        ) == (
            [
                s
                for s in readings.devices[0].samples
                if s.spec in (GPU_MEMORY_USED, GPU_MEMORY_TOTAL)
            ],
            readings.issues,
            fake_nvml.library.calls("memory_v2") - before,
        )

    def test_a_driver_before_r565_reads_temperature_by_the_old_call(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """nvmlDeviceGetTemperatureV is new in R565: an older driver answers the old
        nvmlDeviceGetTemperature, asked from then on, and that is no issue."""
        fake_nvml.configure(replace(GPU_A, temperature=61), driver_version="550.163.01")
        new, old = fake_nvml.library.calls("temperature_v"), fake_nvml.library.calls("temperature")
        for _ in range(2):
            readings = collector.collect()
        assert ([Sample(GPU_TEMPERATURE, 61.0)], (), 1, 2) == (
            [s for s in readings.devices[0].samples if s.spec is GPU_TEMPERATURE],
            readings.issues,
            fake_nvml.library.calls("temperature_v") - new,
            fake_nvml.library.calls("temperature") - old,
        )

    def test_a_failed_temperature_read_by_the_new_call_is_not_an_old_driver(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """Only FUNCTION_NOT_FOUND says the driver predates R565: a temperature read that
        fails once (UNKNOWN) is that poll's issue, and the next poll asks the new call
        again, not the deprecated one for good (gone in CUDA 14)."""
        failing = tmp_path / "temperature_fails"
        failing.touch()
        fake_nvml.configure(replace(GPU_A, fail_while=(("temperature", UNKNOWN, failing),)))
        during = collector.collect()
        failing.unlink()
        asked_new = fake_nvml.library.calls("temperature_v")
        after = collector.collect()
        assert ([issue("UNKNOWN", UUID_A, "temperature")], 55.0, 1) == (
            list(during.issues),
            next(s.value for s in after.devices[0].samples if s.spec is GPU_TEMPERATURE),
            fake_nvml.library.calls("temperature_v") - asked_new,
        )


class TestMig:
    def test_mig_devices_under_their_keys(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """MIG devices follow their GPU by instance; the first CI of each GI answers for it."""
        fake_nvml.configure(MIG_GPU)
        mig_1, mig_2, mig_3 = MIG_GPU.migs
        pci = "0000:b1:00.0"

        readings = collector.collect()

        expected = Readings(
            node_samples=DRIVER,
            devices=(
                # nvml.h: no remapped rows "on MIG-enabled GPUs with active instances".
                gpu_reading(MIG_GPU, pci, samples(MIG_GPU, without=("util", "remap", "video"))),
                mig_reading(MIG_GPU, mig_1, pci, answers_for_instance=True),
                mig_reading(MIG_GPU, mig_3, pci, answers_for_instance=True),
                mig_reading(MIG_GPU, mig_2, pci, answers_for_instance=False),
            ),
        )
        assert expected == readings

    @pytest.mark.parametrize(
        ("change", "calls", "spec", "expected"),
        [
            ({"pcie_replays": 17}, ("replays",), GPU_PCIE_REPLAYS, [((), 17.0)]),
            ({"memory_temperature": 58}, ("memory_temp",), GPU_MEMORY_TEMPERATURE, [((), 58.0)]),
            ({"recovery_action": 1}, ("recovery_action",), GPU_RECOVERY_ACTION, [((), 1.0)]),
            # nvml.h: not supported on a MIG-enabled GPU: asked, and no series.
            ({"video": (5, 40)}, ("encoder", "decoder"), GPU_VIDEO_UTILIZATION, []),
        ],
        ids=["pcie-replays", "memory-temperature", "recovery-action", "video-engines"],
    )
    def test_whole_gpu_figures_are_asked_of_the_gpu_not_its_mig_devices(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        change: dict[str, Any],
        calls: tuple[str, ...],
        spec: MetricSpec,
        expected: list[tuple[tuple[str, ...], float]],
    ) -> None:
        """A MIG device shares its GPU's link, memory sensor and video engines: each such
        figure is the GPU's series only (the video engines none: NVML does not read them on
        a MIG-enabled GPU), its call made once a poll, whatever a MIG handle would answer."""
        fake_nvml.configure(replace(MIG_GPU, **change))
        before = [fake_nvml.library.calls(call) for call in calls]

        readings = collector.collect()

        by_device = {
            d.name: [(s.label_values, s.value) for s in d.samples if s.spec is spec]
            for d in readings.devices
        }
        asked = [fake_nvml.library.calls(c) - b for c, b in zip(calls, before, strict=True)]
        once_each = [1] * len(calls)
        assert ({UUID_A: expected, MIG_1: [], MIG_3: [], MIG_2: []}, once_each) == (
            by_device,
            asked,
        )

    def test_mig_uuid_ids(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """MIG-<uuid> IDs find their MIG device; the parent's UUID finds the whole GPU."""
        fake_nvml.configure(MIG_GPU)

        found = attributed_names(collector.collect(), MIG_1, MIG_2, UUID_A)

        assert {MIG_1: MIG_1, MIG_2: MIG_2, UUID_A: UUID_A} == found

    def test_legacy_mig_ids(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """MIG-GPU-<uuid>/<gi>/<ci> finds the MIG device by parent, GPU and compute instance."""
        fake_nvml.configure(MIG_GPU)
        legacy_1 = f"MIG-{UUID_A}/1/0"
        legacy_2 = f"MIG-{UUID_A}/2/1"
        missing = f"MIG-{UUID_A}/3/0"

        found = attributed_names(collector.collect(), legacy_1, legacy_2, missing)

        assert {legacy_1: MIG_1, legacy_2: MIG_2, missing: None} == found

    def test_a_mig_device_nvml_cannot_name_is_left_out(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A MIG device whose UUID read fails has no reading and is an issue naming its
        slot; the other MIG devices are read."""
        mig_1, mig_2, mig_3 = MIG_GPU.migs
        failing = replace(mig_1, fail=(*mig_1.fail, ("uuid", UNKNOWN)))
        fake_nvml.configure(replace(MIG_GPU, migs=(failing, mig_2, mig_3)))
        readings = collector.collect()
        assert ([UUID_A, MIG_3, MIG_2], [issue("UNKNOWN", f"{UUID_A} MIG slot 0", "uuid")]) == (
            [d.name for d in readings.devices],
            list(readings.issues),
        )

    def test_a_mig_device_whose_name_fails_takes_its_gpus_model(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A MIG device's name that fails: its GPU's model stands in, and the issue."""
        mig_1, mig_2, mig_3 = MIG_GPU.migs
        failing = replace(mig_1, fail=(*mig_1.fail, ("name", UNKNOWN)))
        fake_nvml.configure(replace(MIG_GPU, migs=(failing, mig_2, mig_3)))
        readings = collector.collect()
        assert (MIG_GPU.name, [issue("UNKNOWN", MIG_1, "name")]) == (
            next(d.identity.model for d in readings.devices if d.name == MIG_1),
            list(readings.issues),
        )

    def test_a_mig_device_without_its_compute_instance_has_no_path_key(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """No compute instance ID, no ``<parent>/<gi>/<ci>`` key (not one ending in
        None); the GPU instance's keys stay."""
        mig_1, mig_2, mig_3 = MIG_GPU.migs
        failing = replace(mig_1, fail=(*mig_1.fail, ("ci", UNKNOWN)))
        fake_nvml.configure(replace(MIG_GPU, migs=(failing, mig_2, mig_3)))
        readings = collector.collect()
        assert (
            [
                HardwareKey(KeyKind.MIG_UUID, MIG_1),
                HardwareKey(KeyKind.NVIDIA_MINOR_GI, "0/1"),
                HardwareKey(KeyKind.MIG_PLACEMENT, "0/9/0"),
            ],
            [issue("UNKNOWN", MIG_1, "compute_instance_id")],
        ) == (
            list(next(d.keys for d in readings.devices if d.name == MIG_1)),
            list(readings.issues),
        )

    def test_without_the_gpus_minor_mig_devices_have_no_minor_keys(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The parent's minor number failing: MIG devices keep their UUID and path keys,
        and get none built on the minor (not ``None/1``)."""
        fake_nvml.configure(replace(MIG_GPU, fail=(*MIG_GPU.fail, ("minor", UNKNOWN))))
        readings = collector.collect()
        assert {
            UUID_A: [KeyKind.GPU_UUID, KeyKind.PCI],
            MIG_1: [KeyKind.MIG_UUID, KeyKind.MIG_PATH],
            MIG_2: [KeyKind.MIG_UUID, KeyKind.MIG_PATH],
            MIG_3: [KeyKind.MIG_UUID, KeyKind.MIG_PATH],
        } == {d.name: [k.kind for k in d.keys] for d in readings.devices}

    def test_a_gpu_lost_among_its_mig_devices_keeps_those_read(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU lost while its MIG devices are read: the ones read before stay, with
        their keys; the loss is one issue."""
        # The third name asked: the GPU's, the first MIG device's, the second's.
        fake_nvml.configure(replace(MIG_GPU, lost_at=("name", 3)))
        readings = collector.collect()
        mig_1 = mig_reading(MIG_GPU, MIG_GPU.migs[0], "0000:b1:00.0", answers_for_instance=True)
        assert ([mig_1], [issue("GPU_IS_LOST", MIG_2, "name")]) == (
            [d for d in readings.devices if d.name != UUID_A],
            list(readings.issues),
        )


class TestMigPlacement:
    def test_gpu_instances_under_their_placement(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The first CI of each GI carries ``<minor>/<GI profile ID>/<placement start>``."""
        fake_nvml.configure(replace(MIG_GPU, minor=3))

        readings = collector.collect()

        found = {
            d.name: [k.value for k in d.keys if k.kind is KeyKind.MIG_PLACEMENT]
            for d in readings.devices
        }
        expected = {UUID_A: [], MIG_1: ["3/9/0"], MIG_3: ["3/9/4"], MIG_2: []}
        assert (expected, ()) == (found, readings.issues)

    def test_dra_mig_names_find_their_mig_device(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The NVIDIA DRA driver's MIG names, with no driver file, find their GPU instance."""
        fake_nvml.configure(MIG_GPU)
        names = ("gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-1g10gb-19-6")

        found = claimed_names(collector.collect(), *names)

        expected = {names[0]: MIG_1, names[1]: MIG_3, names[2]: None}
        assert expected == found

    def test_no_permission_is_one_issue_and_no_key(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Without the privilege NVML asks for, MIG devices keep every other key and
        figure; the refusal is reported on the first poll only."""
        gpu = replace(MIG_GPU, fail=(*MIG_GPU.fail, ("gi_by_id", NO_PERMISSION)))
        fake_nvml.configure(gpu)
        mig_1, mig_2, mig_3 = gpu.migs
        pci = "0000:b1:00.0"

        first = collector.collect()
        second = collector.collect()

        devices = (
            gpu_reading(gpu, pci, samples(gpu, without=("util", "remap", "video"))),
            mig_reading(gpu, mig_1, pci, answers_for_instance=True, placed=False),
            mig_reading(gpu, mig_3, pci, answers_for_instance=True, placed=False),
            mig_reading(gpu, mig_2, pci, answers_for_instance=False, placed=False),
        )
        refused = CollectorIssue(
            "NO_PERMISSION",
            f"{MIG_1}: gpu_instance_placement: NVML NO_PERMISSION; "
            "not asked again, MIG devices get no placement key",
        )
        expected = (
            Readings(devices, node_samples=DRIVER, issues=(refused,)),
            Readings(devices, node_samples=DRIVER),
        )
        assert expected == (first, second)

    def test_a_gpu_instance_gone_meanwhile_is_asked_again(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """NOT_FOUND for a GPU instance (destroyed between reading its MIG device and
        asking its placement) is that poll's issue, not a refusal: the next poll asks
        again and the placement keys are there."""
        failing = tmp_path / "gi_gone"
        failing.touch()
        gpu = replace(MIG_GPU, fail_while=(("gi_by_id", NOT_FOUND, failing),))
        fake_nvml.configure(gpu)
        first = collector.collect()
        failing.unlink()
        second = collector.collect()

        def placed(readings: Readings) -> list[str]:
            return [
                k.value for d in readings.devices for k in d.keys if k.kind is KeyKind.MIG_PLACEMENT
            ]

        gone = [issue("NOT_FOUND", mig, "gpu_instance_placement") for mig in (MIG_1, MIG_2, MIG_3)]
        assert (gone, [], [], ["0/9/0", "0/9/4"]) == (
            list(first.issues),
            placed(first),
            list(second.issues),
            placed(second),
        )

    async def test_no_permission_counts_once(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Polls after the first add nothing to the NO_PERMISSION count."""
        fake_nvml.configure(replace(MIG_GPU, fail=(*MIG_GPU.fail, ("gi_by_id", NO_PERMISSION))))
        third = await last_of_polls(collector, 3)

        expected = (True, {"NO_PERMISSION": 1})
        assert expected == (third.success, _counted(third))

    def test_other_errors_are_issues_each_poll(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Another failure loses the key and is reported, then asked again, each poll."""
        gpu = replace(MIG_GPU, fail=(*MIG_GPU.fail, ("gi_by_id", UNKNOWN)))
        fake_nvml.configure(gpu)

        first = collector.collect()
        second = collector.collect()

        issues = tuple(
            issue("UNKNOWN", mig, "gpu_instance_placement") for mig in (MIG_1, MIG_2, MIG_3)
        )
        placed = [k for d in (*first.devices, *second.devices) for k in d.keys]
        assert (issues, issues, []) == (
            first.issues,
            second.issues,
            [k for k in placed if k.kind is KeyKind.MIG_PLACEMENT],
        )

    def test_not_supported_is_no_key_and_no_issue(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU instance NVML gives no placement for (NOT_SUPPORTED): no key, no issue."""
        fake_nvml.configure(replace(MIG_GPU, fail=(*MIG_GPU.fail, ("gi_by_id", NOT_SUPPORTED))))
        readings = collector.collect()
        keys = [k for d in readings.devices for k in d.keys if k.kind is KeyKind.MIG_PLACEMENT]
        assert ([], ()) == (keys, readings.issues)

    def test_a_mig_device_away_for_a_poll_is_asked_afresh(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A placement is kept only for the MIG devices of the last poll: one gone for a
        poll is asked again when it is back."""
        gone = tmp_path / "gone"
        mig_1, mig_2, mig_3 = MIG_GPU.migs
        fake_nvml.configure(replace(MIG_GPU, migs=(replace(mig_1, gone_flag=gone), mig_2, mig_3)))
        asked = []
        for away in (False, True, False, False):
            gone.touch() if away else gone.unlink(missing_ok=True)
            # Two calls a placement: the GPU instance, then its information.
            before = fake_nvml.library.calls("gi_by_id")
            collector.collect()
            asked.append(fake_nvml.library.calls("gi_by_id") - before)
        assert [3, 0, 1, 0] == asked

    def test_a_new_mig_device_in_a_reused_gpu_instance_gets_its_placement(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """GPU instance 1 destroyed and made again with another profile (a new MIG
        device, GPU instance ID reused): its placement is its own, not the old one's."""
        remade = tmp_path / "remade"
        old = FakeMig(0, MIG_1, 1, 0, placement=(9, 0, 4), gone_flag=remade)
        new = FakeMig(
            1,
            MIG_2,
            1,
            0,
            name="NVIDIA H100 80GB HBM3 MIG 1g.10gb",
            placement=(19, 2, 1),
            present_flag=remade,
        )
        fake_nvml.configure(replace(MIG_GPU, migs=(old, new)))
        placed = []
        for now_remade in (False, True):
            if now_remade:
                remade.touch()
            readings = collector.collect()
            placed.append(
                [
                    (d.name, k.value)
                    for d in readings.devices
                    for k in d.keys
                    if k.kind is KeyKind.MIG_PLACEMENT
                ]
            )
        assert [[(MIG_1, "0/9/0")], [(MIG_2, "0/19/2")]] == placed


class TestMigParentPrivileges:
    def test_refused_aggregate_memory_is_one_issue_until_nvml_restarts(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Without MIG monitoring privileges a MIG-enabled GPU refuses its aggregate
        memory: reported on the first poll, not asked again, asked anew after NVML is
        initialised afresh; its MIG devices keep their own memory."""
        fake_nvml.configure(MIG_GPU, unprivileged=True)
        mig_1, mig_2, mig_3 = MIG_GPU.migs
        pci = "0000:b1:00.0"

        first = collector.collect()
        second = collector.collect()
        collector.close()
        after_restart = collector.collect()

        devices = (
            gpu_reading(
                MIG_GPU, pci, samples(MIG_GPU, without=("util", "memory", "remap", "video"))
            ),
            mig_reading(MIG_GPU, mig_1, pci, answers_for_instance=True, placed=False),
            mig_reading(MIG_GPU, mig_3, pci, answers_for_instance=True, placed=False),
            mig_reading(MIG_GPU, mig_2, pci, answers_for_instance=False, placed=False),
        )
        memory = CollectorIssue(
            "NO_PERMISSION",
            f"{UUID_A}: memory: NVML NO_PERMISSION; MIG-enabled GPU, not asked again "
            "(needs NVIDIA_MIG_MONITOR_DEVICES=all and CAP_SYS_ADMIN)",
        )
        assert (devices, devices, devices) == (
            first.devices,
            second.devices,
            after_restart.devices,
        )
        assert ([memory], [], [memory]) == (
            [i for i in first.issues if "memory" in i.detail],
            list(second.issues),
            [i for i in after_restart.issues if "memory" in i.detail],
        )

    def test_memory_asked_again_once_mig_is_off(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A GPU whose MIG mode is turned off while the exporter runs answers its
        aggregate memory again, and has it from that very poll: the refusal was MIG's."""
        mig_off = tmp_path / "mig_off"
        fake_nvml.configure(replace(MIG_GPU, mig_off_flag=mig_off), unprivileged=True)
        collector.collect()

        mig_off.touch()
        after = collector.collect()

        assert (GPU_MEMORY_TOTAL, (), [UUID_A]) == (
            next(s.spec for s in after.devices[0].samples if s.spec is GPU_MEMORY_TOTAL),
            after.issues,
            [d.name for d in after.devices],
        )

    def test_a_failed_mig_mode_read_is_not_mig_turned_off(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A MIG-mode read that fails once is that one issue: the refused memory is not
        asked again (nor counted again), as it would be were MIG off."""
        failing = tmp_path / "mig_mode_fails"
        fake_nvml.configure(
            replace(MIG_GPU, fail_while=(("mig_mode", UNKNOWN, failing),)), unprivileged=True
        )
        collector.collect()
        failing.touch()
        during = collector.collect()
        failing.unlink()
        after = collector.collect()

        assert ([issue("UNKNOWN", UUID_A, "mig_enabled")], []) == (
            list(during.issues),
            list(after.issues),
        )

    def test_mig_turned_off_on_one_gpu_leaves_the_others_refusals(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """One GPU's MIG mode turned off asks that GPU's memory again, not the memory of
        another GPU that still refuses it."""
        mig_off = tmp_path / "mig_off"
        other = replace(
            MIG_GPU,
            uuid=UUID_B,
            minor=1,
            pci="00000000:C1:00.0",
            migs=(FakeMig(0, "MIG-44444444-aaaa-bbbb-cccc-dddddddddddd", 1, 0),),
            mig_off_flag=mig_off,
        )
        fake_nvml.configure(MIG_GPU, other, unprivileged=True)
        collector.collect()
        mig_off.touch()
        second = collector.collect()
        third = collector.collect()

        assert ((), ()) == (second.issues, third.issues)

    async def test_counted_once_per_gpu(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Two MIG-enabled GPUs over three polls: one count for each GPU's memory, one for
        the placements."""
        other = replace(
            MIG_GPU,
            uuid=UUID_B,
            minor=1,
            pci="00000000:C1:00.0",
            migs=(FakeMig(0, "MIG-44444444-aaaa-bbbb-cccc-dddddddddddd", 1, 0),),
        )
        fake_nvml.configure(MIG_GPU, other, unprivileged=True)

        third = await last_of_polls(collector, 3)

        expected = (True, {"NO_PERMISSION": 3})
        assert expected == (third.success, _counted(third))


class TestGkeNames:
    def test_nvidia_n_by_minor_number(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """nvidiaN is the GPU with minor number N, whatever its NVML index."""
        fake_nvml.configure(
            FakeGpu(UUID_A, minor=3), FakeGpu(UUID_B, minor=0, pci="00000000:B1:00.0")
        )

        found = attributed_names(collector.collect(), "nvidia0", "nvidia3", "nvidia1")

        assert {"nvidia0": UUID_B, "nvidia3": UUID_A, "nvidia1": None} == found

    def test_vgpu_shares_the_whole_gpu(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """nvidiaN/vgpuK each get the whole GPU N's reading."""
        fake_nvml.configure(GPU_A)

        found = attributed(collector.collect(), "nvidia0/vgpu0", "nvidia0/vgpu1")

        gpu = gpu_reading(GPU_A, "0000:17:00.0")
        assert {"nvidia0/vgpu0": gpu, "nvidia0/vgpu1": gpu} == found

    def test_gpu_instance_by_minor_and_gi(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """nvidiaN/giM is GPU instance M of GPU N, by its first compute instance."""
        fake_nvml.configure(MIG_GPU)

        found = attributed_names(collector.collect(), "nvidia0/gi1", "nvidia0/gi2", "nvidia0/gi3")

        assert {"nvidia0/gi1": MIG_1, "nvidia0/gi2": MIG_3, "nvidia0/gi3": None} == found

    def test_vgpu_of_a_gpu_instance_shares_that_instance(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """nvidiaN/giM/vgpuK (GKE time-sharing on MIG) each get GPU instance M's reading."""
        fake_nvml.configure(MIG_GPU)

        found = attributed_names(
            collector.collect(), "nvidia0/gi1/vgpu0", "nvidia0/gi1/vgpu1", "nvidia0/gi2/vgpu0"
        )

        assert {
            "nvidia0/gi1/vgpu0": MIG_1,
            "nvidia0/gi1/vgpu1": MIG_1,
            "nvidia0/gi2/vgpu0": MIG_3,
        } == found


class TestFigureErrors:
    def test_not_supported_figures_absent_and_not_reported(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """NOT_SUPPORTED drops that figure only and is no issue: many boards say it."""
        gpu = FakeGpu(UUID_A, fail=(("power", NOT_SUPPORTED), ("ecc", NOT_SUPPORTED)))
        fake_nvml.configure(gpu)

        readings = collector.collect()

        expected = Readings(
            node_samples=DRIVER,
            devices=(gpu_reading(gpu, "0000:17:00.0", samples(gpu, without=("power", "ecc"))),),
        )
        assert expected == readings

    def test_other_errors_lose_the_figure_and_are_issues(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Other errors drop the figure and are reported by NVML error name, each poll."""
        gpu = FakeGpu(UUID_A, fail=(("temperature", UNKNOWN), ("energy", FUNCTION_NOT_FOUND)))
        fake_nvml.configure(gpu)

        first = collector.collect()
        second = collector.collect()

        expected = Readings(
            node_samples=DRIVER,
            devices=(
                gpu_reading(gpu, "0000:17:00.0", samples(gpu, without=("temperature", "energy"))),
            ),
            issues=(
                issue("FUNCTION_NOT_FOUND", UUID_A, "energy"),
                issue("UNKNOWN", UUID_A, "temperature"),
            ),
        )
        assert (expected, expected) == (first, second)

    @pytest.mark.parametrize("engine", ["encoder", "decoder"])
    @pytest.mark.parametrize(("code", "reported"), [(NOT_SUPPORTED, None), (UNKNOWN, "UNKNOWN")])
    def test_one_video_engines_failure_loses_only_its_own_series(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        engine: str,
        code: int,
        reported: str | None,
    ) -> None:
        """Each engine is its own figure: one NVML cannot read (a board without that
        engine: NOT_SUPPORTED, silently; another error: an issue named by the engine)
        leaves the other engine's series."""
        gpu = FakeGpu(UUID_A, fail=((engine, code),))
        fake_nvml.configure(gpu)

        readings = collector.collect()

        kept = tuple(
            s
            for s in samples(gpu)
            if not (s.spec is GPU_VIDEO_UTILIZATION and s.label_values == (engine,))
        )
        expected = Readings(
            node_samples=DRIVER,
            devices=(gpu_reading(gpu, "0000:17:00.0", kept),),
            issues=() if reported is None else (issue(reported, UUID_A, engine),),
        )
        assert expected == readings

    def test_issues_name_their_device(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """The same failure on two GPUs, or on a MIG device, gives distinct details, so the
        runner's log-each-detail-once logs every device that fails."""
        gpu_a = FakeGpu(UUID_A, fail=(("temperature", UNKNOWN),))
        gpu_b = FakeGpu(UUID_B, minor=1, pci="00000000:B1:00.0", fail=(("temperature", UNKNOWN),))
        mig = FakeMig(0, MIG_1, 1, 0)
        mig = replace(mig, fail=(*mig.fail, ("memory", UNKNOWN)))  # besides MIG's NOT_SUPPORTED
        fake_nvml.configure(gpu_a, gpu_b, FakeGpu(UUID_C, minor=2, migs=(mig,)))

        readings = collector.collect()

        expected = (
            issue("UNKNOWN", UUID_A, "temperature"),
            issue("UNKNOWN", UUID_B, "temperature"),
            issue("UNKNOWN", MIG_1, "memory"),
        )
        assert expected == readings.issues

    def test_an_error_pynvml_cannot_name_is_named_by_its_code(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A return code newer than the bindings: still an issue, by its number."""
        fake_nvml.configure(FakeGpu(UUID_A, fail=(("temperature", 1234),)))
        readings = collector.collect()
        assert [issue("CODE_1234", UUID_A, "temperature")] == list(readings.issues)

    def test_no_permission_on_a_gpu_without_mig_is_an_issue_each_poll(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Only a MIG-enabled GPU's refusal is the caller's privileges, asked no more:
        a whole GPU's NO_PERMISSION is a failed read, reported and asked each poll."""
        gpu = FakeGpu(UUID_A, fail=(("memory", NO_PERMISSION),))
        fake_nvml.configure(gpu)
        first = collector.collect()
        second, (memory_calls,) = collect_counting(fake_nvml, collector, "memory")
        refused = [issue("NO_PERMISSION", UUID_A, "memory")]
        assert (refused, refused, 1) == (
            list(first.issues),
            list(second.issues),
            memory_calls,
        )

    async def test_runner_counts_issues_across_polls(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The runner counts issues per label, cumulatively, from 0 for the errors that
        say a GPU is in trouble (so the first is an increase alerts see); NOT_SUPPORTED
        never."""
        gpu = FakeGpu(UUID_A, fail=(("energy", FUNCTION_NOT_FOUND), ("power", NOT_SUPPORTED)))
        fake_nvml.configure(gpu)
        second = await last_of_polls(collector, 2)

        preset = ("GPU_IS_LOST", "NO_PERMISSION", "RESET_REQUIRED", "TIMEOUT", "UNKNOWN")
        expected = (True, (("FUNCTION_NOT_FOUND", 2), *((name, 0) for name in preset)))
        assert expected == (second.success, second.error_counts)


class TestEnergyInterval:
    """The energy counter costs NVIDIA's driver ~3 ms of CPU per GPU (docs/benchmarks.md),
    so a reading is served again until --collector.nvml.energy-interval has passed."""

    @staticmethod
    def polls(
        fake_nvml: FakeNvml, times: tuple[float, ...], *, interval_s: float = 30.0
    ) -> list[tuple[int, tuple[Sample, ...]]]:
        """Energy calls made by each poll at ``times`` and the energy samples it served."""
        now = [0.0]
        context = CollectorContext(nvml_energy_interval_s=interval_s)
        collector = NvmlCollector(context, clock=lambda: now[0])
        seen = []
        try:
            for now[0] in times:
                before = fake_nvml.library.calls("energy")
                readings = collector.collect()
                energy = tuple(
                    s for d in readings.devices for s in d.samples if s.spec is GPU_ENERGY
                )
                seen.append((fake_nvml.library.calls("energy") - before, energy))
        finally:
            collector.close()
        return seen

    def test_read_once_an_interval_and_served_between(self, fake_nvml: FakeNvml) -> None:
        """Polls every 10 s read it every third poll; a poll due a little early (polls
        start milliseconds off) reads, one half a second early does not."""
        gpu_b = replace(GPU_B, energy_mj=987_654_321)
        fake_nvml.configure(GPU_A, gpu_b)
        both = (Sample(GPU_ENERGY, GPU_A.energy_mj / 1000), Sample(GPU_ENERGY, 987_654.321))

        seen = self.polls(fake_nvml, (0.0, 10.0, 29.4, 29.6, 40.0, 59.0, 60.0))

        assert [(2, both), (0, both), (0, both), (2, both), (0, both), (0, both), (2, both)] == seen

    def test_due_exactly_the_slack_before_the_interval(self, fake_nvml: FakeNvml) -> None:
        """A poll exactly --collector.nvml.energy-interval less the slack after the
        reading is due: it reads."""
        fake_nvml.configure(GPU_A)
        energy = (Sample(GPU_ENERGY, GPU_A.energy_mj / 1000),)

        seen = self.polls(fake_nvml, (0.0, 30.0 - nvml_module.INTERVAL_SLACK_S))

        assert [(1, energy), (1, energy)] == seen

    def test_zero_reads_every_poll(self, fake_nvml: FakeNvml) -> None:
        fake_nvml.configure(GPU_A)
        energy = (Sample(GPU_ENERGY, GPU_A.energy_mj / 1000),)

        seen = self.polls(fake_nvml, (5.0, 5.0, 5.0), interval_s=0.0)

        assert [(1, energy)] * 3 == seen

    def test_a_failed_read_is_not_served_and_is_retried(
        self, fake_nvml: FakeNvml, tmp_path: Path
    ) -> None:
        """A read that fails gives no sample and its issue, and the next poll asks again,
        however soon; the reading it makes is then served."""
        failing = tmp_path / "energy_fails"
        failing.touch()
        fake_nvml.configure(replace(GPU_A, fail_while=(("energy", UNKNOWN, failing),)))
        energy = (Sample(GPU_ENERGY, GPU_A.energy_mj / 1000),)
        now = [0.0]
        collector = NvmlCollector(CollectorContext(), clock=lambda: now[0])
        try:
            first = collector.collect()
            failing.unlink()
            now[0] = 1.0
            before = fake_nvml.library.calls("energy")
            second = collector.collect()
            now[0] = 2.0
            third = collector.collect()
            calls = fake_nvml.library.calls("energy") - before
        finally:
            collector.close()

        def served(readings: Readings) -> tuple[Sample, ...]:
            return tuple(s for s in readings.devices[0].samples if s.spec is GPU_ENERGY)

        assert ([issue("UNKNOWN", UUID_A, "energy")], (), energy, energy, 1) == (
            list(first.issues),
            served(first),
            served(second),
            served(third),
            calls,
        )

    @staticmethod
    def flagged_polls(
        fake_nvml: FakeNvml, flag: Path, polls: tuple[tuple[float, bool], ...]
    ) -> list[tuple[int, tuple[Sample, ...], list[str]]]:
        """Polls at the times given, ``flag`` existing during those marked True: per poll,
        the energy calls made, the energy samples served and the issues' errors."""
        now = [0.0]
        collector = NvmlCollector(CollectorContext(), clock=lambda: now[0])
        seen = []
        try:
            for now[0], flagged in polls:
                if flagged:
                    flag.touch()
                before = fake_nvml.library.calls("energy")
                readings = collector.collect()
                flag.unlink(missing_ok=True)
                served = tuple(
                    s for d in readings.devices for s in d.samples if s.spec is GPU_ENERGY
                )
                issues = [i.error for i in readings.issues]
                seen.append((fake_nvml.library.calls("energy") - before, served, issues))
        finally:
            collector.close()
        return seen

    def test_a_read_that_fails_after_a_good_one_serves_nothing(
        self, fake_nvml: FakeNvml, tmp_path: Path
    ) -> None:
        """Due again at 30 s, the read fails: that poll has no energy sample (not the
        30 s old one) and its issue; the next poll asks again and serves what it reads."""
        failing = tmp_path / "energy_fails"
        fake_nvml.configure(replace(GPU_A, fail_while=(("energy", UNKNOWN, failing),)))
        energy = (Sample(GPU_ENERGY, GPU_A.energy_mj / 1000),)

        seen = self.flagged_polls(
            fake_nvml, failing, ((0.0, False), (30.0, True), (40.0, False), (50.0, False))
        )

        expected = [(1, energy, []), (1, (), ["UNKNOWN"]), (1, energy, []), (0, energy, [])]
        assert expected == seen

    def test_a_gpu_away_for_a_poll_is_read_afresh(
        self, fake_nvml: FakeNvml, tmp_path: Path
    ) -> None:
        """A reading is kept only for the devices of the last poll: a GPU lost for one
        poll (no reading, nothing served) is read again when it is back, not served the
        reading it had before."""
        lost = tmp_path / "lost"
        fake_nvml.configure(replace(GPU_A, lost_flag=lost))
        energy = (Sample(GPU_ENERGY, GPU_A.energy_mj / 1000),)

        seen = self.flagged_polls(
            fake_nvml, lost, ((0.0, False), (10.0, True), (20.0, False), (25.0, False))
        )

        calls_and_served = [(calls, served) for calls, served, _ in seen]
        assert [(1, energy), (0, ()), (1, energy), (0, energy)] == calls_and_served

    def test_a_slow_gpu_does_not_delay_the_next_ones(self, fake_nvml: FakeNvml) -> None:
        """Every reading of a poll is timed at the poll's start: a GPU read after one
        whose calls took seconds is still due with the others at 30 s."""
        fake_nvml.configure(GPU_A, GPU_B)
        start = [0.0]
        seconds = itertools.count()

        def clock() -> float:
            # In the first poll each look at the clock is a second later than the last
            # (a driver slow that once); later polls take no time.
            return start[0] + (next(seconds) if start[0] == 0.0 else 0.0)

        collector = NvmlCollector(CollectorContext(), clock=clock)
        seen = []
        try:
            for start[0] in (0.0, 10.0, 20.0, 30.0):
                before = fake_nvml.library.calls("energy")
                collector.collect()
                seen.append(fake_nvml.library.calls("energy") - before)
        finally:
            collector.close()

        assert [2, 0, 0, 2] == seen

    def test_nothing_is_served_across_a_new_nvml_session(self, fake_nvml: FakeNvml) -> None:
        """Handles are NVML's until it shuts down, and a new session may give another GPU
        the same one: after close(), the next poll reads afresh."""
        fake_nvml.configure(GPU_A)
        now = [0.0]
        collector = NvmlCollector(CollectorContext(), clock=lambda: now[0])
        try:
            collector.collect()
            collector.close()
            other = replace(GPU_A, uuid=UUID_B, energy_mj=5_000)
            fake_nvml.configure(other)  # read by the next nvmlInit
            now[0] = 1.0
            (device,) = collector.collect().devices
        finally:
            collector.close()

        energy = tuple(s for s in device.samples if s.spec is GPU_ENERGY)
        assert (UUID_B, (Sample(GPU_ENERGY, 5.0),)) == (device.name, energy)


GPU_IS_LOST_CODE = 15  # nvml.h NVML_ERROR_GPU_IS_LOST


class TestDriverInfo:
    def test_versions_as_nvidia_smi_prints_them(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The driver's version as NVML gives it, CUDA's as nvidia-smi prints it."""
        fake_nvml.configure(GPU_A, driver_version="575.57.08", cuda_version=12090)

        expected = (Sample(GPU_DRIVER_INFO, 1.0, ("nvidia", "575.57.08", "12.9")),)
        assert expected == collector.collect().node_samples

    @pytest.mark.parametrize("driver", ["without_the_call", "not_supported"])
    def test_no_cuda_version_to_be_had_is_no_issue(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path, driver: str
    ) -> None:
        """An old driver without nvmlSystemGetCudaDriverVersion, or NOT_SUPPORTED for the
        CUDA version: cuda_version is "", and that is no error."""
        if driver == "without_the_call":
            fake_nvml.configure(GPU_A, cuda_version=-1)
        else:
            unsupported = tmp_path / "unsupported"
            unsupported.touch()
            fake_nvml.configure(GPU_A, cuda_error=(NOT_SUPPORTED, unsupported))
        readings = collector.collect()

        expected = (Sample(GPU_DRIVER_INFO, 1.0, ("nvidia", "580.82.07", "")),)
        assert (expected, ()) == (readings.node_samples, readings.issues)

    def test_gpu_is_lost_from_a_driver_call_fails_that_read_only(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """GPU_IS_LOST from a call about the driver, which names no GPU: that read's
        issue and figure only (the driver's version still served), and every GPU is
        still read (not a poll failed by an internal signal)."""
        failing = tmp_path / "cuda_fails"
        failing.touch()
        fake_nvml.configure(GPU_A, cuda_error=(GPU_IS_LOST_CODE, failing))
        readings = collector.collect()

        lost = CollectorIssue("GPU_IS_LOST", "driver: cuda_driver_version: NVML GPU_IS_LOST")
        driver = Sample(GPU_DRIVER_INFO, 1.0, ("nvidia", "580.82.07", ""))
        assert ((gpu_reading(GPU_A, "0000:17:00.0"),), (driver,), (lost,)) == (
            readings.devices,
            readings.node_samples,
            readings.issues,
        )

    def test_a_failing_cuda_version_is_asked_again(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A CUDA version read that fails is an issue each poll and an empty cuda_version
        while it fails, then read: not kept empty for the life of the process."""
        failing = tmp_path / "cuda_fails"
        failing.touch()
        fake_nvml.configure(GPU_A, cuda_error=(UNKNOWN, failing))
        first = collector.collect()
        second = collector.collect()
        failing.unlink()
        third = collector.collect()

        failed = CollectorIssue("UNKNOWN", "driver: cuda_driver_version: NVML UNKNOWN")
        assert (
            [failed],
            [failed],
            [("nvidia", "580.82.07", ""), ("nvidia", "580.82.07", "13.0")],
        ) == (
            list(first.issues),
            list(second.issues),
            [second.node_samples[0].label_values, third.node_samples[0].label_values],
        )

    def test_read_once_while_nvml_stays_initialised(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The driver's versions change only with the driver: polls after the first do
        not ask again."""
        fake_nvml.configure(GPU_A)
        collector.collect()
        second, (driver_version_calls,) = collect_counting(fake_nvml, collector, "driver_version")
        assert (0, DRIVER) == (
            driver_version_calls,
            second.node_samples,
        )

    def test_read_again_after_nvml_is_initialised_afresh(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Read once per nvmlInit: a new driver (NVML initialised afresh) is seen."""
        fake_nvml.configure(GPU_A, driver_version="570.133.20")
        before = collector.collect().node_samples
        collector.close()
        fake_nvml.configure(GPU_A, driver_version="580.159.04")
        after = collector.collect().node_samples

        assert [("nvidia", "570.133.20", "13.0"), ("nvidia", "580.159.04", "13.0")] == [
            before[0].label_values,
            after[0].label_values,
        ]


def xid_counts(readings: Readings, uuid: str) -> dict[str, float]:
    """One GPU's Xid counters: "total" and each code's."""
    (gpu,) = (d for d in readings.devices if d.name == uuid)
    counts = {s.label_values[0]: s.value for s in gpu.samples if s.spec is GPU_XID_ERRORS_BY_CODE}
    totals = [s.value for s in gpu.samples if s.spec is GPU_XID_ERRORS]
    return counts | ({"total": totals[0]} if totals else {})


class TestXidErrors:
    def test_counted_per_gpu_and_code(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """Each Xid event counts once, for its GPU in all and by code, from the poll it
        arrives in. The total starts at 0 when the GPU is first watched (an increase
        alerts can see); a code's series appears with its first error."""
        raised, later = tmp_path / "raised", tmp_path / "later"
        gpu_b = replace(GPU_B, xids=((48, raised), (13, raised), (13, later)))
        fake_nvml.configure(GPU_A, gpu_b)

        first = collector.collect()
        raised.touch()
        second = collector.collect()
        later.touch()
        third = collector.collect()

        assert [
            {"total": 0.0},
            {"total": 2.0, "13": 1.0, "48": 1.0},
            {"total": 3.0, "13": 2.0, "48": 1.0},
            {"total": 0.0},
        ] == [
            xid_counts(first, UUID_B),
            xid_counts(second, UUID_B),
            xid_counts(third, UUID_B),
            xid_counts(third, UUID_A),
        ]

    def test_a_gpu_without_events_is_not_watched_and_says_nothing(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A board that cannot register events (NOT_SUPPORTED): no counter, which would
        say "no errors", and no issue."""
        fake_nvml.configure(replace(GPU_A, fail=(("events", NOT_SUPPORTED),), xids=((48, None),)))
        readings = collector.collect()

        assert ({}, ()) == (xid_counts(readings, UUID_A), readings.issues)

    def test_registered_for_xids_only_and_never_waits(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The GPU is registered for Xid events alone (not clock or power changes the
        poll would only throw away), and the drain takes what waits without waiting."""
        fake_nvml.configure(GPU_A)
        collector.collect()
        assert (pynvml.nvmlEventTypeXidCriticalError, 0) == (
            fake_nvml.library.registered_events(0),
            fake_nvml.library.last_event_wait_ms(),
        )

    def test_codes_in_numeric_order(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A GPU's per-code series come in the order of their codes, whatever order the
        Xids were raised in, so the page reads the same from poll to poll."""
        raised = tmp_path / "raised"
        fake_nvml.configure(replace(GPU_A, xids=((79, raised), (119, raised), (13, raised))))
        collector.collect()
        raised.touch()
        (gpu,) = collector.collect().devices
        assert ["13", "79", "119"] == [
            s.label_values[0] for s in gpu.samples if s.spec is GPU_XID_ERRORS_BY_CODE
        ]

    def test_a_board_without_events_is_not_asked_again(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """NOT_SUPPORTED for a GPU's registration is final: later polls do not ask."""
        fake_nvml.configure(replace(GPU_A, fail=(("events", NOT_SUPPORTED),)))
        collector.collect()
        before = fake_nvml.library.calls("events")
        collector.collect()
        collector.collect()
        assert 0 == fake_nvml.library.calls("events") - before

    def test_a_registration_refused_for_one_gpu_costs_the_others_nothing(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """Another GPU's registration refused (not UNKNOWN: the set is sound) is its issue
        each poll; the set is kept, and the Xids of the GPUs registered with it count."""
        raised = tmp_path / "raised"
        gpu_b = replace(GPU_B, fail=(("events", NO_PERMISSION),))
        fake_nvml.configure(replace(GPU_A, xids=((48, raised),)), gpu_b)
        first = collector.collect()
        raised.touch()
        second = collector.collect()

        refused = CollectorIssue(
            "NO_PERMISSION", f"Xid events: register_xid_events {UUID_B}: NVML NO_PERMISSION"
        )
        assert ([refused], [refused], {"total": 1.0, "48": 1.0}) == (
            list(first.issues),
            list(second.issues),
            xid_counts(second, UUID_A),
        )

    @pytest.mark.parametrize("code", [NOT_SUPPORTED, FUNCTION_NOT_FOUND])
    def test_a_driver_without_event_sets_is_quiet_for_good(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path, code: int
    ) -> None:
        """nvmlEventSetCreate NOT_SUPPORTED (or missing): no issue and no Xid series,
        which would say "no errors"; final for the session, so not asked again."""
        unsupported = tmp_path / "unsupported"
        unsupported.touch()
        fake_nvml.configure(replace(GPU_A, xids=((48, None),)), event_set_error=(code, unsupported))
        first = collector.collect()
        unsupported.unlink()
        second = collector.collect()
        assert [((), {}), ((), {})] == [
            (first.issues, xid_counts(first, UUID_A)),
            (second.issues, xid_counts(second, UUID_A)),
        ]

    def test_a_registration_that_fails_is_retried(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A registration NVML refuses with another error (UNKNOWN: with a new event set,
        as nvml.h asks) is an issue each poll, and is tried again: once it succeeds the
        GPU's Xids count."""
        failing = tmp_path / "registration_fails"
        failing.touch()
        gpu = replace(GPU_A, fail_while=(("events", UNKNOWN, failing),), xids=((63, None),))
        fake_nvml.configure(gpu)
        first = collector.collect()
        second = collector.collect()
        failing.unlink()
        third = collector.collect()

        refused = CollectorIssue(
            "UNKNOWN", f"Xid events: register_xid_events {UUID_A}: NVML UNKNOWN"
        )
        assert ([refused], [refused], {}, {"total": 1.0, "63": 1.0}) == (
            list(first.issues),
            list(second.issues),
            xid_counts(second, UUID_A),
            xid_counts(third, UUID_A),
        )

    def test_an_event_set_nvml_refuses_is_tried_again(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """nvmlEventSetCreate failing (not NOT_SUPPORTED): an issue each poll, no Xid series
        meanwhile, and tried again: once it works, Xids count."""
        failing = tmp_path / "create_fails"
        failing.touch()
        fake_nvml.configure(replace(GPU_A, xids=((48, None),)), event_set_error=(UNKNOWN, failing))
        first = collector.collect()
        second = collector.collect()
        failing.unlink()
        third = collector.collect()

        failed = CollectorIssue("UNKNOWN", "Xid events: xid_event_set: NVML UNKNOWN")
        assert ([failed], [failed], {}, {"total": 1.0, "48": 1.0}) == (
            list(first.issues),
            list(second.issues),
            xid_counts(second, UUID_A),
            xid_counts(third, UUID_A),
        )

    def test_a_gpu_falling_off_the_bus_counts_its_xid_79(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """The event is matched to the GPU by its handle, without asking NVML, which a
        lost GPU no longer answers: its Xid 79 counts, and its loss is one issue."""
        lost = tmp_path / "lost"
        fake_nvml.configure(replace(GPU_A, lost_flag=lost, xids=((79, lost),)))
        collector.collect()
        lost.touch()
        readings = collector.collect()

        assert ({"total": 1.0, "79": 1.0}, [issue("GPU_IS_LOST", UUID_A, "mig_enabled")]) == (
            xid_counts(readings, UUID_A),
            list(readings.issues),
        )

    def test_after_a_new_event_set_every_gpu_registers_again(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """Registrations belong to a set: when one GPU's UNKNOWN makes the collector free
        the set, the GPUs registered with it register with the new one, and their Xids
        still count."""
        failing, raised = tmp_path / "registration_fails", tmp_path / "raised"
        failing.touch()
        gpu_b = replace(GPU_B, fail_while=(("events", UNKNOWN, failing),))
        fake_nvml.configure(replace(GPU_A, xids=((94, raised),)), gpu_b)
        collector.collect()  # A registers, B's UNKNOWN frees the set
        failing.unlink()
        collector.collect()  # a new set: A and B register
        raised.touch()
        readings = collector.collect()

        assert {"total": 1.0, "94": 1.0} == xid_counts(readings, UUID_A)

    @pytest.mark.parametrize(
        ("code", "name", "new_set"),
        [
            # nvml.h asks a new set only after a failed registration: the set is kept.
            (UNKNOWN, "UNKNOWN", False),
            # A set with a lost GPU may answer so from then on: a new one, which the lost
            # GPU cannot join, keeps the other GPUs counted.
            (GPU_IS_LOST_CODE, "GPU_IS_LOST", True),
        ],
    )
    def test_a_failing_wait_is_one_issue_and_xids_count_after(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        tmp_path: Path,
        code: int,
        name: str,
        new_set: bool,
    ) -> None:
        """nvmlEventSetWait failing: an issue each poll while it lasts, the set kept or
        made anew by the error, and Xids counted once it answers."""
        failing, raised = tmp_path / "wait_fails", tmp_path / "raised"
        fake_nvml.configure(replace(GPU_A, xids=((74, raised),)), event_wait_error=(code, failing))
        collector.collect()
        failing.touch()
        during = collector.collect()
        again = collector.collect()
        failing.unlink()
        registrations = fake_nvml.library.calls("events")
        collector.collect()
        raised.touch()
        after = collector.collect()

        failed = [CollectorIssue(name, f"Xid events: next_xid: NVML {name}")]
        assert (
            failed,
            failed,
            int(new_set),
            {"total": 1.0, "74": 1.0},
        ) == (
            list(during.issues),
            list(again.issues),
            fake_nvml.library.calls("events") - registrations,
            xid_counts(after, UUID_A),
        )

    def test_at_most_so_many_events_a_poll(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """An Xid storm does not hold the poll: the events over the cap wait for the next."""
        monkeypatch.setattr(nvml_module, "MAX_EVENTS_PER_POLL", 2)
        raised = tmp_path / "raised"
        fake_nvml.configure(replace(GPU_A, xids=((13, raised), (13, raised), (13, raised))))
        collector.collect()
        raised.touch()
        first = collector.collect()
        second = collector.collect()

        assert [{"total": 2.0, "13": 2.0}, {"total": 3.0, "13": 3.0}] == [
            xid_counts(first, UUID_A),
            xid_counts(second, UUID_A),
        ]

    def test_a_gpu_lost_at_registration_is_reported_once(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU lost just as it is registered is one GPU_IS_LOST, from its read."""
        # Lost as its Xid events are registered: handle, uuid, name, pci, minor answered.
        fake_nvml.configure(replace(GPU_A, lost_at=("events", 1)))
        readings = collector.collect()

        assert [issue("GPU_IS_LOST", UUID_A, "mig_enabled")] == list(readings.issues)

    def test_the_count_survives_nvml_initialised_afresh(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The counters are the exporter's: NVML initialised again (a new event set) does
        not take them back to 0, which rate() would read as a reset."""
        fake_nvml.configure(replace(GPU_A, xids=((119, None),)))
        before = collector.collect()
        collector.close()
        fake_nvml.configure(GPU_A)
        after = collector.collect()

        expected = {"total": 1.0, "119": 1.0}
        assert [expected, expected] == [xid_counts(before, UUID_A), xid_counts(after, UUID_A)]


# NVML_VALUE_NOT_AVAILABLE, (-1), in an unsigned int and an unsigned long long
UINT_NA = 0xFFFFFFFF
ULL_NA = 0xFFFFFFFFFFFFFFFF


class TestHostileAnswers:
    """Answers NVML gives with SUCCESS that are no figure: each loses that figure only,
    with an issue; the GPU's other figures and the other GPUs stay."""

    @staticmethod
    def as_latin1(fake_nvml: FakeNvml) -> None:
        """Rewrite the fake's config in Latin-1: "\xe9" in a name becomes the byte 0xE9,
        which is not UTF-8, as NVML hands back whatever bytes the board holds."""
        text = fake_nvml.config_path.read_text()
        fake_nvml.config_path.write_text(text, encoding="latin-1")

    def test_a_name_not_utf8_loses_the_model_only(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        gpu_b = replace(GPU_B, name="NVIDIA H100 \xe9")
        fake_nvml.configure(GPU_A, gpu_b)
        self.as_latin1(fake_nvml)

        readings = collector.collect()

        unnamed = gpu_reading(gpu_b, "0000:b1:00.0")
        unnamed = replace(unnamed, identity=replace(unnamed.identity, model=None))
        expected = Readings(
            node_samples=DRIVER,
            devices=(gpu_reading(GPU_A, "0000:17:00.0"), unnamed),
            issues=(issue("NOT_UTF8", UUID_B, "name"),),
        )
        assert expected == readings

    def test_a_uuid_not_utf8_loses_that_gpu_only(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        fake_nvml.configure(FakeGpu("GPU-\xe9", minor=1), GPU_A)
        self.as_latin1(fake_nvml)

        readings = collector.collect()

        expected = Readings(
            node_samples=DRIVER,
            devices=(gpu_reading(GPU_A, "0000:17:00.0"),),
            issues=(issue("NOT_UTF8", "GPU index 0", "uuid"),),
        )
        assert expected == readings

    def test_a_bus_id_not_utf8_is_an_issue_not_a_failed_poll(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """busId is decoded by PynvmlSource itself, not pynvml: its bytes not UTF-8 fail
        as NOT_UTF8 too, and the other GPU is read whole."""
        gpu_b = replace(GPU_B, pci="00000000:b1:00.\xe9")
        fake_nvml.configure(GPU_A, gpu_b)
        self.as_latin1(fake_nvml)

        readings = collector.collect()

        assert (gpu_reading(GPU_A, "0000:17:00.0"), ["NOT_UTF8"]) == (
            device(readings, UUID_A),
            [i.error for i in readings.issues],
        )

    @pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
    def test_a_field_value_that_is_no_number_loses_that_figure_only(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, value: str
    ) -> None:
        """A double field value (nvmlValueType_t 0) NaN or infinite: int() of it raised
        ValueError or OverflowError, out of collect(), and every GPU was lost."""
        gpu_a = replace(GPU_A, fields_as=((82, 0, value),))  # NVML_FI_DEV_MEMORY_TEMP
        fake_nvml.configure(gpu_a, GPU_B)

        readings = collector.collect()

        expected = Readings(
            node_samples=DRIVER,
            devices=(
                gpu_reading(gpu_a, "0000:17:00.0", samples(gpu_a, without=("memory_temperature",))),
                gpu_reading(GPU_B, "0000:b1:00.0"),
            ),
            issues=(issue("VALUE_NOT_AVAILABLE", UUID_A, "memory_temperature"),),
        )
        assert expected == readings

    @pytest.mark.parametrize(
        ("field", "value_type", "value", "lost", "error"),
        [
            (38, 0, "nan", "nvlink_errors", "VALUE_NOT_AVAILABLE"),
            (38, 7, "14", "nvlink_errors", "UNKNOWN"),  # 7: a type newer than pynvml
            # NVML_VALUE_NOT_AVAILABLE: all bits of the field's own unsigned type set.
            (38, 3, str(ULL_NA), "nvlink_errors", "VALUE_NOT_AVAILABLE"),
            (138, 3, str(ULL_NA), "nvlink_traffic_kib", "VALUE_NOT_AVAILABLE"),
            (38, 6, "65535", "nvlink_errors", "VALUE_NOT_AVAILABLE"),
            (38, 2, str(ULL_NA), "nvlink_errors", "VALUE_NOT_AVAILABLE"),
        ],
        ids=["nan", "unknown_type", "all_bits", "transmit", "unsigned_short", "unsigned_long"],
    )
    def test_an_nvlink_field_that_is_no_number_loses_that_field_only(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        field: int,
        value_type: int,
        value: str,
        lost: str,
        error: str,
    ) -> None:
        """Field values carry their own type: a NaN, a type pynvml does not know, or all
        bits of an unsigned one set is no count (the CRC flit errors, field 38) nor
        traffic (field 138). That field goes, with an issue; the GPU's other NVLink
        counters, its traffic and its links stay, as for a field that answers an error."""
        gpu = replace(GPU_A, fields_as=((field, value_type, value),))
        fake_nvml.configure(gpu)

        readings = collector.collect()

        left = replace(gpu, **{lost: (None, *getattr(gpu, lost)[1:])})
        expected = Readings(
            node_samples=DRIVER,
            devices=(gpu_reading(gpu, "0000:17:00.0", samples(left)),),
            issues=(issue(error, UUID_A, "nvlink"),),
        )
        assert expected == readings


class TestNotAvailable:
    """nvml.h's NVML_VALUE_NOT_AVAILABLE (-1): an unsigned figure with all its bits set
    under SUCCESS is no reading. It loses that figure with an issue, not a power draw of
    4294967 W, a utilization of 42949672 or an energy counter of 1.8e16 J."""

    @pytest.mark.parametrize(
        ("figures", "without", "calls"),
        [
            ({"power_mw": UINT_NA}, ("power",), ("power",)),
            ({"energy_mj": ULL_NA}, ("energy",), ("energy",)),
            ({"util": (UINT_NA, 40)}, ("util",), ("utilization",)),
            ({"util": (85, UINT_NA)}, ("util",), ("utilization",)),
            ({"memory": (ULL_NA, ULL_NA, 0)}, ("memory",), ("memory",)),
            ({"memory": (80 * GIB, ULL_NA, 0)}, ("memory",), ("memory",)),
            ({"memory": (ULL_NA, 20 * GIB, 0)}, ("memory",), ("memory",)),
            ({"temperature": UINT_NA}, ("temperature",), ("temperature",)),
            ({"sm_clock_mhz": UINT_NA}, ("clock",), ("sm_clock",)),
            ({"ecc": (ULL_NA, ULL_NA)}, ("ecc",), ("ecc_corrected", "ecc_uncorrected")),
            ({"pcie_replays": UINT_NA}, ("replays",), ("pcie_replays",)),
            ({"video": (UINT_NA, UINT_NA)}, ("video",), ("encoder", "decoder")),
            ({"memory_temperature": UINT_NA}, ("memory_temperature",), ("memory_temperature",)),
            ({"recovery_action": UINT_NA}, ("recovery_action",), ("recovery_action",)),
        ],
        ids=lambda value: "-".join(value) if isinstance(value, tuple) else None,
    )
    def test_loses_that_figure_only(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        figures: dict[str, Any],
        without: tuple[str, ...],
        calls: tuple[str, ...],
    ) -> None:
        gpu_a = replace(GPU_A, **figures)
        fake_nvml.configure(gpu_a, GPU_B)

        readings = collector.collect()

        expected = Readings(
            node_samples=DRIVER,
            devices=(
                gpu_reading(gpu_a, "0000:17:00.0", samples(gpu_a, without=without)),
                gpu_reading(GPU_B, "0000:b1:00.0"),
            ),
            issues=tuple(issue("VALUE_NOT_AVAILABLE", UUID_A, call) for call in calls),
        )
        assert expected == readings

    def test_through_the_older_temperature_call(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A driver before R565 answers through nvmlDeviceGetTemperature, an unsigned
        int, where nvmlDeviceGetTemperatureV's is signed (-1): both are no reading."""
        gpu = replace(GPU_A, temperature=UINT_NA)
        fake_nvml.configure(gpu, driver_version="550.54.15")

        readings = collector.collect()

        assert (
            samples(gpu, without=("temperature",)),
            (issue("VALUE_NOT_AVAILABLE", UUID_A, "temperature"),),
        ) == (device(readings, UUID_A).samples, readings.issues)

    def test_a_temperature_below_zero_is_a_reading(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """nvmlDeviceGetTemperatureV's value is a signed int: only -1 is
        NVML_VALUE_NOT_AVAILABLE, a GPU at -5 C reads -5."""
        gpu = replace(GPU_A, temperature=UINT_NA - 4)  # (int)-5
        fake_nvml.configure(gpu)

        readings = collector.collect()

        assert ((), -5.0) == (
            readings.issues,
            next(s.value for s in device(readings, UUID_A).samples if s.spec == GPU_TEMPERATURE),
        )


class TestLostGpu:
    def test_gpu_lost_between_polls(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A lost GPU keeps its keys, loses its figures, is one issue a poll; others go on."""
        flag = tmp_path / "gpu_b_lost"
        gpu_b = FakeGpu(UUID_B, minor=1, pci="00000000:B1:00.0", lost_flag=flag)
        fake_nvml.configure(GPU_A, gpu_b)
        first = collector.collect()

        flag.touch()
        second = collector.collect()
        third = collector.collect()

        assert (
            Readings(
                node_samples=DRIVER,
                devices=(gpu_reading(GPU_A, "0000:17:00.0"), gpu_reading(gpu_b, "0000:b1:00.0")),
            )
            == first
        )
        expected = Readings(
            node_samples=DRIVER,
            devices=(
                gpu_reading(GPU_A, "0000:17:00.0"),
                # Its Xids are counted, not read: that series stays.
                gpu_reading(gpu_b, "0000:b1:00.0", NO_XIDS),
            ),
            issues=(issue("GPU_IS_LOST", UUID_B, "mig_enabled"),),  # the first call a poll
        )
        assert (expected, expected) == (second, third)

    def test_gpu_lost_mid_poll(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """A GPU lost halfway through its figures keeps what it answered before."""
        # Lost as its memory is asked, after its utilization was answered.
        gpu_b = FakeGpu(UUID_B, minor=1, pci="00000000:B1:00.0", lost_at=("memory", 1))
        fake_nvml.configure(gpu_b, GPU_A)

        readings = collector.collect()

        expected = Readings(
            node_samples=DRIVER,
            devices=(
                gpu_reading(
                    gpu_b,
                    "0000:b1:00.0",
                    (
                        Sample(GPU_UTILIZATION, 0.85),
                        Sample(GPU_MEMORY_BANDWIDTH_UTILIZATION, 0.40),
                        *NO_XIDS,
                    ),
                ),
                gpu_reading(GPU_A, "0000:17:00.0"),
            ),
            issues=(issue("GPU_IS_LOST", UUID_B, "memory"),),
        )
        assert expected == readings

    def test_gpu_lost_from_the_start_is_skipped(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A GPU lost before its UUID was ever read has no reading; the issue is reported."""
        flag = tmp_path / "lost"
        flag.touch()
        fake_nvml.configure(FakeGpu(UUID_B, minor=1, lost_flag=flag), GPU_A)

        readings = collector.collect()

        expected = Readings(
            node_samples=DRIVER,
            devices=(gpu_reading(GPU_A, "0000:17:00.0"),),
            issues=(issue("GPU_IS_LOST", "GPU index 0", "device_handle"),),
        )
        assert expected == readings


class TestLibrary:
    def test_driver_not_loaded_is_unavailable_then_retried(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """No driver means unavailable, not failed; nvmlInit is tried again next poll."""
        with pytest.raises(CollectorUnavailable, match="driver is not loaded"):
            collector.collect()

        fake_nvml.configure(GPU_A)
        readings = collector.collect()

        assert (
            Readings(node_samples=DRIVER, devices=(gpu_reading(GPU_A, "0000:17:00.0"),)) == readings
        )

    @pytest.mark.parametrize(
        ("failing", "call"), [("init_error", "nvmlInit"), ("count_error", "nvmlDeviceGetCount")]
    )
    def test_other_init_or_count_failure_is_an_error(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, failing: str, call: str
    ) -> None:
        """nvmlInit failing other than for a missing driver, or nvmlDeviceGetCount failing,
        fails the poll (not an unavailable source), named by its NVML error."""
        fake_nvml.configure(GPU_A, **{failing: UNKNOWN})

        with pytest.raises(CollectorError, match=f"{call} failed: UNKNOWN") as raised:
            collector.collect()

        assert not isinstance(raised.value, CollectorUnavailable)

    def test_initialises_once_and_shuts_down_on_close(
        self, fake_nvml: FakeNvml, fake_nvml_library: FakeNvmlLibrary
    ) -> None:
        """nvmlInit runs on the first poll only; close() calls nvmlShutdown."""
        fake_nvml.configure(GPU_A)
        before = fake_nvml_library.init_count()
        collector = NvmlCollector(CollectorContext())

        collector.collect()
        collector.collect()
        during = fake_nvml_library.init_count()
        collector.close()

        assert (before + 1, before) == (during, fake_nvml_library.init_count())

    def test_close_before_any_poll_does_not_shut_down(
        self, fake_nvml: FakeNvml, fake_nvml_library: FakeNvmlLibrary
    ) -> None:
        """close() on a collector that never initialised NVML leaves it alone."""
        fake_nvml.configure(GPU_A)
        other = NvmlCollector(CollectorContext())
        other.collect()
        before = fake_nvml_library.init_count()

        NvmlCollector(CollectorContext()).close()

        assert before == fake_nvml_library.init_count()
        other.close()

    @pytest.mark.parametrize(
        "struct",
        [
            "nvmlPciInfo_t",
            "c_nvmlMemory_t",
            "c_nvmlMemory_v2_t",
            "c_nvmlUtilization_t",
            "c_nvmlTemperature_v1_t",
            "c_nvmlGpuInstanceInfo_t",
            "c_nvmlEventData_t",
            "c_nvmlEventSet_t",
            "c_nvmlFieldValue_t",
            "c_nvmlGpmMetric_t",
            "c_nvmlGpmMetricsGet_t",
            "c_nvmlGpmSupport_t",
        ],
    )
    def test_fake_structs_match_pynvml(
        self, fake_nvml_library: FakeNvmlLibrary, struct: str
    ) -> None:
        """The fake's C structures have the size of pynvml's ctypes Structures."""
        assert ctypes.sizeof(getattr(pynvml, struct)) == fake_nvml_library.struct_size(struct)

    def test_the_fabric_structs_are_nvml_h_s(self, fake_nvml_library: FakeNvmlLibrary) -> None:
        """The collector's own fabric structs (pynvml's differ by release) have nvml.h's
        sizes, and the v2 version word is the one pynvml and nvml.h give."""
        assert (
            fake_nvml_library.struct_size("c_nvmlGpuFabricInfo_t"),
            fake_nvml_library.struct_size("c_nvmlGpuFabricInfo_v2_t"),
            pynvml.nvmlGpuFabricInfo_v2,
        ) == (
            ctypes.sizeof(nvml_module._FabricInfo),
            ctypes.sizeof(nvml_module._FabricInfoV2),
            nvml_module.FABRIC_INFO_V2,
        )

    def test_no_library_is_unavailable(self) -> None:
        """Without libnvidia-ml.so.1 at all, the collector is unavailable, not failed."""
        # A fresh process: this one already has the fake loaded.
        script = (
            """
import ctypes, json
"""
            + _EXIT_WHERE_REAL_NVML
            + """from exporter.collectors.base import CollectorContext, CollectorUnavailable
from exporter.collectors.nvml import NvmlCollector
try:
    NvmlCollector(CollectorContext()).collect()
except CollectorUnavailable as error:
    print(json.dumps({"unavailable": str(error)}))
"""
        )
        done = run_python(script, unset={"LD_LIBRARY_PATH", "LD_PRELOAD", "FAKE_NVML_CONFIG"})
        result = json.loads(done.stdout)
        if result.get("real_nvml"):
            pytest.skip("this host has a real libnvidia-ml.so.1: no library cannot be shown")

        expected = {"unavailable": "libnvidia-ml.so.1 not found: no NVIDIA driver on this node"}
        assert expected == result

    def test_no_library_does_not_load_pynvml(self) -> None:
        """Without libnvidia-ml.so.1 neither the module, a collector nor its failed init
        loads pynvml; the init still says LIBRARY_NOT_FOUND."""
        # A fresh process: this one imported pynvml for the fake library.
        script = (
            """
import ctypes, json, sys
"""
            + _EXIT_WHERE_REAL_NVML
            + """from exporter.collectors.base import CollectorContext, CollectorUnavailable
from exporter.collectors.nvml import NvmlCollector
loaded = ["pynvml" in sys.modules]
collector = NvmlCollector(CollectorContext())
loaded.append("pynvml" in sys.modules)
try:
    collector.collect()
except CollectorUnavailable:
    loaded.append("pynvml" in sys.modules)
print(json.dumps({"loaded": loaded}))
"""
        )
        done = run_python(script)
        result = json.loads(done.stdout)
        if result.get("real_nvml"):
            pytest.skip("this host has a real libnvidia-ml.so.1: no library cannot be shown")

        assert {"loaded": [False, False, False]} == result

    def test_init_with_the_library_loads_pynvml(self, fake_nvml: FakeNvml) -> None:
        """Where the library loads, the first init imports pynvml and NVML answers."""
        fake_nvml.configure()  # a driver without GPUs
        # A fresh process: this one imported pynvml for the fake library.
        script = f"""
import ctypes, json, sys
ctypes.CDLL({str(fake_nvml.library.path)!r}, mode=ctypes.RTLD_GLOBAL)
from exporter.collectors.nvml import PynvmlSource
source = PynvmlSource()
loaded = ["pynvml" in sys.modules]
source.init()
loaded.append("pynvml" in sys.modules)
print(json.dumps({{"loaded": loaded, "gpus": source.device_count()}}))
source.shutdown()
"""
        done = run_python(script)

        assert {"loaded": [False, True], "gpus": 0} == json.loads(done.stdout)
