"""The drm collector reads AMD and Intel GPUs from a sysfs tree shaped like the kernel's."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from exporter.collectors.base import CollectorContext, CollectorUnavailable
from exporter.collectors.drm import (
    DrmCard,
    DrmCollector,
    card_readings,
    card_samples,
    parse_card_name,
    parse_intel_card_id,
    read_drm_card,
)
from exporter.collectors.gpu_metrics import (
    GPU_ENERGY,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_SM_CLOCK,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
)
from exporter.model import DeviceIdentity, DeviceReading, Readings, Sample
from exporter.sim.fixtures import drm as drm_fixture
from exporter.sim.fixtures import pci as pci_fixture
from exporter.sim.fixtures.pci import pci_device_dir, replace_symlink, write_attribute
from exporter.sim.hardware import GIB, SimDrmGpu, SimGpu, SimHardware, SimNumaNode

AMD_ADDRESS = "0000:e1:00.0"
INTEL_ADDRESS = "0000:e9:00.0"
AMD_IDENTITY = DeviceIdentity(pci_address=AMD_ADDRESS, model="AMD Instinct MI300X", vendor="amd")
INTEL_IDENTITY = DeviceIdentity(
    pci_address=INTEL_ADDRESS, model="Intel Data Center GPU Max 1550", vendor="intel"
)
# What the hand-written cards below hold, converted to base units.
AMD_SAMPLES = (
    Sample(GPU_UTILIZATION, 0.55),
    Sample(GPU_MEMORY_USED, 1073741824.0),
    Sample(GPU_MEMORY_TOTAL, 206158430208.0),
    Sample(GPU_POWER, 312.5),
    Sample(GPU_TEMPERATURE, 45.0),
    Sample(GPU_SM_CLOCK, 2100000000.0),
)
INTEL_SAMPLES = (
    Sample(GPU_MEMORY_USED, 8589934592.0),
    Sample(GPU_MEMORY_TOTAL, 68719476736.0),
    Sample(GPU_ENERGY, 123456.789),
    Sample(GPU_SM_CLOCK, 1400000000.0),
)


AMD_CARD = DrmCard(
    card=1,
    pci_address=AMD_ADDRESS,
    vendor="amd",
    model="AMD Instinct MI300X",
    utilization_ratio=0.55,
    memory_used_bytes=1073741824.0,
    memory_total_bytes=206158430208.0,
    power_watts=312.5,
    temperature_celsius=45.0,
    clock_hertz=2100000000.0,
)
INTEL_CARD = DrmCard(
    card=2,
    pci_address=INTEL_ADDRESS,
    vendor="intel",
    model="Intel Data Center GPU Max 1550",
    memory_used_bytes=8589934592.0,
    memory_total_bytes=68719476736.0,
    energy_joules=123456.789,
    clock_hertz=1400000000.0,
)


def _pci_function(sysfs: Path, address: str, vendor: str, device: str) -> Path:
    device_dir = pci_device_dir(sysfs, address)
    write_attribute(device_dir / "vendor", f"{vendor}\n")
    write_attribute(device_dir / "device", f"{device}\n")
    return device_dir


def _card(sysfs: Path, card: int, device_dir: Path) -> Path:
    """A class/drm/cardN directory (the simple layout) whose device link names the function."""
    card_dir = sysfs / "class" / "drm" / f"card{card}"
    card_dir.mkdir(parents=True, exist_ok=True)
    replace_symlink(card_dir / "device", device_dir)
    return card_dir


def _amd(sysfs: Path, card: int = 1, address: str = AMD_ADDRESS) -> Path:
    """An MI300X as amdgpu shows it; returns its PCI device directory."""
    device_dir = _pci_function(sysfs, address, "0x1002", "0x74a1")
    write_attribute(device_dir / "gpu_busy_percent", "55\n")
    write_attribute(device_dir / "mem_info_vram_used", "1073741824\n")
    write_attribute(device_dir / "mem_info_vram_total", "206158430208\n")
    hwmon = device_dir / "hwmon" / "hwmon3"
    write_attribute(hwmon / "name", "amdgpu\n")
    write_attribute(hwmon / "power1_average", "312500000\n")
    write_attribute(hwmon / "temp1_input", "45000\n")
    write_attribute(hwmon / "freq1_input", "2100000000\n")
    _card(sysfs, card, device_dir)
    return device_dir


def _i915(sysfs: Path, card: int = 2, address: str = INTEL_ADDRESS) -> Path:
    """A Max 1550 as Intel's i915 backport shows it; returns its card directory."""
    device_dir = _pci_function(sysfs, address, "0x8086", "0x0bd5")
    write_attribute(device_dir / "hwmon" / "hwmon4" / "name", "i915\n")
    write_attribute(device_dir / "hwmon" / "hwmon4" / "energy1_input", "123456789000\n")
    card_dir = _card(sysfs, card, device_dir)
    write_attribute(card_dir / "gt_act_freq_mhz", "1400\n")
    write_attribute(card_dir / "gt_cur_freq_mhz", "1450\n")
    write_attribute(card_dir / "lmem_total_bytes", "68719476736\n")
    write_attribute(card_dir / "lmem_avail_bytes", "60129542144\n")
    return card_dir


def _collect(sysfs: Path, *device_ids: str) -> Readings:
    return DrmCollector(CollectorContext(sysfs=sysfs)).collect(device_ids=frozenset(device_ids))


class TestParse:
    @pytest.mark.parametrize(
        ("name", "expected"),
        [
            ("card0", 0),
            ("card12", 12),
            ("card0-DP-1", None),
            ("card1-HDMI-A-2", None),
            ("renderD128", None),
            ("version", None),
        ],
    )
    def test_card_name(self, name: str, expected: int | None) -> None:
        """Only cardN entries are cards; connectors and render nodes are not."""
        assert expected == parse_card_name(name)

    @pytest.mark.parametrize(
        ("device_id", "expected"),
        [
            ("card1-0", 1),
            ("card1-3", 1),
            ("card10", 10),
            ("card1-DP-1", None),
            ("0000:e9:00.0", None),
            ("GPU-1", None),
        ],
    )
    def test_intel_card_id(self, device_id: str, expected: int | None) -> None:
        """Intel plugin IDs cardN-M and cardN name card N whatever the share index."""
        assert expected == parse_intel_card_id(device_id)


class TestCardReadings:
    def test_pci_and_card_ids_match_and_others_fall_back(self) -> None:
        """Each kubelet ID naming a card gets its own reading; unnamed cards use the address."""
        amd = DrmCard(1, AMD_ADDRESS, "amd", "AMD Instinct MI300X", utilization_ratio=0.5)
        intel = DrmCard(2, INTEL_ADDRESS, "intel", clock_hertz=1e9)
        ids = frozenset({"card2-1", "card2-0", "GPU-1", "card7-0"})

        intel_identity = DeviceIdentity(pci_address=INTEL_ADDRESS, vendor="intel")
        intel_samples = (Sample(GPU_SM_CLOCK, 1e9),)
        expected = (
            DeviceReading(AMD_ADDRESS, AMD_IDENTITY, (Sample(GPU_UTILIZATION, 0.5),)),
            DeviceReading("card2-0", intel_identity, intel_samples),
            DeviceReading("card2-1", intel_identity, intel_samples),
        )
        assert expected == card_readings([intel, amd], ids)

    def test_upper_case_pci_id_keeps_the_kubelet_spelling(self) -> None:
        """A PCI ID in upper case matches, and the reading carries the kubelet's spelling."""
        amd = DrmCard(1, AMD_ADDRESS, "amd")

        identity = DeviceIdentity(pci_address=AMD_ADDRESS, vendor="amd")
        expected = (DeviceReading("0000:E1:00.0", identity),)
        assert expected == card_readings([amd], frozenset({"0000:E1:00.0"}))

    def test_absent_figures_give_no_samples(self) -> None:
        """A card exposing nothing has no samples, not zeros."""
        expected: tuple[Sample, ...] = ()
        assert expected == card_samples(DrmCard(1, AMD_ADDRESS, "amd"))


class TestReadDrmCard:
    def test_amd_units_are_converted(self, tmp_path: Path) -> None:
        """Percent, microwatts, millidegrees and hertz become ratio, watts, celsius, hertz."""
        _amd(tmp_path)

        errors: list[str] = []
        actual = read_drm_card(tmp_path / "class" / "drm" / "card1", 1, errors=errors)
        expected: tuple[DrmCard, list[str]] = (AMD_CARD, [])
        assert expected == (actual, errors)

    def test_amd_fallbacks(self, tmp_path: Path) -> None:
        """power1_input and temp2_input (junction) stand in where the first files are absent."""
        hwmon = _amd(tmp_path) / "hwmon" / "hwmon3"
        (hwmon / "power1_average").unlink()
        (hwmon / "temp1_input").unlink()
        write_attribute(hwmon / "power1_input", "400000000\n")
        write_attribute(hwmon / "temp2_input", "-5500\n")
        write_attribute(hwmon / "energy1_input", "2000000\n")

        expected = replace(AMD_CARD, power_watts=400.0, temperature_celsius=-5.5, energy_joules=2.0)
        assert expected == read_drm_card(tmp_path / "class" / "drm" / "card1", 1, errors=[])

    def test_hwmon_of_the_driver_is_chosen(self, tmp_path: Path) -> None:
        """Where several hwmon directories exist, the one named after the driver is read."""
        device_dir = _amd(tmp_path)
        other = device_dir / "hwmon" / "hwmon1"
        write_attribute(other / "name", "nvme\n")
        write_attribute(other / "power1_average", "1000000\n")

        expected = AMD_CARD  # not the nvme sensor's 1 W
        assert expected == read_drm_card(tmp_path / "class" / "drm" / "card1", 1, errors=[])

    def test_i915_reads_card_files(self, tmp_path: Path) -> None:
        """i915: GT frequency and local memory from the card, energy from hwmon."""
        _i915(tmp_path)

        expected = INTEL_CARD
        assert expected == read_drm_card(tmp_path / "class" / "drm" / "card2", 2, errors=[])

    def test_i915_requested_frequency_stands_in(self, tmp_path: Path) -> None:
        """Without gt_act_freq_mhz the requested gt_cur_freq_mhz is the clock."""
        card_dir = _i915(tmp_path)
        (card_dir / "gt_act_freq_mhz").unlink()

        expected = replace(INTEL_CARD, clock_hertz=1450000000.0)
        assert expected == read_drm_card(card_dir, 2, errors=[])

    def test_xe_tiles_and_package_channel(self, tmp_path: Path) -> None:
        """xe: VRAM summed over tiles, clock from tile0/gt0, package energy and temperature."""
        device_dir = _pci_function(tmp_path, "0000:03:00.0", "0x8086", "0xe20b")
        write_attribute(device_dir / "tile0" / "physical_vram_size_bytes", "12884901888\n")
        write_attribute(device_dir / "tile1" / "physical_vram_size_bytes", "12884901888\n")
        write_attribute(device_dir / "tile0" / "gt0" / "freq0" / "act_freq", "2850\n")
        hwmon = device_dir / "hwmon" / "hwmon2"
        write_attribute(hwmon / "name", "xe\n")
        write_attribute(hwmon / "energy2_input", "5000000\n")
        write_attribute(hwmon / "temp2_input", "51000\n")
        _card(tmp_path, 0, device_dir)

        expected = DrmCard(
            card=0,
            pci_address="0000:03:00.0",
            vendor="intel",
            memory_total_bytes=25769803776.0,
            energy_joules=5.0,
            temperature_celsius=51.0,
            clock_hertz=2850000000.0,
        )
        assert expected == read_drm_card(tmp_path / "class" / "drm" / "card0", 0, errors=[])

    def test_vendor_from_driver_link_without_vendor_file(self, tmp_path: Path) -> None:
        """Without a vendor file the driver link decides: amdgpu is AMD."""
        device_dir = _amd(tmp_path)
        (device_dir / "vendor").unlink()
        driver_dir = tmp_path / "bus" / "pci" / "drivers" / "amdgpu"
        driver_dir.mkdir(parents=True)
        replace_symlink(device_dir / "driver", driver_dir)

        expected = replace(AMD_CARD, model=None)  # the model needs the PCI vendor ID
        assert expected == read_drm_card(tmp_path / "class" / "drm" / "card1", 1, errors=[])

    def test_other_vendors_are_skipped(self, tmp_path: Path) -> None:
        """nvidia-drm and the BMC's ast card are not read: NVIDIA has its own collector."""
        _card(tmp_path, 0, _pci_function(tmp_path, "0000:02:00.0", "0x1a03", "0x2000"))
        _card(tmp_path, 1, _pci_function(tmp_path, "0000:17:00.0", "0x10de", "0x2330"))

        drm = tmp_path / "class" / "drm"
        expected = (None, None)
        assert expected == (
            read_drm_card(drm / "card0", 0, errors=[]),
            read_drm_card(drm / "card1", 1, errors=[]),
        )

    def test_non_pci_card_is_skipped(self, tmp_path: Path) -> None:
        """A card whose device is not a PCI function (simpledrm, vkms) is skipped."""
        platform = tmp_path / "devices" / "platform" / "simple-framebuffer.0"
        platform.mkdir(parents=True)
        _card(tmp_path, 0, platform)

        assert read_drm_card(tmp_path / "class" / "drm" / "card0", 0, errors=[]) is None


class TestDrmCollector:
    def test_fixture_tree_round_trip(self, tmp_path: Path) -> None:
        """Cards written by the fixture writers read back as drm_telemetry predicts."""
        amd = SimDrmGpu(1, "amdgpu", AMD_ADDRESS, "0x1002", "0x74a1", 1, 192 * GIB, 0.55)
        intel = SimDrmGpu(2, "i915", INTEL_ADDRESS, "0x8086", "0x0bd5", 1, 64 * GIB, 0.3)
        hardware = SimHardware(
            numa_nodes=(SimNumaNode(0, (0, 1), GIB, 0, 0),),
            gpus=(SimGpu(0, "GPU-1", "0000:17:00.0", "H100", 0, 80 * GIB, 700.0, 0.5),),
            drm_gpus=(amd, intel),
        )
        pci_fixture.write(tmp_path, hardware, tick=4)
        drm_fixture.write(tmp_path, hardware, tick=4)
        a = drm_fixture.drm_telemetry(amd, tick=4)
        i = drm_fixture.drm_telemetry(intel, tick=4)

        amd_samples = (
            Sample(GPU_UTILIZATION, a.busy_percent / 100),
            Sample(GPU_MEMORY_USED, float(a.vram_used_bytes)),
            Sample(GPU_MEMORY_TOTAL, float(a.vram_total_bytes)),
            Sample(GPU_POWER, a.power_microwatts / 1_000_000),
            Sample(GPU_TEMPERATURE, a.temperature_millicelsius / 1000),
            Sample(GPU_SM_CLOCK, a.clock_mhz * 1_000_000.0),
        )
        intel_samples = (
            Sample(GPU_MEMORY_USED, float(i.vram_used_bytes)),
            Sample(GPU_MEMORY_TOTAL, float(i.vram_total_bytes)),
            Sample(GPU_ENERGY, i.energy_microjoules / 1_000_000),
            Sample(GPU_SM_CLOCK, i.clock_mhz * 1_000_000.0),
        )
        expected = Readings(
            devices=(
                DeviceReading(AMD_ADDRESS, AMD_IDENTITY, amd_samples),
                DeviceReading("card2-0", INTEL_IDENTITY, intel_samples),
                DeviceReading("card2-1", INTEL_IDENTITY, intel_samples),
            )
        )
        assert expected == _collect(tmp_path, AMD_ADDRESS, "card2-0", "card2-1", "GPU-1")

    def test_unmatched_cards_use_their_address(self, tmp_path: Path) -> None:
        """Cards no kubelet ID names are reported under their PCI address."""
        _amd(tmp_path)
        _i915(tmp_path)

        expected = Readings(
            devices=(
                DeviceReading(AMD_ADDRESS, AMD_IDENTITY, AMD_SAMPLES),
                DeviceReading(INTEL_ADDRESS, INTEL_IDENTITY, INTEL_SAMPLES),
            )
        )
        assert expected == _collect(tmp_path)

    def test_connectors_and_render_nodes_are_skipped(self, tmp_path: Path) -> None:
        """card1-DP-1, renderD128 and the version file are not cards."""
        device_dir = _amd(tmp_path)
        drm = tmp_path / "class" / "drm"
        (drm / "card1-DP-1").mkdir()
        replace_symlink(drm / "card1-DP-1" / "device", device_dir)
        (drm / "renderD128").mkdir()
        replace_symlink(drm / "renderD128" / "device", device_dir)
        write_attribute(drm / "version", "drm 1.1.0 20060810\n")

        expected = Readings(devices=(DeviceReading(AMD_ADDRESS, AMD_IDENTITY, AMD_SAMPLES),))
        assert expected == _collect(tmp_path)

    def test_missing_optional_files_leave_figures_absent(self, tmp_path: Path) -> None:
        """An AMD card without busy percent or hwmon reports only its memory, silently."""
        device_dir = _amd(tmp_path)
        (device_dir / "gpu_busy_percent").unlink()
        shutil.rmtree(device_dir / "hwmon")

        with capture_logs() as logs:
            readings = _collect(tmp_path)

        samples = (Sample(GPU_MEMORY_USED, 1073741824.0), Sample(GPU_MEMORY_TOTAL, 206158430208.0))
        expected = Readings(devices=(DeviceReading(AMD_ADDRESS, AMD_IDENTITY, samples),))
        assert (expected, []) == (readings, logs)

    def test_garbage_drops_the_figure_and_logs_once(self, tmp_path: Path) -> None:
        """Garbage in one file drops that figure only, logged once while it lasts."""
        device_dir = _amd(tmp_path)
        write_attribute(device_dir / "mem_info_vram_used", "lots\n")
        write_attribute(device_dir / "gpu_busy_percent", "150\n")
        collector = DrmCollector(CollectorContext(sysfs=tmp_path))

        with capture_logs() as logs:
            first = collector.collect(device_ids=frozenset())
            second = collector.collect(device_ids=frozenset())

        card_device = tmp_path / "class" / "drm" / "card1" / "device"
        samples = tuple(s for s in AMD_SAMPLES if s.spec not in (GPU_UTILIZATION, GPU_MEMORY_USED))
        expected = Readings(devices=(DeviceReading(AMD_ADDRESS, AMD_IDENTITY, samples),))
        expected_errors = [
            f"{card_device / 'gpu_busy_percent'}: above 100 percent",
            f"{card_device / 'mem_info_vram_used'}: not an integer: 'lots'",
        ]
        assert (expected, expected, expected_errors) == (
            first,
            second,
            [entry["error"] for entry in logs if entry["event"] == "drm_read_error"],
        )

    def test_negative_counter_is_garbage(self, tmp_path: Path) -> None:
        """A negative energy counter is refused; a negative temperature is not."""
        card_dir = _i915(tmp_path)
        hwmon = card_dir / "device" / "hwmon" / "hwmon4"
        write_attribute(hwmon / "energy1_input", "-1\n")

        with capture_logs() as logs:
            readings = _collect(tmp_path)

        samples = tuple(s for s in INTEL_SAMPLES if s.spec is not GPU_ENERGY)
        expected = Readings(devices=(DeviceReading(INTEL_ADDRESS, INTEL_IDENTITY, samples),))
        assert (expected, [f"{hwmon / 'energy1_input'}: negative: -1"]) == (
            readings,
            [entry["error"] for entry in logs],
        )

    def test_cards_vanishing_between_polls(self, tmp_path: Path) -> None:
        """A card removed after one poll, or left as a dangling link, is absent next time."""
        amd_device = _amd(tmp_path)
        _i915(tmp_path)
        _amd(tmp_path, card=3, address="0000:e2:00.0")
        collector = DrmCollector(CollectorContext(sysfs=tmp_path))
        first = collector.collect(device_ids=frozenset({AMD_ADDRESS, "card2-0"}))
        shutil.rmtree(tmp_path / "class" / "drm" / "card2")
        shutil.rmtree(amd_device)  # card1's device link now dangles

        with capture_logs() as logs:
            second = collector.collect(device_ids=frozenset({AMD_ADDRESS, "card2-0"}))

        third_identity = DeviceIdentity(
            pci_address="0000:e2:00.0", model="AMD Instinct MI300X", vendor="amd"
        )
        third = DeviceReading("0000:e2:00.0", third_identity, AMD_SAMPLES)
        assert (
            Readings(
                devices=(
                    DeviceReading(AMD_ADDRESS, AMD_IDENTITY, AMD_SAMPLES),
                    DeviceReading("card2-0", INTEL_IDENTITY, INTEL_SAMPLES),
                    third,
                )
            ),
            Readings(devices=(third,)),
            [],
        ) == (first, second, logs)

    def test_kernel_link_text_is_followed(self, tmp_path: Path) -> None:
        """A device link written as the kernel does (../../../<address>) names the address."""
        device_dir = _amd(tmp_path)
        link = tmp_path / "class" / "drm" / "card1" / "device"
        link.unlink()
        card_dir = device_dir / "drm" / "card1"
        card_dir.mkdir(parents=True)
        os.symlink(f"../../../{AMD_ADDRESS}", card_dir / "device")
        shutil.rmtree(tmp_path / "class" / "drm" / "card1")
        replace_symlink(tmp_path / "class" / "drm" / "card1", card_dir)

        expected = Readings(devices=(DeviceReading(AMD_ADDRESS, AMD_IDENTITY, AMD_SAMPLES),))
        assert expected == _collect(tmp_path)

    def test_no_amd_or_intel_card_is_empty(self, tmp_path: Path) -> None:
        """A DRM class with only other vendors' cards gives no readings."""
        _card(tmp_path, 0, _pci_function(tmp_path, "0000:02:00.0", "0x1a03", "0x2000"))

        assert Readings() == _collect(tmp_path)

    def test_no_drm_class_is_unavailable(self, tmp_path: Path) -> None:
        """Without /sys/class/drm the collector reports the source absent."""
        with pytest.raises(CollectorUnavailable, match=r"class/drm: no DRM driver loaded"):
            _collect(tmp_path)
