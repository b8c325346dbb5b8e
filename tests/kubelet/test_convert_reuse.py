"""Converting a List reply while re-using the pods of the last one, and a
GetAllocatableResources reply while re-using the last model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.kubelet import convert
from exporter.kubelet.api.v1 import api_pb2 as v1
from exporter.kubelet.convert import (
    allocatable_from_proto,
    allocatable_from_proto_reusing,
    allocatable_to_proto,
    list_response_to_proto,
    pods_from_list_response,
    pods_from_list_response_reusing,
    sort_in_place,
)
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    ContainerResources,
    DynamicResource,
    PodResources,
)
from exporter.sim.kubelet import SimKubelet
from exporter.sim.scenario import DenseScenario


class TestReusingConversion:
    def test_unchanged_pods_are_the_last_objects_and_the_result_is_the_same(self) -> None:
        """Same model as a fresh conversion; only the replaced pods are new objects."""
        scenario = DenseScenario.create(pod_count=20, cpus=16)
        before = list_response_to_proto(scenario.state_at(0).pods)
        after = list_response_to_proto(scenario.state_at(1).pods)  # one pod in ten replaced

        old, known = pods_from_list_response_reusing(before, {})
        new, _ = pods_from_list_response_reusing(after, known)

        kept = [pod.name for pod in new if any(pod is o for o in old)]
        assert pods_from_list_response(after) == new
        assert sorted(p.name for p in old if p in new) == sorted(kept)
        assert len(new) - 2 == len(kept)

    def test_a_reply_in_another_order_reuses_every_pod(self) -> None:
        """The kubelet's next answer for the same node, in a new order: no pod converted."""
        sim = SimKubelet(socket_path="unused.sock")
        pods = DenseScenario.create(pod_count=20, cpus=16).state_at(0).pods
        first, second = (list_response_to_proto(sim.shaped_pods(pods)) for _ in range(2))
        assert first.SerializeToString() != second.SerializeToString()

        old, known = pods_from_list_response_reusing(first, {})
        new, _ = pods_from_list_response_reusing(second, known)

        assert old == new == pods_from_list_response(list_response_to_proto(pods))
        assert all(a is b for a, b in zip(old, new, strict=True))

    def test_claim_devices_and_pods_of_one_name_in_another_order_are_the_same(self) -> None:
        """A claim's devices from two drivers (listed from a map) and two pods of one name
        (an old and a new one) come in either order: the same pods, in the same order."""
        claim = DynamicResource(
            "both",
            "ml",
            (
                ClaimDevice("gpu.example.com", "node-a", "gpu-0"),
                ClaimDevice("nic.example.com", "node-a", "nic-0"),
            ),
        )
        old = PodResources("ml", "p", (ContainerResources("c", dynamic_resources=(claim,)),))
        new = PodResources("ml", "p", (ContainerResources("c", cpu_ids=(3,)),))
        swapped = replace(claim, devices=claim.devices[::-1])
        renewed = replace(
            old, containers=(replace(old.containers[0], dynamic_resources=(swapped,)),)
        )

        first, known = pods_from_list_response_reusing(list_response_to_proto((old, new)), {})
        second, _ = pods_from_list_response_reusing(list_response_to_proto((new, renewed)), known)

        assert all(a is b for a, b in zip(first, second, strict=True))

    def test_device_entries_and_cpu_ids_in_another_order_are_the_same_pod(self) -> None:
        """Two device entries, a container's CPUs and the pod's own CPUs, each in another
        order: the pod is re-used, not converted again."""

        def reply(order: slice) -> v1.ListPodResourcesResponse:
            container = v1.ContainerResources(
                name="c",
                devices=[
                    v1.ContainerDevices(resource_name="example.com/dev", device_ids=[d])
                    for d in ("d0", "d1")[order]
                ],
                cpu_ids=(2, 3)[order],
            )
            pod = v1.PodResources(
                namespace="ml", name="p", containers=[container], cpu_ids=(0, 1)[order]
            )
            return v1.ListPodResourcesResponse(pod_resources=[pod])

        (old,), known = pods_from_list_response_reusing(reply(slice(None)), {})
        (new,), _ = pods_from_list_response_reusing(reply(slice(None, None, -1)), known)
        assert (old.cpu_ids, old.containers[0].cpu_ids) == ((0, 1), (2, 3))
        assert new is old


def _reply(*cpu_ids_of_pods: tuple[int, ...]) -> v1.ListPodResourcesResponse:
    """One pod per entry, named p0, p1, ..., its one container holding those CPUs."""
    return v1.ListPodResourcesResponse(
        pod_resources=[
            v1.PodResources(
                namespace="ml",
                name=f"p{i}",
                containers=[v1.ContainerResources(name="c", cpu_ids=c)],
            )
            for i, c in enumerate(cpu_ids_of_pods)
        ]
    )


class TestPodsInOrderAlready:
    def test_only_a_pod_out_of_order_is_put_in_order(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """A pod whose bytes as received are those of a known pod is that pod, without
        sorting: one CPU, or several in order. Only the pod in map order is sorted."""
        (one, several, shuffled), known = pods_from_list_response_reusing(
            _reply((4,), (2, 3), (5, 6)), {}
        )
        sorted_pods: list[str] = []

        def counting(pod: v1.PodResources) -> None:
            sorted_pods.append(pod.name)
            sort_in_place(pod)

        monkeypatch.setattr(convert, "sort_in_place", counting)

        again, _ = pods_from_list_response_reusing(_reply((4,), (2, 3), (6, 5)), known)

        assert sorted_pods == ["p2"]
        assert [a is b for a, b in zip(again, (one, several, shuffled), strict=True)] == [True] * 3
        assert shuffled.containers[0].cpu_ids == (5, 6)


class TestReusingAllocatable:
    @staticmethod
    def _replies(
        allocatable: AllocatableResources, count: int
    ) -> list[v1.AllocatableResourcesResponse]:
        """``count`` replies of ``allocatable`` as the kubelet sends them, each in a new order."""
        sim = SimKubelet(socket_path="unused.sock")
        sim.set_state(pods=(), allocatable=allocatable)
        return [allocatable_to_proto(sim.shaped_allocatable()) for _ in range(count)]

    def test_a_reply_in_another_order_is_the_last_model(self) -> None:
        """The kubelet's next answer for the same inventory, in a new order: not
        converted, the very object of the last call, equal to a fresh conversion."""
        allocatable = DenseScenario.create(pod_count=20, cpus=16).allocatable()
        first, second = self._replies(allocatable, 2)
        assert first.SerializeToString() != second.SerializeToString()
        fresh = allocatable_from_proto(allocatable_to_proto(allocatable))

        old, key = allocatable_from_proto_reusing(first, None)
        new, again = allocatable_from_proto_reusing(second, (key, old))

        assert (fresh, fresh, key) == (old, new, again)
        assert new is old

    @pytest.mark.parametrize("change", ["device", "numa", "cpu", "memory", "memory-order"])
    def test_a_changed_inventory_is_converted_again(self, change: str) -> None:
        """A device more, a device on another NUMA node, a CPU less, a memory block
        changed, or the blocks in another order (the model keeps the reply's): a new
        model, the one a fresh conversion gives."""
        allocatable = DenseScenario.create(pod_count=20, cpus=16).allocatable()
        first = allocatable.devices[0]
        changed = {
            "device": replace(
                allocatable, devices=(*allocatable.devices, replace(first, device_ids=("new",)))
            ),
            "numa": replace(
                allocatable, devices=(replace(first, numa_nodes=(9,)), *allocatable.devices[1:])
            ),
            "cpu": replace(allocatable, cpu_ids=allocatable.cpu_ids[1:]),
            "memory": replace(
                allocatable,
                memory=(replace(allocatable.memory[0], size_bytes=1), *allocatable.memory[1:]),
            ),
            "memory-order": replace(allocatable, memory=allocatable.memory[::-1]),
        }[change]
        (before,) = self._replies(allocatable, 1)
        (after,) = self._replies(changed, 1)

        old, key = allocatable_from_proto_reusing(before, None)
        new, _ = allocatable_from_proto_reusing(after, (key, old))

        assert new != old
        assert allocatable_from_proto(allocatable_to_proto(changed)) == new
