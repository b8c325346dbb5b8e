"""What the GPU-to-NIC PCIe paths cost a render, on an HGX-like training node.

    .venv/bin/python bench/gpu_nic_paths.py [--runs 200]

``make bench``'s dense node gives each pod one device, so no container holds a GPU and a
NIC and the paths cost it only a look at each container. Here: 8 GPUs, each below a PCIe
switch with one PF and its 16 VFs (128 VFs allocatable), four switches per NUMA node,
and 250 pods of two containers holding nothing besides:

- ``8 pods``: 8 training pods, each holding one GPU and one VF of its switch;
- ``1 pod``: one pod holding the 8 GPUs and 8 VFs, one of each switch.

Prints the median thread-CPU time of ``gpu_nic_paths`` and of the whole page's render
(``exposition.render`` from cold, as the first scrape of a snapshot pays it), and the
series the two families add. Figures only.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from exporter.exposition import render
from exporter.join import join_snapshot
from exporter.model import (
    AllocatableResources,
    CollectorRun,
    ContainerResources,
    DeviceGroup,
    DeviceIdentity,
    DeviceReading,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    PciDevice,
    PodResources,
    Readings,
    Snapshot,
)
from exporter.pcie_paths import gpu_nic_paths

GPUS = 8
VFS_PER_PF = 16
VF_RESOURCE = "mellanox.com/cx7_sriov_vf"


def _switch(n: int) -> tuple[str, ...]:
    bus = 0x10 + n * 0x20
    return (f"pci0000:{bus:02x}", f"0000:{bus:02x}:01.0", f"0000:{bus + 1:02x}:00.0")


def _gpu_uuid(n: int) -> str:
    return f"GPU-{n:08x}-0000-0000-0000-000000000000"


def _node() -> tuple[list[PciDevice], list[DeviceReading], dict[int, list[str]]]:
    functions, readings, vfs = [], [], {}
    for n in range(GPUS):
        bus = 0x10 + n * 0x20
        numa = n // 4
        gpu = f"0000:{bus + 3:02x}:00.0"
        path = (*_switch(n), f"0000:{bus + 2:02x}:00.0", gpu)
        functions.append(PciDevice(gpu, "0x10de", "0x2330", "0x030200", numa, pcie_path=path))
        readings.append(
            DeviceReading(
                _gpu_uuid(n),
                (HardwareKey(KeyKind.GPU_UUID, _gpu_uuid(n)), HardwareKey(KeyKind.PCI, gpu)),
                DeviceIdentity(uuid=_gpu_uuid(n), pci_address=gpu, vendor="nvidia"),
                standalone=True,
            )
        )
        port = f"0000:{bus + 2:02x}:01.0"
        vfs[n] = []
        for v in range(VFS_PER_PF):
            address = f"0000:{bus + 4:02x}:{v // 8:02x}.{v % 8}"
            path = (*_switch(n), port, address)
            functions.append(PciDevice(address, "0x15b3", "0x101e", "0x020000", numa, (), path))
            vfs[n].append(address)
    return functions, readings, vfs


def _snapshot(training: list[ContainerResources]) -> Snapshot:
    functions, readings, vfs = _node()
    idle = [
        PodResources(f"team-{i % 10}", f"worker-{i}", (ContainerResources("main"),) * 2)
        for i in range(250)
    ]
    pods = [PodResources("ml", f"trainer-{i}", (c,)) for i, c in enumerate(training)]
    allocatable = AllocatableResources(
        devices=(
            DeviceGroup("nvidia.com/gpu", tuple(_gpu_uuid(n) for n in range(GPUS))),
            DeviceGroup(VF_RESOURCE, tuple(a for n in range(GPUS) for a in vfs[n])),
        )
    )
    return join_snapshot(
        node="hgx-1",
        collected_at=0.0,
        kubelet=KubeletStatus(up=True, socket="/kubelet.sock", api=(("List", True),)),
        pods=(*pods, *idle),
        allocatable=allocatable,
        cpu_numa={},
        collector_runs=(
            CollectorRun("nvml", True, 0.0, Readings(devices=tuple(readings))),
            CollectorRun("pci", True, 0.0, Readings(pci_devices=tuple(functions))),
        ),
    )


def _median_ms(call: Callable[[], object], runs: int) -> float:
    spent = []
    for _ in range(runs):
        started = time.thread_time()
        call()
        spent.append(time.thread_time() - started)
    return statistics.median(spent) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    _, _, vfs = _node()
    layouts = {
        "8 pods": [
            ContainerResources(
                "trainer",
                devices=(
                    DeviceGroup("nvidia.com/gpu", (_gpu_uuid(n),)),
                    DeviceGroup(VF_RESOURCE, (vfs[n][0],)),
                ),
            )
            for n in range(GPUS)
        ],
        "1 pod": [
            ContainerResources(
                "trainer",
                devices=(
                    DeviceGroup("nvidia.com/gpu", tuple(_gpu_uuid(n) for n in range(GPUS))),
                    DeviceGroup(VF_RESOURCE, tuple(vfs[n][0] for n in range(GPUS))),
                ),
            )
        ],
    }
    print(f"medians of {runs}, thread CPU; 250 more pods holding nothing on the node")
    for name, training in layouts.items():
        snapshot = _snapshot(training)
        paths = _median_ms(lambda s=snapshot: gpu_nic_paths(s), runs)
        whole = _median_ms(lambda s=snapshot: render(s), runs)
        series = len(gpu_nic_paths(snapshot)) * 2
        print(f"  {name:<8} gpu_nic_paths {paths:.3f} ms, render {whole:.3f} ms, {series} series")


if __name__ == "__main__":
    main()
