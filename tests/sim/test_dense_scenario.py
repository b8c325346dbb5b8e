"""The benchmark's dense node, in its default shape and in the shape issue 11 names."""

from __future__ import annotations

from collections import Counter

from exporter.sim.hardware import GIB
from exporter.sim.scenario import CHURN_SLOTS, DenseScenario, dense_hardware


def test_default_shape() -> None:
    """Two NUMA nodes, 8 GPUs and 56 VFs as device IDs, two containers a pod."""
    state = DenseScenario.create(pod_count=250).state_at(0)
    hardware = dense_hardware()

    assert (64, 500, [0, 1], [0, 1]) == (
        sum(len(g.device_ids) for g in state.allocatable.devices),
        sum(len(p.containers) for p in state.pods),
        [n.id for n in hardware.numa_nodes],
        sorted({n.numa_node for n in hardware.nics}),
    )


def test_issue_node_shape() -> None:
    """250 pods, 750 containers, 96 devices, 256 CPUs over 8 NUMA nodes: what the issue
    measured; the whole node's memory and huge pages stay those of the default shape."""
    hardware = dense_hardware(numa_nodes=8, vfs=88)
    state = DenseScenario(hardware, 250, sidecars=2).state_at(0)
    default = dense_hardware()

    assert (96, 750, {32}) == (
        sum(len(g.device_ids) for g in state.allocatable.devices),
        sum(len(p.containers) for p in state.pods),
        {len(n.cpus) for n in hardware.numa_nodes},
    )
    assert list(range(8)) == sorted({g.numa_node for g in hardware.gpus})
    assert Counter(n.numa_node for n in hardware.nics) == {0: 45, 4: 45}
    for field in ("memory_total_bytes", "hugepages_2mi", "hugepages_1gi"):
        assert sum(getattr(n, field) for n in hardware.numa_nodes) == sum(
            getattr(n, field) for n in default.numa_nodes
        )
    assert 2048 * GIB == sum(n.memory_total_bytes for n in hardware.numa_nodes)
    assert {("main", "sidecar", "log-shipper")} == {
        tuple(c.name for c in p.containers) for p in state.pods
    }


def test_every_other_pod_holds_a_cpu_and_each_tick_renames_one_slot() -> None:
    """Exclusive CPUs go to every other pod, one each; a tick renames the pods of one
    churn slot in CHURN_SLOTS and keeps the rest."""
    scenario = DenseScenario.create(pod_count=250)
    now, later = (scenario.state_at(t).pods for t in (0, 1))
    held = [len(p.containers[0].cpu_ids) for p in now]
    renamed = [a.name for a, b in zip(now, later, strict=True) if a.name != b.name]

    assert (held[::2], held[1::2]) == ([1] * 125, [0] * 125)
    assert len(renamed) == 250 // CHURN_SLOTS


def test_hcas_are_read_but_not_listed() -> None:
    """Eight single-port HCAs, one a GPU, spread over the NUMA nodes with their own
    PCIe links: the collectors pay for reading them, and the kubelet lists none."""
    hardware = dense_hardware(numa_nodes=8, vfs=88)
    state = DenseScenario(hardware, 250, sidecars=2).state_at(0)
    listed = {i for g in state.allocatable.devices for i in g.device_ids}
    linked = {address for address, _ in hardware.pcie_links}

    assert (8, list(range(8)), {(1,)}, set()) == (
        len(hardware.rdma_devices),
        sorted(h.numa_node for h in hardware.rdma_devices),
        {h.ports for h in hardware.rdma_devices},
        {h.pci_address for h in hardware.rdma_devices} - linked,
    )
    assert not listed & {h.pci_address for h in hardware.rdma_devices}
