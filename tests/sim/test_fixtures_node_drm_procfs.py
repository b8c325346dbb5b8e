"""The node, drm and procfs fixture writers lay out sysfs and procfs as the kernel does."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporter.collectors.base import CollectorContext
from exporter.collectors.cpu import CpuCollector
from exporter.collectors.drm import DrmCollector
from exporter.collectors.numa import NumaCollector
from exporter.collectors.topology import TopologyCollector
from exporter.model import DeviceIdentity, cpulist
from exporter.sim.fixtures import drm, node, pci, procfs, write_tree
from exporter.sim.fixtures.drm import DrmTelemetry, drm_telemetry
from exporter.sim.fixtures.node import NodeMemory, node_memory
from exporter.sim.fixtures.pci import pci_device_dir
from exporter.sim.fixtures.procfs import cpu_counters
from exporter.sim.hardware import GIB, SimDrmGpu, SimHardware, SimNumaNode, demo_hardware

AMD = SimDrmGpu(1, "amdgpu", "0000:e1:00.0", "0x1002", "0x74a1", 1, 192 * GIB, 0.55)
I915 = SimDrmGpu(2, "i915", "0000:e9:00.0", "0x8086", "0x0bd5", 1, 64 * GIB, 0.3)
XE = SimDrmGpu(3, "xe", "0000:03:00.0", "0x8086", "0xe20b", 0, 12 * GIB, 0.0)
SMALL = SimHardware(
    numa_nodes=(
        SimNumaNode(0, (0, 1, 2, 3), 16 * GIB, hugepages_2mi=4, hugepages_1gi=1),
        SimNumaNode(1, (4, 5, 8, 9), 16 * GIB, hugepages_2mi=0, hugepages_1gi=0),
    ),
    drm_gpus=(AMD, I915, XE),
)


def _temporary_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.name.endswith(".tmp"))


def _files(directory: Path, *names: str) -> dict[str, str]:
    return {name: (directory / name).read_text() for name in names}


class TestNode:
    @pytest.mark.parametrize(
        ("ids", "expected"),
        [
            ((0, 1, 2, 3, 8, 10, 11), "0-3,8,10-11"),
            ((5,), "5"),
            ((3, 1, 2, 2), "1-3"),
            ((), ""),
        ],
    )
    def test_cpulist(self, ids: tuple[int, ...], expected: str) -> None:
        """IDs are written (in the tree, and as the cpus label) as the kernel's sorted
        range list."""
        assert expected == cpulist(ids)

    def test_node_memory_at_a_tick(self) -> None:
        """8 GiB base use, the hugepages and a tick-driven wobble come off the free memory."""
        expected = (
            NodeMemory(
                16777216, 16777216 - 8388608 - 8192 - 1048576, ((2048, 4, 3), (1048576, 1, 1))
            ),
            NodeMemory(
                16777216,
                16777216 - 8388608 - 8192 - 1048576 - 3 * 524288,
                ((2048, 4, 3), (1048576, 1, 1)),
            ),
        )
        assert expected == (
            node_memory(SMALL.numa_nodes[0], tick=0),
            node_memory(SMALL.numa_nodes[0], tick=3),
        )

    def test_layout(self, tmp_path: Path) -> None:
        """online, cpulist, meminfo and hugepages files read as the kernel prints them."""
        node.write(tmp_path, SMALL, tick=0)
        root = tmp_path / "devices" / "system" / "node"
        hugepages = root / "node0" / "hugepages"

        expected = {
            "online": "0-1\n",
            "possible": "0-1\n",
            "node0/cpulist": "0-3\n",
            "node1/cpulist": "4-5,8-9\n",
            "node0/hugepages/hugepages-2048kB/nr_hugepages": "4\n",
            "node0/hugepages/hugepages-2048kB/free_hugepages": "3\n",
            "node0/hugepages/hugepages-2048kB/surplus_hugepages": "0\n",
            "node0/hugepages/hugepages-1048576kB/nr_hugepages": "1\n",
            "node0/hugepages/hugepages-1048576kB/free_hugepages": "1\n",
        }
        assert (expected, ["hugepages-1048576kB", "hugepages-2048kB"]) == (
            {name: (root / name).read_text() for name in expected},
            sorted(p.name for p in hugepages.iterdir()),
        )

    def test_meminfo_format(self, tmp_path: Path) -> None:
        """meminfo lines are padded as mm/node.c pads them."""
        node.write(tmp_path, SMALL, tick=0)
        meminfo = (tmp_path / "devices/system/node/node0/meminfo").read_text().splitlines()

        expected = [
            "Node 0 MemTotal:       16777216 kB",
            "Node 0 MemFree:         7331840 kB",
            "Node 0 MemUsed:         9445376 kB",
            "Node 0 HugePages_Total:     4",
            "Node 0 HugePages_Free:      3",
            "Node 0 HugePages_Surp:      0",
        ]
        assert expected == meminfo[:3] + meminfo[-3:]

    def test_rewrite_with_a_later_tick(self, tmp_path: Path) -> None:
        """A second write replaces the figures in place and leaves no temporary files."""
        node.write(tmp_path, SMALL, tick=0)
        node.write(tmp_path, SMALL, tick=3)
        meminfo = (tmp_path / "devices/system/node/node0/meminfo").read_text().splitlines()

        expected: tuple[list[str], list[Path]] = (["Node 0 MemFree:         5758976 kB"], [])
        assert expected == (meminfo[1:2], _temporary_files(tmp_path))


class TestDrm:
    def test_telemetry_at_a_tick(self) -> None:
        """Figures wobble around the base utilization; energy grows at the mean power."""
        expected = (
            DrmTelemetry(45, 79885762560, 206158430208, 414500000, 10000000000, 55250, 1220),
            DrmTelemetry(55, 95348064256, 206158430208, 475500000, 43285000000, 59750, 1380),
            DrmTelemetry(20, 13743685632, 68719476736, 192000000, 10000000000, 44000, 560),
        )
        assert expected == (
            drm_telemetry(AMD, tick=0),
            drm_telemetry(AMD, tick=7),
            drm_telemetry(I915, tick=0),
        )

    def test_energy_grows_with_every_tick(self) -> None:
        """The energy counter rises strictly from tick to tick, for every driver."""
        for gpu in (AMD, I915, XE):
            energy = [drm_telemetry(gpu, tick=t).energy_microjoules for t in range(12)]
            assert energy == sorted(set(energy)), gpu.driver

    def test_card_links_as_the_kernel(self, tmp_path: Path) -> None:
        """class/drm/cardN links into the PCI device, whose drm/cardN/device reads ../../../addr."""
        pci.write(tmp_path, SMALL, tick=0)
        drm.write(tmp_path, SMALL, tick=0)
        class_drm = tmp_path / "class" / "drm"
        card_dir = pci_device_dir(tmp_path, AMD.pci_address) / "drm" / "card1"

        expected = (
            ["card1", "card2", "card3", "renderD128", "renderD129", "renderD130", "version"],
            "../../devices/pci0000:e1/0000:e1:00.0/drm/card1",
            "../../../0000:e1:00.0",
            str(pci_device_dir(tmp_path, AMD.pci_address)),
        )
        assert expected == (
            sorted(p.name for p in class_drm.iterdir()),
            os.readlink(class_drm / "card1"),
            os.readlink(card_dir / "device"),
            os.path.realpath(class_drm / "card1" / "device"),
        )

    def test_driver_files(self, tmp_path: Path) -> None:
        """amdgpu, i915 and xe files hold the telemetry in the drivers' own units."""
        pci.write(tmp_path, SMALL, tick=0)
        drm.write(tmp_path, SMALL, tick=0)
        amd_dir = pci_device_dir(tmp_path, AMD.pci_address)
        i915_dir = pci_device_dir(tmp_path, I915.pci_address)
        xe_dir = pci_device_dir(tmp_path, XE.pci_address)
        a, i, x = (drm_telemetry(g, tick=0) for g in (AMD, I915, XE))

        expected = (
            {
                "gpu_busy_percent": f"{a.busy_percent}\n",
                "mem_info_vram_used": f"{a.vram_used_bytes}\n",
                "mem_info_vram_total": "206158430208\n",
                "hwmon/hwmon1/name": "amdgpu\n",
                "hwmon/hwmon1/power1_input": f"{a.power_microwatts}\n",
                "hwmon/hwmon1/temp2_input": f"{a.temperature_millicelsius}\n",
                "hwmon/hwmon1/freq1_input": f"{a.clock_mhz * 1_000_000}\n",
            },
            {
                "drm/card2/gt_act_freq_mhz": f"{i.clock_mhz}\n",
                "drm/card2/gt_cur_freq_mhz": "600\n",
                "drm/card2/lmem_total_bytes": "68719476736\n",
                "drm/card2/lmem_avail_bytes": f"{68719476736 - i.vram_used_bytes}\n",
                "hwmon/hwmon2/name": "i915\n",
                "hwmon/hwmon2/energy1_input": f"{i.energy_microjoules}\n",
            },
            {
                "tile0/physical_vram_size_bytes": "12884901888\n",
                "tile0/gt0/freq0/act_freq": f"{x.clock_mhz}\n",
                "hwmon/hwmon3/name": "xe\n",
                "hwmon/hwmon3/energy1_input": f"{x.energy_microjoules}\n",
            },
        )
        assert expected == (
            _files(amd_dir, *expected[0]),
            _files(i915_dir, *expected[1]),
            _files(xe_dir, *expected[2]),
        )

    def test_rewrite_with_a_later_tick(self, tmp_path: Path) -> None:
        """A second write moves the energy forward and leaves no temporary files or links."""
        pci.write(tmp_path, SMALL, tick=0)
        drm.write(tmp_path, SMALL, tick=0)
        drm.write(tmp_path, SMALL, tick=5)
        energy = pci_device_dir(tmp_path, I915.pci_address) / "hwmon/hwmon2/energy1_input"

        expected: tuple[str, list[Path]] = (
            f"{drm_telemetry(I915, tick=5).energy_microjoules}\n",
            [],
        )
        assert expected == (energy.read_text(), _temporary_files(tmp_path))


class TestProcfs:
    def test_counters(self) -> None:
        """Busy CPUs gain 8.8 s of user time per tick, idle ones 0.15 s; idle differs per CPU."""
        expected = (
            (5400, 360, 3240, 349200, 720, 360, 720, 0, 0, 0),
            (6280, 360, 3300, 349242, 720, 365, 735, 0, 0, 0),
            (5430, 362, 3258, 351147, 724, 362, 724, 0, 0, 0),
        )
        assert expected == (
            cpu_counters(0, tick=0),
            cpu_counters(2, tick=1),
            cpu_counters(7, tick=2),
        )

    def test_stat_layout(self, tmp_path: Path) -> None:
        """A padded total line, one line per CPU, then the kernel's other lines."""
        procfs.write(tmp_path, SMALL, tick=1)
        lines = (tmp_path / "stat").read_text().splitlines()
        per_cpu = [cpu_counters(cpu, tick=1) for cpu in SMALL.cpus]
        total = [sum(column) for column in zip(*per_cpu, strict=True)]

        expected = (
            "cpu  " + " ".join(map(str, total)),
            [f"cpu{cpu} " + " ".join(map(str, cpu_counters(cpu, tick=1))) for cpu in SMALL.cpus],
            ["intr", "ctxt", "btime", "processes", "procs_running", "procs_blocked", "softirq"],
        )
        assert expected == (lines[0], lines[1:9], [line.split()[0] for line in lines[9:]])

    def test_rewrite_with_a_later_tick(self, tmp_path: Path) -> None:
        """A second write grows the counters and leaves no temporary file."""
        procfs.write(tmp_path, SMALL, tick=0)
        procfs.write(tmp_path, SMALL, tick=2)
        cpu2 = (tmp_path / "stat").read_text().splitlines()[3]

        expected: tuple[str, list[Path]] = (
            "cpu2 " + " ".join(map(str, cpu_counters(2, tick=2))),
            [],
        )
        assert expected == (cpu2, _temporary_files(tmp_path))


class TestWholeTree:
    def test_collectors_read_the_demo_node(self, tmp_path: Path) -> None:
        """The demo tree feeds the topology reader and the cpu, numa and drm collectors."""
        sysfs, proc = tmp_path / "sys", tmp_path / "proc"
        hardware = demo_hardware()
        write_tree(sysfs=sysfs, procfs_root=proc, hardware=hardware, tick=2)
        write_tree(sysfs=sysfs, procfs_root=proc, hardware=hardware, tick=3)
        context = CollectorContext(sysfs=sysfs, procfs=proc)

        topology = TopologyCollector(context).collect()
        cpu = CpuCollector(context, user_hz=procfs.USER_HZ).collect()
        numa = NumaCollector(context).collect()
        gpus = DrmCollector(context).collect()
        expected = (
            tuple((cpu, 0 if cpu < 32 else 1) for cpu in range(64)),
            list(range(64)),
            (3 * 880 + 360 * 15) / 100,  # CPU 2's user seconds at tick 3
            [
                (spec, labels)
                for node_id in ("0", "1")
                for spec, labels in (
                    ("podresources_numa_memory_total_bytes", (node_id,)),
                    ("podresources_numa_memory_free_bytes", (node_id,)),
                    ("podresources_numa_hugepages_total_bytes", (node_id, "hugepages-2Mi")),
                    ("podresources_numa_hugepages_free_bytes", (node_id, "hugepages-2Mi")),
                    ("podresources_numa_hugepages_total_bytes", (node_id, "hugepages-1Gi")),
                    ("podresources_numa_hugepages_free_bytes", (node_id, "hugepages-1Gi")),
                )
            ],
            [
                (
                    "0000:e1:00.0",
                    DeviceIdentity(None, "0000:e1:00.0", "AMD Instinct MI300X", "amd"),
                ),
                (
                    "0000:e9:00.0",
                    DeviceIdentity(None, "0000:e9:00.0", "Intel Data Center GPU Max 1550", "intel"),
                ),
                # Card 3, which the AMD DRA driver hands out (exporter.sim.dra).
                (
                    "0000:e5:00.0",
                    DeviceIdentity(None, "0000:e5:00.0", "AMD Instinct MI300X", "amd"),
                ),
            ],
            (),
        )
        assert expected == (
            topology.cpu_numa,
            [times.cpu for times in cpu.cpu_times.values()],
            dict(cpu.cpu_times[2].seconds_by_mode)["user"],
            [(sample.spec.name, sample.label_values) for sample in numa.node_samples],
            [(reading.name, reading.identity) for reading in gpus.devices],
            (*topology.issues, *cpu.issues, *numa.issues, *gpus.issues),
        )
