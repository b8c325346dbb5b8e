"""The drm collector reads AMD and Intel GPUs from a sysfs tree shaped like the kernel's.

Every card is laid out as the kernel does it (``drivers/gpu/drm/drm_sysfs.c``):
``class/drm/cardN`` links to ``<pci device>/drm/cardN``, whose ``device`` link reads
``../../../<address>``, and the PCI device's ``drm/`` also holds the render node
``renderD<minor>``; libdrm's ``drmGetMinorNameForFD`` finds render nodes there too.
The captured VM has no DRM device at all, so no captured tree can check this layout:
it was checked against the kernel source and libdrm instead.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from oserrors import fail_reads

from exporter.collectors.base import CollectorContext, CollectorUnavailable, issue
from exporter.collectors.drm import (
    REGISTRATION,
    DrmCard,
    DrmCollector,
    card_reading,
    card_samples,
    parse_card_name,
    parse_render_name,
    read_drm_card,
)
from exporter.collectors.gpu_metrics import (
    GPU_ENERGY,
    GPU_MEMORY_BANDWIDTH_UTILIZATION,
    GPU_MEMORY_TEMPERATURE,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_POWER,
    GPU_SM_CLOCK,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
)
from exporter.model import (
    CollectorIssue,
    DeviceIdentity,
    DeviceReading,
    HardwareKey,
    KeyKind,
    Readings,
    Sample,
)
from exporter.sim.fixtures import drm as drm_fixture
from exporter.sim.fixtures import pci as pci_fixture
from exporter.sim.fixtures.pci import pci_device_dir, replace_symlink, write_attribute
from exporter.sim.hardware import GIB, SimDrmGpu, SimGpu, SimHardware, SimNumaNode

CAPTURED = Path(__file__).parents[1] / "fixtures" / "captured" / "vm-virtio-2cpu"
AMD_ADDRESS = "0000:e1:00.0"
INTEL_ADDRESS = "0000:e9:00.0"
AMD_IDENTITY = DeviceIdentity(pci_address=AMD_ADDRESS, model="AMD Instinct MI300X", vendor="amd")
INTEL_IDENTITY = DeviceIdentity(
    pci_address=INTEL_ADDRESS, model="Intel Data Center GPU Max 1550", vendor="intel"
)
# What the hand-written cards below hold, converted to base units.
AMD_SAMPLES = (
    Sample(GPU_UTILIZATION, 0.55),
    Sample(GPU_MEMORY_BANDWIDTH_UTILIZATION, 0.3),
    Sample(GPU_MEMORY_USED, 1073741824.0),
    Sample(GPU_MEMORY_TOTAL, 206158430208.0),
    Sample(GPU_POWER, 312.5),
    Sample(GPU_TEMPERATURE, 45.0),
    Sample(GPU_MEMORY_TEMPERATURE, 52.0),
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
    render=129,
    pci_address=AMD_ADDRESS,
    vendor="amd",
    model="AMD Instinct MI300X",
    utilization_ratio=0.55,
    memory_bandwidth_utilization_ratio=0.3,
    memory_used_bytes=1073741824.0,
    memory_total_bytes=206158430208.0,
    power_watts=312.5,
    temperature_celsius=45.0,
    memory_temperature_celsius=52.0,
    clock_hertz=2100000000.0,
)
INTEL_CARD = DrmCard(
    card=2,
    render=130,
    pci_address=INTEL_ADDRESS,
    vendor="intel",
    model="Intel Data Center GPU Max 1550",
    memory_used_bytes=8589934592.0,
    memory_total_bytes=68719476736.0,
    energy_joules=123456.789,
    clock_hertz=1400000000.0,
)


def _keys(card: int, render: int, address: str) -> tuple[HardwareKey, ...]:
    return (
        HardwareKey(KeyKind.DRM_CARD, str(card)),
        HardwareKey(KeyKind.DRM_RENDER, str(render)),
        HardwareKey(KeyKind.PCI, address),
    )


AMD_READING = DeviceReading(
    AMD_ADDRESS, _keys(1, 129, AMD_ADDRESS), AMD_IDENTITY, AMD_SAMPLES, standalone=True
)
INTEL_READING = DeviceReading(
    INTEL_ADDRESS, _keys(2, 130, INTEL_ADDRESS), INTEL_IDENTITY, INTEL_SAMPLES, standalone=True
)


def _pci_function(sysfs: Path, address: str, vendor: str, device: str) -> Path:
    device_dir = pci_device_dir(sysfs, address)
    write_attribute(device_dir / "vendor", f"{vendor}\n")
    write_attribute(device_dir / "device", f"{device}\n")
    return device_dir


def _card(sysfs: Path, card: int, device_dir: Path, *, render: int | None = None) -> Path:
    """cardN and its render node (minor 128 + N unless told) below the device, as the
    kernel lays them out; returns the ``class/drm/cardN`` link."""
    render = 128 + card if render is None else render
    for name in (f"card{card}", f"renderD{render}"):
        minor_dir = device_dir / "drm" / name
        minor_dir.mkdir(parents=True, exist_ok=True)
        link = minor_dir / "device"
        link.unlink(missing_ok=True)
        os.symlink(f"../../../{device_dir.name}", link)  # the kernel's own link text
        replace_symlink(sysfs / "class" / "drm" / name, minor_dir)
    return sysfs / "class" / "drm" / f"card{card}"


def _amd(sysfs: Path, card: int = 1, address: str = AMD_ADDRESS) -> Path:
    """An MI300X as amdgpu shows it; returns its PCI device directory."""
    device_dir = _pci_function(sysfs, address, "0x1002", "0x74a1")
    write_attribute(device_dir / "gpu_busy_percent", "55\n")
    write_attribute(device_dir / "mem_busy_percent", "30\n")
    write_attribute(device_dir / "mem_info_vram_used", "1073741824\n")
    write_attribute(device_dir / "mem_info_vram_total", "206158430208\n")
    hwmon = device_dir / "hwmon" / "hwmon3"
    write_attribute(hwmon / "name", "amdgpu\n")
    write_attribute(hwmon / "power1_average", "312500000\n")
    write_attribute(hwmon / "temp1_input", "45000\n")
    write_attribute(hwmon / "temp3_input", "52000\n")  # its HBM, the "mem" channel
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


def _card_dir(sysfs: Path, card: int) -> Path:
    return sysfs / "class" / "drm" / f"card{card}"


def _collect(sysfs: Path) -> Readings:
    return DrmCollector(CollectorContext(sysfs=sysfs)).collect()


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
        ("name", "expected"),
        [("renderD128", 128), ("renderD191", 191), ("card0", None), ("renderD", None)],
    )
    def test_render_name(self, name: str, expected: int | None) -> None:
        """renderD<minor> entries give their minor; anything else None."""
        assert expected == parse_render_name(name)


class TestCardReading:
    def test_keys_identity_and_samples(self) -> None:
        """A card is named by its address, keyed by card, render minor and address, shown alone."""
        card = DrmCard(3, 131, AMD_ADDRESS, "amd", "AMD Instinct MI300X", utilization_ratio=0.5)

        expected = DeviceReading(
            AMD_ADDRESS,
            _keys(3, 131, AMD_ADDRESS),
            AMD_IDENTITY,
            (Sample(GPU_UTILIZATION, 0.5),),
            standalone=True,
        )
        assert expected == card_reading(card)

    def test_no_render_node_no_render_key(self) -> None:
        """A card without a render node is keyed by card and address only."""
        card = DrmCard(0, None, INTEL_ADDRESS, "intel")

        expected = (
            HardwareKey(KeyKind.DRM_CARD, "0"),
            HardwareKey(KeyKind.PCI, INTEL_ADDRESS),
        )
        assert expected == card_reading(card).keys

    @pytest.mark.parametrize("partition", ["dpx", "tpx", "qpx", "cpx"])
    def test_a_partitioned_card_is_keyed_by_its_address_only(self, partition: str) -> None:
        """A partitioned MI300X's card and render node are partition 0's, its figures the
        whole board's: the AMD DRA driver's gpu-<card>-<render> for partition 0 must not
        resolve to them. SPX (one partition, the whole board) keeps every key."""
        card = DrmCard(1, 129, AMD_ADDRESS, "amd", utilization_ratio=0.87)
        partitioned = replace(card, compute_partition=partition)
        assert (HardwareKey(KeyKind.PCI, AMD_ADDRESS),) == card_reading(partitioned).keys
        assert card_reading(partitioned).samples == card_reading(card).samples
        whole = replace(card, compute_partition="spx")
        assert _keys(1, 129, AMD_ADDRESS) == card_reading(whole).keys

    def test_absent_figures_give_no_samples(self) -> None:
        """A card exposing nothing has no samples, not zeros."""
        expected: tuple[Sample, ...] = ()
        assert expected == card_samples(DrmCard(1, 129, AMD_ADDRESS, "amd"))


class TestReadDrmCard:
    def test_amd_units_are_converted(self, tmp_path: Path) -> None:
        """Percent, microwatts, millidegrees and hertz become ratio, watts, celsius, hertz."""
        _amd(tmp_path)
        issues: list[CollectorIssue] = []

        actual = read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues)

        assert (AMD_CARD, []) == (actual, issues)

    def test_amd_fallbacks(self, tmp_path: Path) -> None:
        """power1_input and temp2_input (junction) stand in where the first files are absent."""
        hwmon = _amd(tmp_path) / "hwmon" / "hwmon3"
        (hwmon / "power1_average").unlink()
        (hwmon / "temp1_input").unlink()
        write_attribute(hwmon / "power1_input", "400000000\n")
        write_attribute(hwmon / "temp2_input", "-5500\n")
        write_attribute(hwmon / "energy1_input", "2000000\n")

        expected = replace(AMD_CARD, power_watts=400.0, temperature_celsius=-5.5, energy_joules=2.0)
        assert expected == read_drm_card(_card_dir(tmp_path, 1), 1, issues=[])

    def test_amd_power1_average_is_preferred(self, tmp_path: Path) -> None:
        """Where amdgpu gives both, power is the averaged power1_average, not the
        instantaneous power1_input that jumps between samples."""
        hwmon = _amd(tmp_path) / "hwmon" / "hwmon3"
        write_attribute(hwmon / "power1_input", "1000000\n")

        assert AMD_CARD == read_drm_card(_card_dir(tmp_path, 1), 1, issues=[])

    def test_a_fully_busy_amd_gpu_is_ratio_one(self, tmp_path: Path) -> None:
        """gpu_busy_percent 100 is utilization 1.0, not garbage dropped with an issue."""
        device_dir = _amd(tmp_path)
        write_attribute(device_dir / "gpu_busy_percent", "100\n")
        issues: list[CollectorIssue] = []

        actual = read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues)

        assert (replace(AMD_CARD, utilization_ratio=1.0), []) == (actual, issues)

    def test_just_above_100_percent_busy_is_garbage(self, tmp_path: Path) -> None:
        """gpu_busy_percent 101 is past the scale: no utilization, and an issue."""
        device_dir = _amd(tmp_path)
        write_attribute(device_dir / "gpu_busy_percent", "101\n")
        issues: list[CollectorIssue] = []

        actual = read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues)

        detail = f"{_card_dir(tmp_path, 1) / 'device' / 'gpu_busy_percent'}: above 100 percent"
        expected = (replace(AMD_CARD, utilization_ratio=None), [issue("garbage", detail)])
        assert expected == (actual, issues)

    def test_hwmon_of_the_driver_is_chosen(self, tmp_path: Path) -> None:
        """Where several hwmon directories exist, the one named after the driver is read."""
        device_dir = _amd(tmp_path)
        other = device_dir / "hwmon" / "hwmon1"
        write_attribute(other / "name", "nvme\n")
        write_attribute(other / "power1_average", "1000000\n")

        expected = AMD_CARD  # not the nvme sensor's 1 W
        assert expected == read_drm_card(_card_dir(tmp_path, 1), 1, issues=[])

    def test_mi300x_in_cpx_mode(self, tmp_path: Path) -> None:
        """CPX: the PCI function keeps card1/renderD129 for partition 0 and says its
        mode in current_compute_partition; partitions 1 and up are DRM devices of
        platform devices (amdgpu_xcp), skipped like any card of no PCI function."""
        device_dir = _amd(tmp_path)
        write_attribute(device_dir / "current_compute_partition", "CPX\n")
        for n in range(1, 8):
            platform = tmp_path / "devices" / "platform" / f"amdgpu_xcp.{n}"
            _card(tmp_path, 1 + n, platform, render=129 + n)

        readings = _collect(tmp_path)
        assert [r.keys for r in readings.devices] == [(HardwareKey(KeyKind.PCI, AMD_ADDRESS),)]
        assert readings.devices[0].samples == card_samples(AMD_CARD)
        assert readings.issues == ()

    def test_render_minor_is_read_not_derived(self, tmp_path: Path) -> None:
        """The render node is whatever sits beside the card, not 128 plus the card index."""
        device_dir = _pci_function(tmp_path, AMD_ADDRESS, "0x1002", "0x74a1")
        _card(tmp_path, 0, device_dir, render=133)

        expected = DrmCard(0, 133, AMD_ADDRESS, "amd", "AMD Instinct MI300X")
        assert expected == read_drm_card(_card_dir(tmp_path, 0), 0, issues=[])

    def test_card_without_render_node(self, tmp_path: Path) -> None:
        """A card whose device has no drm/ directory (old layout) has no render minor."""
        device_dir = _pci_function(tmp_path, AMD_ADDRESS, "0x1002", "0x74a1")
        card_dir = tmp_path / "class" / "drm" / "card0"
        card_dir.mkdir(parents=True)
        replace_symlink(card_dir / "device", device_dir)

        expected = DrmCard(0, None, AMD_ADDRESS, "amd", "AMD Instinct MI300X")
        assert expected == read_drm_card(card_dir, 0, issues=[])

    def test_i915_reads_card_files(self, tmp_path: Path) -> None:
        """i915: GT frequency and local memory from the card, energy from hwmon."""
        _i915(tmp_path)

        assert INTEL_CARD == read_drm_card(_card_dir(tmp_path, 2), 2, issues=[])

    def test_i915_local_memory_all_free_is_zero_used(self, tmp_path: Path) -> None:
        """An idle card whose lmem_avail_bytes equals lmem_total_bytes uses 0 bytes, not
        no figure and a garbage issue."""
        card_dir = _i915(tmp_path)
        write_attribute(card_dir / "lmem_avail_bytes", "68719476736\n")
        issues: list[CollectorIssue] = []

        actual = read_drm_card(card_dir, 2, issues=issues)

        assert (replace(INTEL_CARD, memory_used_bytes=0.0), []) == (actual, issues)

    def test_i915_requested_frequency_stands_in(self, tmp_path: Path) -> None:
        """Without gt_act_freq_mhz the requested gt_cur_freq_mhz is the clock."""
        card_dir = _i915(tmp_path)
        (card_dir / "gt_act_freq_mhz").unlink()

        expected = replace(INTEL_CARD, clock_hertz=1450000000.0)
        assert expected == read_drm_card(card_dir, 2, issues=[])

    @pytest.mark.parametrize(
        ("relative", "spec"),
        [
            ("gt_act_freq_mhz", "clock_hertz"),  # not the requested gt_cur_freq_mhz
            ("device/hwmon/hwmon4/energy1_input", "energy_joules"),  # nor the package's
        ],
    )
    def test_a_bad_first_choice_is_not_stood_in_for(
        self, tmp_path: Path, relative: str, spec: str
    ) -> None:
        """A first-choice file that is there but garbage loses its figure, with an
        issue: the next file is another figure, which would be served in its place."""
        card_dir = _i915(tmp_path)
        write_attribute(card_dir / "device/hwmon/hwmon4/energy2_input", "7000000\n")
        write_attribute(card_dir / relative, "junk\n")
        issues: list[CollectorIssue] = []

        actual = read_drm_card(card_dir, 2, issues=issues)

        detail = f"{card_dir / relative}: not a 64-bit integer: 'junk'"
        assert (replace(INTEL_CARD, **{spec: None}), [issue("garbage", detail)]) == (
            actual,
            issues,
        )

    def test_a_bad_edge_temperature_is_not_the_junction(self, tmp_path: Path) -> None:
        """amdgpu's temp1 (edge) unreadable: no temperature, not temp2 (junction)."""
        hwmon = _amd(tmp_path) / "hwmon" / "hwmon3"
        write_attribute(hwmon / "temp2_input", "90000\n")
        (hwmon / "temp1_input").unlink()
        (hwmon / "temp1_input").mkdir()
        issues: list[CollectorIssue] = []

        actual = read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues)

        assert (replace(AMD_CARD, temperature_celsius=None), ["unreadable"]) == (
            actual,
            [i.error for i in issues],
        )

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
            render=128,
            pci_address="0000:03:00.0",
            vendor="intel",
            memory_total_bytes=25769803776.0,
            energy_joules=5.0,
            temperature_celsius=51.0,
            clock_hertz=2850000000.0,
        )
        assert expected == read_drm_card(_card_dir(tmp_path, 0), 0, issues=[])

    def test_vendor_from_driver_link_without_vendor_file(self, tmp_path: Path) -> None:
        """Without a vendor file the driver link decides: amdgpu is AMD."""
        device_dir = _amd(tmp_path)
        (device_dir / "vendor").unlink()
        driver_dir = tmp_path / "bus" / "pci" / "drivers" / "amdgpu"
        driver_dir.mkdir(parents=True)
        replace_symlink(device_dir / "driver", driver_dir)

        expected = replace(AMD_CARD, model=None)  # the model needs the PCI vendor ID
        assert expected == read_drm_card(_card_dir(tmp_path, 1), 1, issues=[])

    def test_garbage_vendor_and_device_ids_are_issues(self, tmp_path: Path) -> None:
        """A vendor or device file that is no PCI ID is garbage, reported: the card is
        not dropped as another vendor's (the driver link decides, as without a vendor
        file), and only the model, which needs both IDs, is lost."""
        device_dir = _amd(tmp_path)
        write_attribute(device_dir / "vendor", "0x10zz\n")
        write_attribute(device_dir / "device", "lots\n")
        driver_dir = tmp_path / "bus" / "pci" / "drivers" / "amdgpu"
        driver_dir.mkdir(parents=True)
        replace_symlink(device_dir / "driver", driver_dir)
        issues: list[CollectorIssue] = []

        actual = read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues)

        card_device = _card_dir(tmp_path, 1) / "device"
        expected = [
            issue("garbage", f"{card_device / 'vendor'}: not a hex number: '0x10zz'"),
            issue("garbage", f"{card_device / 'device'}: not a 0x-prefixed hex number: 'lots'"),
        ]
        assert (replace(AMD_CARD, model=None), expected) == (actual, issues)

    def test_other_vendors_are_skipped(self, tmp_path: Path) -> None:
        """nvidia-drm and the BMC's ast card are not read: NVIDIA has its own collector."""
        _card(tmp_path, 0, _pci_function(tmp_path, "0000:02:00.0", "0x1a03", "0x2000"))
        _card(tmp_path, 1, _pci_function(tmp_path, "0000:17:00.0", "0x10de", "0x2330"))
        issues: list[CollectorIssue] = []

        actual = (
            read_drm_card(_card_dir(tmp_path, 0), 0, issues=issues),
            read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues),
        )

        assert ((None, None), []) == (actual, issues)

    def test_a_card_in_a_vmd_domain_is_read(self, tmp_path: Path) -> None:
        """A GPU in an Intel VMD domain (from 0x10000, printed whole: 10000:e1:00.0) is
        read: it was skipped, its device taken for no PCI function."""
        _amd(tmp_path, address="10000:e1:00.0")
        issues: list[CollectorIssue] = []

        actual = read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues)

        assert (replace(AMD_CARD, pci_address="10000:e1:00.0"), []) == (actual, issues)

    def test_non_pci_card_is_skipped(self, tmp_path: Path) -> None:
        """A card whose device is not a PCI function (simpledrm, vkms) is skipped silently."""
        platform = tmp_path / "devices" / "platform" / "simple-framebuffer.0"
        platform.mkdir(parents=True)
        _card(tmp_path, 0, platform)
        issues: list[CollectorIssue] = []

        assert (None, []) == (read_drm_card(_card_dir(tmp_path, 0), 0, issues=issues), issues)

    def test_xe_driver_link_without_vendor_file(self, tmp_path: Path) -> None:
        """Without a vendor file a card bound to xe is Intel's."""
        device_dir = pci_device_dir(tmp_path, "0000:03:00.0")
        driver_dir = tmp_path / "bus" / "pci" / "drivers" / "xe"
        driver_dir.mkdir(parents=True)
        replace_symlink(device_dir / "driver", driver_dir)
        _card(tmp_path, 0, device_dir)

        expected = DrmCard(0, 128, "0000:03:00.0", "intel")
        assert expected == read_drm_card(_card_dir(tmp_path, 0), 0, issues=[])

    def test_driver_link_loop_without_vendor_file_is_skipped(self, tmp_path: Path) -> None:
        """No vendor file and a looping driver link: whose card it is is unknown, so it
        is skipped, without an issue (the driver link is optional)."""
        device_dir = pci_device_dir(tmp_path, "0000:03:00.0")
        device_dir.mkdir(parents=True)
        os.symlink("driver", device_dir / "driver")
        _card(tmp_path, 0, device_dir)
        issues: list[CollectorIssue] = []

        assert (None, []) == (read_drm_card(_card_dir(tmp_path, 0), 0, issues=issues), issues)

    def test_spx_card_keeps_its_card_and_render_keys(self, tmp_path: Path) -> None:
        """amdgpu writes the mode upper-case (``SPX``): one partition, the whole board,
        keyed by card and render node as an unpartitioned card is."""
        device_dir = _amd(tmp_path)
        write_attribute(device_dir / "current_compute_partition", "SPX\n")

        assert Readings(devices=(AMD_READING,)) == _collect(tmp_path)

    def test_an_amd_gpu_without_a_memory_sensor_has_no_memory_temperature(
        self, tmp_path: Path
    ) -> None:
        """An APU (no VRAM) has no temp3: no figure, and no issue."""
        (_amd(tmp_path) / "hwmon" / "hwmon3" / "temp3_input").unlink()
        issues: list[CollectorIssue] = []

        actual = read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues)

        assert (replace(AMD_CARD, memory_temperature_celsius=None), []) == (actual, issues)

    def test_the_junction_never_stands_in_for_the_memory(self, tmp_path: Path) -> None:
        """Without temp3 (mem), no memory temperature: temp2 is the junction's, a GPU
        figure, whatever else is there."""
        hwmon = _amd(tmp_path) / "hwmon" / "hwmon3"
        (hwmon / "temp3_input").unlink()
        write_attribute(hwmon / "temp2_input", "61000\n")
        issues: list[CollectorIssue] = []

        actual = read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues)

        assert (replace(AMD_CARD, memory_temperature_celsius=None), []) == (actual, issues)

    def test_amd_memory_temperature_below_zero_is_a_reading(self, tmp_path: Path) -> None:
        """temp3_input is signed millidegrees, as temp1 and temp2 are: below 0 °C is a
        figure, not garbage."""
        write_attribute(_amd(tmp_path) / "hwmon" / "hwmon3" / "temp3_input", "-5500\n")
        issues: list[CollectorIssue] = []

        actual = read_drm_card(_card_dir(tmp_path, 1), 1, issues=issues)

        assert (replace(AMD_CARD, memory_temperature_celsius=-5.5), []) == (actual, issues)

    def test_amd_edge_temperature_is_preferred(self, tmp_path: Path) -> None:
        """Where amdgpu gives temp1 (edge) and temp2 (junction), temp1 is read."""
        hwmon = _amd(tmp_path) / "hwmon" / "hwmon3"
        write_attribute(hwmon / "temp2_input", "90000\n")

        assert AMD_CARD == read_drm_card(_card_dir(tmp_path, 1), 1, issues=[])

    def test_i915_more_available_than_total_is_garbage(self, tmp_path: Path) -> None:
        """lmem_avail_bytes above lmem_total_bytes gives no used figure, and an issue."""
        card_dir = _i915(tmp_path)
        write_attribute(card_dir / "lmem_avail_bytes", "68719476737\n")
        issues: list[CollectorIssue] = []

        actual = read_drm_card(card_dir, 2, issues=issues)

        detail = f"{card_dir / 'lmem_avail_bytes'}: more than lmem_total_bytes"
        expected = (replace(INTEL_CARD, memory_used_bytes=None), [issue("garbage", detail)])
        assert expected == (actual, issues)

    def test_xe_actual_frequency_is_preferred(self, tmp_path: Path) -> None:
        """xe: act_freq, what the GT runs at, wins over the requested cur_freq."""
        device_dir = _pci_function(tmp_path, "0000:03:00.0", "0x8086", "0xe20b")
        freq = device_dir / "tile0" / "gt0" / "freq0"
        write_attribute(freq / "act_freq", "2850\n")
        write_attribute(freq / "cur_freq", "1000\n")
        _card(tmp_path, 0, device_dir)

        expected = DrmCard(0, 128, "0000:03:00.0", "intel", clock_hertz=2850000000.0)
        assert expected == read_drm_card(_card_dir(tmp_path, 0), 0, issues=[])

    def test_lowest_render_minor_of_several(self, tmp_path: Path) -> None:
        """Of several render nodes beside the card, the lowest minor is the card's."""
        device_dir = _amd(tmp_path)
        (device_dir / "drm" / "renderD200").mkdir()

        assert AMD_CARD == read_drm_card(_card_dir(tmp_path, 1), 1, issues=[])

    def test_i915_hwmon_of_the_driver_is_chosen(self, tmp_path: Path) -> None:
        """Intel's hwmon is found by its name (i915) too, after another one."""
        device_dir = _i915(tmp_path).resolve() / "device"
        other = device_dir / "hwmon" / "hwmon1"
        write_attribute(other / "name", "nvme\n")
        write_attribute(other / "energy1_input", "1000000\n")

        assert INTEL_CARD == read_drm_card(_card_dir(tmp_path, 2), 2, issues=[])

    def test_a_lone_hwmon_of_another_name_is_read(self, tmp_path: Path) -> None:
        """The GPU function's only hwmon is its driver's, whatever the name a driver
        version gives it: read, not passed over."""
        card_dir = _i915(tmp_path)
        hwmon = card_dir.resolve() / "device" / "hwmon" / "hwmon4"
        write_attribute(hwmon / "name", "i915_gt\n")

        assert INTEL_CARD == read_drm_card(card_dir, 2, issues=[])

    def test_unlistable_drm_and_hwmon_folders_are_issues(self, tmp_path: Path) -> None:
        """A device whose drm/ and hwmon/ cannot be listed (here looping links) has no
        render node and no hwmon figures, and one issue for each folder."""
        device_dir = _pci_function(tmp_path, AMD_ADDRESS, "0x1002", "0x74a1")
        write_attribute(device_dir / "mem_info_vram_used", "1073741824\n")
        os.symlink("hwmon", device_dir / "hwmon")
        os.symlink("drm", device_dir / "drm")
        card_dir = tmp_path / "class" / "drm" / "card0"
        card_dir.mkdir(parents=True)
        replace_symlink(card_dir / "device", device_dir)
        issues: list[CollectorIssue] = []

        actual = read_drm_card(card_dir, 0, issues=issues)

        loop = "Too many levels of symbolic links"
        expected = (
            DrmCard(0, None, AMD_ADDRESS, "amd", "AMD Instinct MI300X", memory_used_bytes=2.0**30),
            [
                issue("unreadable", f"cannot list {card_dir / 'device' / 'hwmon'}: {loop}"),
                issue("unreadable", f"cannot list {card_dir / 'device' / 'drm'}: {loop}"),
            ],
        )
        assert expected == (actual, issues)


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
            Sample(GPU_MEMORY_BANDWIDTH_UTILIZATION, a.busy_percent * 2 // 3 / 100),
            Sample(GPU_MEMORY_USED, float(a.vram_used_bytes)),
            Sample(GPU_MEMORY_TOTAL, float(a.vram_total_bytes)),
            Sample(GPU_POWER, a.power_microwatts / 1_000_000),
            Sample(GPU_TEMPERATURE, a.temperature_millicelsius / 1000),
            # The fixture's mem sensor reads 4 degrees below the junction.
            Sample(GPU_MEMORY_TEMPERATURE, a.temperature_millicelsius / 1000 - 4),
            Sample(GPU_SM_CLOCK, a.clock_mhz * 1_000_000.0),
        )
        intel_samples = (
            Sample(GPU_MEMORY_USED, float(i.vram_used_bytes)),
            Sample(GPU_MEMORY_TOTAL, float(i.vram_total_bytes)),
            Sample(GPU_ENERGY, i.energy_microjoules / 1_000_000),
            Sample(GPU_SM_CLOCK, i.clock_mhz * 1_000_000.0),
        )
        # The fixture numbers render nodes by position: renderD128 and renderD129.
        expected = Readings(
            devices=(
                DeviceReading(
                    AMD_ADDRESS,
                    _keys(1, 128, AMD_ADDRESS),
                    AMD_IDENTITY,
                    amd_samples,
                    standalone=True,
                ),
                DeviceReading(
                    INTEL_ADDRESS,
                    _keys(2, 129, INTEL_ADDRESS),
                    INTEL_IDENTITY,
                    intel_samples,
                    standalone=True,
                ),
            )
        )
        assert expected == _collect(tmp_path)

    def test_every_card_is_reported(self, tmp_path: Path) -> None:
        """Each AMD and Intel card is reported under its address, by card number."""
        _i915(tmp_path)
        _amd(tmp_path)

        assert Readings(devices=(AMD_READING, INTEL_READING)) == _collect(tmp_path)

    def test_captured_vm_has_no_drm(self) -> None:
        """The captured VM has no class/drm (no GPU, no virtio-gpu): the source is absent."""
        with pytest.raises(CollectorUnavailable, match=r"class/drm: no DRM driver loaded"):
            _collect(CAPTURED / "sys")

    def test_connectors_and_render_nodes_are_not_cards(self, tmp_path: Path) -> None:
        """card1-DP-1, renderD129 and the version file are not cards."""
        device_dir = _amd(tmp_path)
        drm = tmp_path / "class" / "drm"
        (drm / "card1-DP-1").mkdir()
        replace_symlink(drm / "card1-DP-1" / "device", device_dir)
        write_attribute(drm / "version", "drm 1.1.0 20060810\n")

        assert Readings(devices=(AMD_READING,)) == _collect(tmp_path)

    def test_missing_optional_files_leave_figures_absent(self, tmp_path: Path) -> None:
        """An AMD card without busy percents or hwmon (an APU has no mem_busy_percent)
        reports only its memory, silently."""
        device_dir = _amd(tmp_path)
        (device_dir / "gpu_busy_percent").unlink()
        (device_dir / "mem_busy_percent").unlink()
        shutil.rmtree(device_dir / "hwmon")

        samples = (Sample(GPU_MEMORY_USED, 1073741824.0), Sample(GPU_MEMORY_TOTAL, 206158430208.0))
        expected = Readings(devices=(replace(AMD_READING, samples=samples),))
        assert expected == _collect(tmp_path)

    def test_garbage_drops_the_figure_with_an_issue(self, tmp_path: Path) -> None:
        """Garbage in one file drops that figure only, each with an issue naming the file."""
        device_dir = _amd(tmp_path)
        write_attribute(device_dir / "mem_info_vram_used", "lots\n")
        write_attribute(device_dir / "gpu_busy_percent", "150\n")
        write_attribute(device_dir / "mem_busy_percent", "101\n")

        card_device = _card_dir(tmp_path, 1) / "device"
        lost = (GPU_UTILIZATION, GPU_MEMORY_BANDWIDTH_UTILIZATION, GPU_MEMORY_USED)
        samples = tuple(s for s in AMD_SAMPLES if s.spec not in lost)
        expected = Readings(
            devices=(replace(AMD_READING, samples=samples),),
            issues=(
                issue("garbage", f"{card_device / 'gpu_busy_percent'}: above 100 percent"),
                issue("garbage", f"{card_device / 'mem_busy_percent'}: above 100 percent"),
                issue(
                    "garbage",
                    f"{card_device / 'mem_info_vram_used'}: not a 64-bit integer: 'lots'",
                ),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_400_digit_counter_loses_one_figure(self, tmp_path: Path) -> None:
        """An energy counter of 400 digits loses energy only; the other card is whole."""
        _amd(tmp_path)
        card_dir = _i915(tmp_path)
        energy = card_dir / "device" / "hwmon" / "hwmon4" / "energy1_input"
        write_attribute(energy, "9" * 400 + "\n")

        samples = tuple(s for s in INTEL_SAMPLES if s.spec is not GPU_ENERGY)
        expected = Readings(
            devices=(AMD_READING, replace(INTEL_READING, samples=samples)),
            issues=(issue("garbage", f"{energy}: not a 64-bit integer: '{'9' * 40}'"),),
        )
        assert expected == _collect(tmp_path)

    def test_negative_counter_is_garbage(self, tmp_path: Path) -> None:
        """A negative energy counter is refused; a negative temperature is not."""
        card_dir = _i915(tmp_path)
        energy = card_dir / "device" / "hwmon" / "hwmon4" / "energy1_input"
        write_attribute(energy, "-1\n")

        samples = tuple(s for s in INTEL_SAMPLES if s.spec is not GPU_ENERGY)
        expected = Readings(
            devices=(replace(INTEL_READING, samples=samples),),
            issues=(issue("garbage", f"{energy}: negative: -1"),),
        )
        assert expected == _collect(tmp_path)

    def test_binary_huge_and_fifo_files_lose_their_figures(self, tmp_path: Path) -> None:
        """A binary, a 100 KiB and a FIFO attribute each lose one figure, without blocking."""
        device_dir = _amd(tmp_path)
        (device_dir / "mem_info_vram_used").write_bytes(b"\x01\x00\x00\x40")
        (device_dir / "mem_info_vram_total").write_bytes(b"1" * 100_000)
        (device_dir / "gpu_busy_percent").unlink()
        os.mkfifo(device_dir / "gpu_busy_percent")

        card_device = _card_dir(tmp_path, 1) / "device"
        lost = (GPU_UTILIZATION, GPU_MEMORY_USED, GPU_MEMORY_TOTAL)
        expected = Readings(
            devices=(
                replace(AMD_READING, samples=tuple(s for s in AMD_SAMPLES if s.spec not in lost)),
            ),
            issues=(
                issue(
                    "unreadable",
                    f"cannot read {card_device / 'gpu_busy_percent'}: not a regular file",
                ),
                issue("garbage", f"{card_device / 'mem_info_vram_used'}: binary contents"),
                issue("garbage", f"{card_device / 'mem_info_vram_total'}: longer than 65536 bytes"),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_a_sensor_the_firmware_does_not_read_is_no_figure_and_no_issue(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """amdgpu shows the mem channel for a whole family, and a part whose power
        firmware has no such sensor answers its read EOPNOTSUPP, every poll: the figure
        is absent, not an unreadable file reported each poll."""
        _amd(tmp_path)
        fail_reads(monkeypatch, path_suffix="temp3_input", code=errno.EOPNOTSUPP)

        unsupported = replace(AMD_CARD, memory_temperature_celsius=None)
        assert Readings(devices=(card_reading(unsupported),)) == _collect(tmp_path)

    def test_a_sensor_an_older_amdgpu_answers_einval_gives_way_to_the_next(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Before 2021, amdgpu's powerplay parts (Vega10/20, Polaris) answered a sensor
        they do not read EINVAL, where kernels since answer EOPNOTSUPP: power comes
        from power1_input, and the memory sensor is absent, with no issue each poll."""
        device_dir = _amd(tmp_path)
        write_attribute(device_dir / "hwmon" / "hwmon3" / "power1_input", "298000000\n")
        for name in ("power1_average", "temp3_input"):
            fail_reads(monkeypatch, path_suffix=name, code=errno.EINVAL)

        older = replace(AMD_CARD, power_watts=298.0, memory_temperature_celsius=None)
        assert Readings(devices=(card_reading(older),)) == _collect(tmp_path)

    def test_sleeping_amd_gpu_has_no_sensor_figures_and_no_issue(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """amdgpu answers a sensor read EPERM while the GPU is runtime-suspended or in
        reset (``amdgpu_pm_get_access_if_active``): those figures are absent, as a
        netdev being unregistered is, not an unreadable file every poll. VRAM, read
        without waking the GPU, is still reported."""
        _amd(tmp_path)
        for name in (
            "gpu_busy_percent",
            "mem_busy_percent",
            "power1_average",
            "temp1_input",
            "temp3_input",
            "freq1_input",
        ):
            fail_reads(monkeypatch, path_suffix=name, code=errno.EPERM)

        asleep = replace(
            AMD_CARD,
            utilization_ratio=None,
            memory_bandwidth_utilization_ratio=None,
            power_watts=None,
            temperature_celsius=None,
            memory_temperature_celsius=None,
            clock_hertz=None,
        )
        assert Readings(devices=(card_reading(asleep),)) == _collect(tmp_path)

    def test_device_link_loop_drops_that_card(self, tmp_path: Path) -> None:
        """A card whose device link loops is left out with an issue; the others are read."""
        _amd(tmp_path)
        _i915(tmp_path)
        card_dir = tmp_path / "class" / "drm" / "card5"
        card_dir.mkdir()
        (card_dir / "device").symlink_to("device")

        expected = Readings(
            devices=(AMD_READING, INTEL_READING),
            issues=(
                issue(
                    "unreadable",
                    f"cannot resolve {card_dir / 'device'}: Too many levels of symbolic links",
                ),
            ),
        )
        assert expected == _collect(tmp_path)

    def test_cards_vanishing_between_listing_and_reading(self, tmp_path: Path) -> None:
        """A card listed in class/drm whose device is gone is left out as vanished."""
        amd_device = _amd(tmp_path)
        _i915(tmp_path)
        _amd(tmp_path, card=3, address="0000:e2:00.0")
        collector = DrmCollector(CollectorContext(sysfs=tmp_path))
        first = collector.collect()
        shutil.rmtree(amd_device)  # class/drm/card1 now dangles, as during a hot unplug

        third_reading = DeviceReading(
            "0000:e2:00.0",
            _keys(3, 131, "0000:e2:00.0"),
            replace(AMD_IDENTITY, pci_address="0000:e2:00.0"),
            AMD_SAMPLES,
            standalone=True,
        )
        gone = _card_dir(tmp_path, 1) / "device"
        assert (
            Readings(devices=(AMD_READING, INTEL_READING, third_reading)),
            Readings(
                devices=(INTEL_READING, third_reading),
                issues=(issue("vanished", f"{gone}: gone while its card was read"),),
            ),
        ) == (first, collector.collect())

    def test_cards_in_numeric_order(self, tmp_path: Path) -> None:
        """card10 comes after card2."""
        _amd(tmp_path, card=10, address="0000:e2:00.0")
        _amd(tmp_path, card=2)

        readings = _collect(tmp_path)
        assert [AMD_ADDRESS, "0000:e2:00.0"] == [r.name for r in readings.devices]

    def test_no_amd_or_intel_card_is_empty(self, tmp_path: Path) -> None:
        """A DRM class with only other vendors' cards gives no readings."""
        _card(tmp_path, 0, _pci_function(tmp_path, "0000:02:00.0", "0x1a03", "0x2000"))

        assert Readings() == _collect(tmp_path)

    def test_no_drm_class_is_unavailable(self, tmp_path: Path) -> None:
        """Without /sys/class/drm the collector reports the source absent."""
        with pytest.raises(CollectorUnavailable, match=r"class/drm: no DRM driver loaded"):
            _collect(tmp_path)


class TestRegistration:
    def test_registration_and_serves(self) -> None:
        """drm registers on by default and serves AMD and Intel plugin resources and DRA drivers."""
        expected = (
            "drm",
            True,
            DrmCollector,
            ("amd.com/", "gpu.intel.com", "gpu.amd.com"),
            ("unreadable", "garbage", "vanished"),
        )
        assert expected == (
            REGISTRATION.name,
            REGISTRATION.enabled_by_default,
            REGISTRATION.factory,
            DrmCollector.serves,
            DrmCollector.known_errors,
        )
