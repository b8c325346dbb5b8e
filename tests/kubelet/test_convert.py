"""Tests for exporter.kubelet.convert: protobuf <-> model."""

from __future__ import annotations

from exporter.kubelet.api.v1 import api_pb2 as v1
from exporter.kubelet.api.v1alpha1 import api_pb2 as v1alpha1
from exporter.kubelet.convert import (
    allocatable_from_proto,
    allocatable_to_proto,
    get_response_to_proto,
    list_response_to_proto,
    pod_from_proto,
    pod_to_proto,
    pods_from_list_response,
    pods_from_v1alpha1_list_response,
    v1alpha1_list_response_to_proto,
)
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    ContainerResources,
    DeviceGroup,
    DynamicResource,
    MemoryBlock,
    PodResources,
)

GIB = 1024**3

TRAINER = PodResources(
    namespace="ml",
    name="trainer-0",
    containers=(
        ContainerResources(
            name="main",
            devices=(  # canonical: by resource, then NUMA nodes (convert's docstring)
                DeviceGroup(resource="example.com/nic", device_ids=("0000:af:00.1",)),
                DeviceGroup(resource="nvidia.com/gpu", device_ids=("GPU-aaaa",), numa_nodes=(0,)),
                DeviceGroup(
                    resource="nvidia.com/gpu", device_ids=("GPU-bbbb", "GPU-cccc"), numa_nodes=(1,)
                ),
            ),
            cpu_ids=(2, 3, 34, 35),
            memory=(
                MemoryBlock(memory_type="memory", size_bytes=8 * GIB, numa_nodes=(0, 1)),
                MemoryBlock(memory_type="hugepages-1Gi", size_bytes=2 * GIB, numa_nodes=(0,)),
            ),
            dynamic_resources=(
                DynamicResource(
                    claim_name="gpu-claim",
                    claim_namespace="ml",
                    devices=(
                        ClaimDevice(
                            driver="gpu.example.com",
                            pool="node-1",
                            device="gpu-0",
                            share_id="3f2a",
                            cdi_devices=("gpu.example.com/gpu=gpu-0",),
                        ),
                        ClaimDevice(driver="gpu.example.com", pool="node-1", device="gpu-1"),
                    ),
                ),
            ),
        ),
        ContainerResources(name="sidecar"),
    ),
    cpu_ids=(0, 1),
    memory=(MemoryBlock(memory_type="memory", size_bytes=GIB, numa_nodes=(0,)),),
)

ALLOCATABLE = AllocatableResources(
    devices=(
        DeviceGroup(resource="nvidia.com/gpu", device_ids=("GPU-bbbb::0", "GPU-bbbb::1")),
        DeviceGroup(resource="nvidia.com/gpu", device_ids=("GPU-aaaa",), numa_nodes=(0,)),
    ),
    cpu_ids=(0, 1, 2, 3),
    memory=(MemoryBlock(memory_type="hugepages-2Mi", size_bytes=GIB, numa_nodes=(1,)),),
)


class TestRoundTrip:
    def test_pod_survives_model_proto_model(self) -> None:
        """A pod with every kind of resource converts to protobuf and back unchanged."""
        assert pod_from_proto(pod_to_proto(TRAINER)) == TRAINER

    def test_list_response_survives_wire_round_trip(self) -> None:
        """A List reply, serialized and parsed, gives back the same pods, in canonical order."""
        pods = (PodResources(namespace="default", name="idle"), TRAINER)
        wire = list_response_to_proto(pods).SerializeToString()
        assert pods_from_list_response(v1.ListPodResourcesResponse.FromString(wire)) == pods

    def test_allocatable_survives_round_trip(self) -> None:
        """Allocatable resources convert to protobuf and back unchanged."""
        assert allocatable_from_proto(allocatable_to_proto(ALLOCATABLE)) == ALLOCATABLE

    def test_get_response_holds_the_pod(self) -> None:
        """A Get reply carries the pod as pod_resources."""
        assert pod_from_proto(get_response_to_proto(TRAINER).pod_resources) == TRAINER

    def test_cdi_devices_keep_the_kubelets_order(self) -> None:
        """A claim device's CDI devices are the kubelet's list, in its order."""
        device = ClaimDevice(
            "gpu.example.com", "node-1", "gpu-0", cdi_devices=("k8s.example.com/b=x", "a=x")
        )
        pod = PodResources(
            "ml",
            "p",
            (ContainerResources("c", dynamic_resources=(DynamicResource("c", "ml", (device,)),)),),
        )
        assert pod_from_proto(pod_to_proto(pod)) == pod


class TestTopology:
    def test_numa_nodes_come_out_sorted_and_unique(self) -> None:
        """NUMA ids the kubelet lists out of order or twice become a sorted, unique tuple."""
        msg = v1.ContainerDevices(
            resource_name="r",
            device_ids=["d"],
            topology=v1.TopologyInfo(
                nodes=[v1.NUMANode(ID=3), v1.NUMANode(ID=1), v1.NUMANode(ID=3)]
            ),
        )
        converted = allocatable_from_proto(v1.AllocatableResourcesResponse(devices=[msg]))
        assert converted.devices == (
            DeviceGroup(resource="r", device_ids=("d",), numa_nodes=(1, 3)),
        )

    def test_memory_numa_nodes_come_out_sorted_and_unique(self) -> None:
        """A memory block's NUMA ids, listed out of order or twice, likewise."""
        msg = v1.ContainerMemory(
            memory_type="memory",
            size=GIB,
            topology=v1.TopologyInfo(
                nodes=[v1.NUMANode(ID=1), v1.NUMANode(ID=0), v1.NUMANode(ID=1)]
            ),
        )
        converted = allocatable_from_proto(v1.AllocatableResourcesResponse(memory=[msg]))
        assert converted.memory == (
            MemoryBlock(memory_type="memory", size_bytes=GIB, numa_nodes=(0, 1)),
        )

    def test_cpu_ids_come_out_sorted(self) -> None:
        """Exclusive CPU ids are sorted whatever order the kubelet sends."""
        msg = v1.AllocatableResourcesResponse(cpu_ids=[5, 1, 3])
        assert allocatable_from_proto(msg).cpu_ids == (1, 3, 5)

    def test_unknown_topology_is_left_unset(self) -> None:
        """No NUMA nodes in the model means no topology field, as the kubelet sends it."""
        msg = pod_to_proto(
            PodResources(
                namespace="n",
                name="p",
                containers=(
                    ContainerResources(
                        name="c",
                        devices=(DeviceGroup(resource="r", device_ids=("d",)),),
                        memory=(MemoryBlock(memory_type="memory", size_bytes=1),),
                    ),
                ),
            )
        )
        container = msg.containers[0]
        assert (
            container.devices[0].HasField("topology"),
            container.memory[0].HasField("topology"),
        ) == (False, False)


class TestShareId:
    def test_unset_share_id_is_none(self) -> None:
        """A ClaimResource without share_id converts to share_id None."""
        msg = v1.ContainerResources(
            name="c",
            dynamic_resources=[
                v1.DynamicResource(
                    claim_name="x",
                    claim_namespace="ns",
                    claim_resources=[
                        v1.ClaimResource(driver_name="d", pool_name="p", device_name="g")
                    ],
                )
            ],
        )
        pod = pod_from_proto(v1.PodResources(name="p", namespace="ns", containers=[msg]))
        claim = pod.containers[0].dynamic_resources[0].devices[0]
        assert claim == ClaimDevice(driver="d", pool="p", device="g", share_id=None)

    def test_empty_share_id_is_kept_apart_from_unset(self) -> None:
        """An explicitly set empty share_id stays "" rather than None."""
        msg = v1.ClaimResource(driver_name="d", pool_name="p", device_name="g", share_id="")
        pod = pod_from_proto(
            v1.PodResources(
                containers=[
                    v1.ContainerResources(
                        dynamic_resources=[v1.DynamicResource(claim_resources=[msg])]
                    )
                ]
            )
        )
        assert pod.containers[0].dynamic_resources[0].devices[0].share_id == ""

    def test_none_share_id_leaves_field_unset(self) -> None:
        """share_id None in the model is not sent at all."""
        pod = PodResources(
            namespace="ns",
            name="p",
            containers=(
                ContainerResources(
                    name="c",
                    dynamic_resources=(
                        DynamicResource(
                            claim_name="x",
                            claim_namespace="ns",
                            devices=(ClaimDevice(driver="d", pool="p", device="g"),),
                        ),
                    ),
                ),
            ),
        )
        claim = pod_to_proto(pod).containers[0].dynamic_resources[0].claim_resources[0]
        assert not claim.HasField("share_id")


class TestReservedClassName:
    def test_class_name_is_not_a_field(self) -> None:
        """DynamicResource has no class_name and no field number 1 (removed in 1.31)."""
        fields = v1.DynamicResource.DESCRIPTOR.fields_by_name
        numbers = v1.DynamicResource.DESCRIPTOR.fields_by_number
        assert ("class_name" in fields, 1 in numbers) == (False, False)

    def test_old_kubelet_class_name_is_ignored(self) -> None:
        """A pre-1.31 kubelet's class_name (field 1) on the wire does not disturb parsing."""
        claim = v1.DynamicResource(claim_name="x", claim_namespace="ns").SerializeToString()
        class_name = b"\x0a\x0fgpu.example.com"  # field 1, length-delimited, 15 bytes
        msg = v1.DynamicResource.FromString(class_name + claim)
        pod = pod_from_proto(
            v1.PodResources(containers=[v1.ContainerResources(name="c", dynamic_resources=[msg])])
        )
        assert pod.containers[0].dynamic_resources == (
            DynamicResource(claim_name="x", claim_namespace="ns"),
        )


class TestV1alpha1:
    def test_list_response_converts_devices_only(self) -> None:
        """A v1alpha1 List reply gives pods with device IDs and nothing v1alpha1 cannot say."""
        msg = v1alpha1.ListPodResourcesResponse(
            pod_resources=[
                v1alpha1.PodResources(
                    name="p",
                    namespace="ns",
                    containers=[
                        v1alpha1.ContainerResources(
                            name="c",
                            devices=[
                                v1alpha1.ContainerDevices(
                                    resource_name="nvidia.com/gpu", device_ids=["GPU-1", "GPU-2"]
                                )
                            ],
                        )
                    ],
                )
            ]
        )
        expected = (
            PodResources(
                namespace="ns",
                name="p",
                containers=(
                    ContainerResources(
                        name="c",
                        devices=(
                            DeviceGroup(resource="nvidia.com/gpu", device_ids=("GPU-1", "GPU-2")),
                        ),
                    ),
                ),
            ),
        )
        assert pods_from_v1alpha1_list_response(msg) == expected

    def test_pods_come_out_by_namespace_and_name(self) -> None:
        """v1alpha1's pods, in whatever order the kubelet sends, come out in one order."""
        names = [("b", "x"), ("a", "z"), ("a", "y")]
        msg = v1alpha1.ListPodResourcesResponse(
            pod_resources=[v1alpha1.PodResources(namespace=ns, name=n) for ns, n in names]
        )
        converted = pods_from_v1alpha1_list_response(msg)
        assert [(p.namespace, p.name) for p in converted] == sorted(names)

    def test_model_to_v1alpha1_drops_what_it_cannot_say(self) -> None:
        """Serving a full pod as v1alpha1 keeps names and device IDs only."""
        expected = (
            PodResources(
                namespace="ml",
                name="trainer-0",
                containers=(
                    ContainerResources(
                        name="main",
                        devices=(  # no topology in v1alpha1: one group per resource
                            DeviceGroup(resource="example.com/nic", device_ids=("0000:af:00.1",)),
                            DeviceGroup(
                                resource="nvidia.com/gpu",
                                device_ids=("GPU-aaaa", "GPU-bbbb", "GPU-cccc"),
                            ),
                        ),
                    ),
                    ContainerResources(name="sidecar"),
                ),
            ),
        )
        wire = v1alpha1_list_response_to_proto((TRAINER,))
        assert pods_from_v1alpha1_list_response(wire) == expected


class TestKubeletShape:
    """The kubelet sends one entry per device ID and NUMA node, in map order."""

    def test_entries_per_device_and_node_merge_into_groups(self) -> None:
        """A device on NUMA nodes 0 and 1 comes as two entries; the model has it once."""
        container = v1.ContainerResources(
            name="main",
            devices=[
                v1.ContainerDevices(
                    resource_name="nvidia.com/gpu",
                    device_ids=[device_id],
                    topology=v1.TopologyInfo(nodes=[v1.NUMANode(ID=node)]),
                )
                for device_id, node in (("GPU-b", 1), ("GPU-a", 0), ("GPU-b", 0), ("GPU-c", 0))
            ]
            + [v1.ContainerDevices(resource_name="example.com/nic", device_ids=["0000:af:00.1"])],
            cpu_ids=[35, 2, 34, 3],
        )
        pod = pod_from_proto(v1.PodResources(namespace="ml", name="p", containers=[container]))
        assert pod.containers[0].devices == (
            DeviceGroup(resource="example.com/nic", device_ids=("0000:af:00.1",)),
            DeviceGroup(resource="nvidia.com/gpu", device_ids=("GPU-a", "GPU-c"), numa_nodes=(0,)),
            DeviceGroup(resource="nvidia.com/gpu", device_ids=("GPU-b",), numa_nodes=(0, 1)),
        )
        assert pod.containers[0].cpu_ids == (2, 3, 34, 35)

    def test_a_claims_devices_in_any_order_give_one_model(self) -> None:
        """Get's pod is converted as it comes: a claim's devices, listed driver by driver
        from a map, and two shares of one device, in either order give one model."""
        claim = DynamicResource(
            "shared",
            "ml",
            (
                ClaimDevice("gpu.example.com", "node-1", "gpu-0", share_id="a"),
                ClaimDevice("gpu.example.com", "node-1", "gpu-0", share_id="b"),
                ClaimDevice("nic.example.com", "node-1", "nic-0"),
            ),
        )
        models = [
            pod_from_proto(
                pod_to_proto(
                    PodResources(
                        "ml",
                        "p",
                        (
                            ContainerResources(
                                "c", dynamic_resources=(DynamicResource("shared", "ml", devices),)
                            ),
                        ),
                    )
                )
            )
            for devices in (claim.devices, claim.devices[::-1])
        ]
        assert models[0] == models[1]
        assert models[0].containers[0].dynamic_resources == (claim,)

    def test_pods_come_out_by_namespace_and_name(self) -> None:
        """Whatever order the reply has, the model's pods are sorted."""
        names = [("ml", "b"), ("default", "z"), ("ml", "a")]
        reply = v1.ListPodResourcesResponse(
            pod_resources=[v1.PodResources(namespace=ns, name=n) for ns, n in names]
        )
        assert [(p.namespace, p.name) for p in pods_from_list_response(reply)] == sorted(names)
