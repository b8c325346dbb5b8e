"""Converting a List reply while re-using the pods of the last one."""

from __future__ import annotations

from dataclasses import replace

from exporter.kubelet.convert import (
    list_response_to_proto,
    pods_from_list_response,
    pods_from_list_response_reusing,
)
from exporter.model import ClaimDevice, ContainerResources, DynamicResource, PodResources
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
