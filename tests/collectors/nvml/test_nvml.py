"""NvmlCollector through the real pynvml bindings, against the fake libnvidia-ml.so.1."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest
from fake_nvml_support import (
    FUNCTION_NOT_FOUND,
    GIB,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeGpu,
    FakeMig,
    FakeNvml,
    FakeNvmlLibrary,
)

from exporter.collectors.base import (
    COLLECTOR_ERRORS,
    CollectorContext,
    CollectorError,
    CollectorUnavailable,
)
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

REPO_ROOT = Path(__file__).resolve().parents[3]

UUID_A = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
UUID_B = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
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
        FakeMig(0, MIG_1, gpu_instance=1, compute_instance=0),
        # Slot 1 is empty; gi 2 has two compute instances, in reverse slot order.
        FakeMig(2, MIG_2, 2, 1, name="NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb"),
        FakeMig(3, MIG_3, 2, 0, name="NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb"),
    ),
)


def identity(gpu: FakeGpu, pci_address: str) -> DeviceIdentity:
    return DeviceIdentity(gpu.uuid, pci_address, gpu.name, "nvidia")


def mig_identity(mig: FakeMig, pci_address: str) -> DeviceIdentity:
    return DeviceIdentity(mig.uuid, pci_address, mig.name, "nvidia")


def samples(gpu: FakeGpu, *, without: tuple[str, ...] = ()) -> tuple[Sample, ...]:
    """What the collector makes of a fake GPU's figures, less the ``without`` ones."""
    by_figure = {
        "util": (Sample(GPU_UTILIZATION, gpu.util[0] / 100),),
        "memory": (
            Sample(GPU_MEMORY_USED, float(gpu.memory[1])),
            Sample(GPU_MEMORY_TOTAL, float(gpu.memory[0])),
        ),
        "power": (Sample(GPU_POWER, gpu.power_mw / 1000),),
        "energy": (Sample(GPU_ENERGY, gpu.energy_mj / 1000),),
        "temperature": (Sample(GPU_TEMPERATURE, float(gpu.temperature)),),
        "clock": (Sample(GPU_SM_CLOCK, gpu.sm_clock_mhz * 1e6),),
        "ecc": (
            Sample(GPU_ECC_ERRORS, float(gpu.ecc[0]), ("corrected",)),
            Sample(GPU_ECC_ERRORS, float(gpu.ecc[1]), ("uncorrected",)),
        ),
    }
    return tuple(s for figure, group in by_figure.items() if figure not in without for s in group)


def mig_samples(mig: FakeMig) -> tuple[Sample, ...]:
    return (
        Sample(GPU_MEMORY_USED, float(mig.memory[1])),
        Sample(GPU_MEMORY_TOTAL, float(mig.memory[0])),
    )


def errors(**counts: int) -> tuple[Sample, ...]:
    counts = {"GPU_IS_LOST": 0, **counts}
    return tuple(
        Sample(COLLECTOR_ERRORS, float(n), ("nvml", name)) for name, n in sorted(counts.items())
    )


class TestWholeGpus:
    def test_reads_every_figure_in_base_units(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU named by its UUID gets every figure, converted to base units."""
        fake_nvml.configure(GPU_A)

        readings = collector.collect(device_ids=frozenset({UUID_A}))

        expected_samples = (
            Sample(GPU_UTILIZATION, 0.85),
            Sample(GPU_MEMORY_USED, 20 * GIB),  # v2: reserved memory is not "used"
            Sample(GPU_MEMORY_TOTAL, 80 * GIB),
            Sample(GPU_POWER, 456.789),
            Sample(GPU_ENERGY, 123_456_789.012),
            Sample(GPU_TEMPERATURE, 55.0),
            Sample(GPU_SM_CLOCK, 1_755_000_000.0),
            Sample(GPU_ECC_ERRORS, 3.0, ("corrected",)),  # volatile, not aggregate
            Sample(GPU_ECC_ERRORS, 1.0, ("uncorrected",)),
        )
        identity = DeviceIdentity(UUID_A, "0000:17:00.0", "NVIDIA H100 80GB HBM3", "nvidia")
        assert (
            Readings(
                devices=(DeviceReading(UUID_A, identity, expected_samples),), node_samples=errors()
            )
            == readings
        )

    def test_pci_address_in_kernel_form(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """NVML's 00000000:B1:00.0 becomes the kernel's 0000:b1:00.0."""
        fake_nvml.configure(GPU_B)

        readings = collector.collect(device_ids=frozenset({UUID_B}))

        expected = ("0000:b1:00.0",)
        assert expected == tuple(d.identity.pci_address for d in readings.devices)

    def test_unnamed_gpu_reported_under_its_uuid(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU no kubelet ID names comes last, as GPU-<uuid>; foreign IDs are ignored."""
        fake_nvml.configure(GPU_A, GPU_B)

        readings = collector.collect(
            device_ids=frozenset({UUID_B, "0000:af:00.1", "card0-0", "GPU-not-on-this-node"})
        )

        assert (
            DeviceReading(UUID_B, identity(GPU_B, "0000:b1:00.0"), samples(GPU_B)),
            DeviceReading(UUID_A, identity(GPU_A, "0000:17:00.0"), samples(GPU_A)),
        ) == readings.devices


class TestMig:
    def test_mig_devices_by_uuid(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """MIG-<uuid> IDs get the instance's memory; the parent GPU is reported by its UUID."""
        fake_nvml.configure(MIG_GPU)
        mig_1, mig_2, mig_3 = MIG_GPU.migs

        readings = collector.collect(device_ids=frozenset({MIG_1, MIG_2}))

        pci = "0000:b1:00.0"
        assert (
            DeviceReading(MIG_1, mig_identity(mig_1, pci), mig_samples(mig_1)),
            DeviceReading(MIG_2, mig_identity(mig_2, pci), mig_samples(mig_2)),
            DeviceReading(UUID_A, identity(MIG_GPU, pci), samples(MIG_GPU, without=("util",))),
            DeviceReading(MIG_3, mig_identity(mig_3, pci), mig_samples(mig_3)),
        ) == readings.devices
        assert errors() == readings.node_samples

    def test_legacy_mig_ids(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """MIG-GPU-<uuid>/<gi>/<ci> finds the MIG device by parent, GPU and compute instance."""
        fake_nvml.configure(MIG_GPU)
        legacy_1 = f"MIG-{UUID_A}/1/0"
        legacy_2 = f"MIG-{UUID_A}/2/1"

        readings = collector.collect(device_ids=frozenset({legacy_1, legacy_2}))

        expected = [(legacy_1, MIG_1), (legacy_2, MIG_2)]
        assert expected == [(d.device_id, d.identity.uuid) for d in readings.devices[:2]]


class TestGkeNames:
    def test_nvidia_n_by_minor_number(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """nvidiaN is the GPU with minor number N, whatever its NVML index."""
        fake_nvml.configure(
            FakeGpu(UUID_A, minor=3), FakeGpu(UUID_B, minor=0, pci="00000000:B1:00.0")
        )

        readings = collector.collect(device_ids=frozenset({"nvidia0", "nvidia3"}))

        expected = [("nvidia0", UUID_B), ("nvidia3", UUID_A)]
        assert expected == [(d.device_id, d.identity.uuid) for d in readings.devices]

    def test_vgpu_shares_the_whole_gpu(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """nvidiaN/vgpuK each get the whole GPU N's reading."""
        fake_nvml.configure(GPU_A)

        readings = collector.collect(device_ids=frozenset({"nvidia0/vgpu0", "nvidia0/vgpu1"}))

        gpu = identity(GPU_A, "0000:17:00.0")
        assert (
            DeviceReading("nvidia0/vgpu0", gpu, samples(GPU_A)),
            DeviceReading("nvidia0/vgpu1", gpu, samples(GPU_A)),
        ) == readings.devices

    def test_gpu_instance_by_minor_and_gi(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """nvidiaN/giM is GPU instance M of GPU N, by its first compute instance."""
        fake_nvml.configure(MIG_GPU)

        readings = collector.collect(device_ids=frozenset({"nvidia0/gi1", "nvidia0/gi2"}))

        expected = [("nvidia0/gi1", MIG_1), ("nvidia0/gi2", MIG_3)]
        assert expected == [(d.device_id, d.identity.uuid) for d in readings.devices[:2]]


class TestFigureErrors:
    def test_not_supported_figures_absent_and_not_counted(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """NOT_SUPPORTED drops that figure only and counts nothing: many boards say it."""
        gpu = FakeGpu(UUID_A, fail=(("power", NOT_SUPPORTED), ("ecc", NOT_SUPPORTED)))
        fake_nvml.configure(gpu)

        readings = collector.collect(device_ids=frozenset({UUID_A}))

        assert (
            Readings(
                devices=(
                    DeviceReading(
                        UUID_A,
                        identity(gpu, "0000:17:00.0"),
                        samples(gpu, without=("power", "ecc")),
                    ),
                ),
                node_samples=errors(),
            )
            == readings
        )

    def test_other_errors_lose_the_figure_and_are_counted(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Other errors drop the figure and count by NVML error name, across polls."""
        gpu = FakeGpu(UUID_A, fail=(("temperature", UNKNOWN), ("energy", FUNCTION_NOT_FOUND)))
        fake_nvml.configure(gpu)

        collector.collect(device_ids=frozenset({UUID_A}))
        readings = collector.collect(device_ids=frozenset({UUID_A}))

        assert (
            Readings(
                devices=(
                    DeviceReading(
                        UUID_A,
                        identity(gpu, "0000:17:00.0"),
                        samples(gpu, without=("temperature", "energy")),
                    ),
                ),
                node_samples=errors(FUNCTION_NOT_FOUND=2, UNKNOWN=2),
            )
            == readings
        )


class TestLostGpu:
    def test_gpu_lost_between_polls(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A lost GPU keeps its identity, loses its figures, counts once a poll; others go on."""
        flag = tmp_path / "gpu_b_lost"
        gpu_b = FakeGpu(UUID_B, minor=1, pci="00000000:B1:00.0", lost_flag=flag)
        fake_nvml.configure(GPU_A, gpu_b)
        device_ids = frozenset({UUID_A, UUID_B})
        first = collector.collect(device_ids=device_ids)

        flag.touch()
        collector.collect(device_ids=device_ids)
        third = collector.collect(device_ids=device_ids)

        assert samples(gpu_b) == first.devices[1].samples
        assert (
            Readings(
                devices=(
                    DeviceReading(UUID_A, identity(GPU_A, "0000:17:00.0"), samples(GPU_A)),
                    DeviceReading(UUID_B, identity(gpu_b, "0000:b1:00.0"), ()),
                ),
                node_samples=errors(GPU_IS_LOST=2),
            )
            == third
        )

    def test_gpu_lost_mid_poll(self, fake_nvml: FakeNvml, collector: NvmlCollector) -> None:
        """A GPU lost halfway through its figures keeps what it answered before."""
        # Calls 1-6 succeed: handle, uuid, name, pci, minor, utilization; memory fails.
        gpu_b = FakeGpu(UUID_B, minor=1, pci="00000000:B1:00.0", lost_after=6)
        fake_nvml.configure(gpu_b, GPU_A)

        readings = collector.collect(device_ids=frozenset({UUID_A, UUID_B}))

        assert (
            Readings(
                devices=(
                    DeviceReading(UUID_A, identity(GPU_A, "0000:17:00.0"), samples(GPU_A)),
                    DeviceReading(
                        UUID_B, identity(gpu_b, "0000:b1:00.0"), (Sample(GPU_UTILIZATION, 0.85),)
                    ),
                ),
                node_samples=errors(GPU_IS_LOST=1),
            )
            == readings
        )

    def test_gpu_lost_from_the_start_is_skipped(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A GPU lost before its UUID was ever read has no reading; the error is counted."""
        flag = tmp_path / "lost"
        flag.touch()
        fake_nvml.configure(FakeGpu(UUID_B, minor=1, lost_flag=flag), GPU_A)

        readings = collector.collect(device_ids=frozenset({UUID_A, UUID_B}))

        assert (
            Readings(
                devices=(DeviceReading(UUID_A, identity(GPU_A, "0000:17:00.0"), samples(GPU_A)),),
                node_samples=errors(GPU_IS_LOST=1),
            )
            == readings
        )


class TestLibrary:
    def test_driver_not_loaded_is_unavailable_then_retried(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """No driver means unavailable, not failed; nvmlInit is tried again next poll."""
        with pytest.raises(CollectorUnavailable, match="driver is not loaded"):
            collector.collect(device_ids=frozenset())

        fake_nvml.configure(GPU_A)
        readings = collector.collect(device_ids=frozenset())

        expected = (UUID_A,)
        assert expected == tuple(d.device_id for d in readings.devices)

    def test_other_init_failure_is_an_error(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """An nvmlInit failure other than a missing driver fails the collector."""
        fake_nvml.configure(GPU_A, init_error=UNKNOWN)

        with pytest.raises(CollectorError, match="nvmlInit failed: UNKNOWN") as raised:
            collector.collect(device_ids=frozenset())

        assert not isinstance(raised.value, CollectorUnavailable)

    def test_initialises_once_and_shuts_down_on_close(
        self, fake_nvml: FakeNvml, fake_nvml_library: FakeNvmlLibrary
    ) -> None:
        """nvmlInit runs on the first poll only; close() calls nvmlShutdown."""
        fake_nvml.configure(GPU_A)
        before = fake_nvml_library.init_count()
        collector = NvmlCollector(CollectorContext())

        collector.collect(device_ids=frozenset())
        collector.collect(device_ids=frozenset())
        during = fake_nvml_library.init_count()
        collector.close()

        assert (before + 1, before) == (during, fake_nvml_library.init_count())

    @pytest.mark.parametrize(
        "struct",
        [
            "nvmlPciInfo_t",
            "c_nvmlMemory_t",
            "c_nvmlMemory_v2_t",
            "c_nvmlUtilization_t",
            "c_nvmlTemperature_v1_t",
        ],
    )
    def test_fake_structs_match_pynvml(
        self, fake_nvml_library: FakeNvmlLibrary, struct: str
    ) -> None:
        """The fake's C structures have the size of pynvml's ctypes Structures."""
        assert ctypes.sizeof(getattr(pynvml, struct)) == fake_nvml_library.struct_size(struct)

    def test_no_library_is_unavailable(self) -> None:
        """Without libnvidia-ml.so.1 at all, the collector is unavailable, not failed."""
        # A fresh process: this one already has the fake loaded.
        script = """
import ctypes, json
try:
    ctypes.CDLL("libnvidia-ml.so.1")
except OSError:
    pass
else:
    print(json.dumps({"real_nvml": True}))
    raise SystemExit
from exporter.collectors.base import CollectorContext, CollectorUnavailable
from exporter.collectors.nvml import NvmlCollector
try:
    NvmlCollector(CollectorContext()).collect(device_ids=frozenset())
except CollectorUnavailable as error:
    print(json.dumps({"unavailable": str(error)}))
"""
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in {"LD_LIBRARY_PATH", "LD_PRELOAD", "FAKE_NVML_CONFIG"}
        }
        env["PYTHONPATH"] = str(REPO_ROOT)
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=env,
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        result = json.loads(done.stdout)
        if result.get("real_nvml"):
            pytest.skip("this host has a real libnvidia-ml.so.1: no library cannot be shown")

        expected = {"unavailable": "libnvidia-ml.so.1 not found: no NVIDIA driver on this node"}
        assert expected == result
