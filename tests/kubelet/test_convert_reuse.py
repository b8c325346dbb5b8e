"""Converting a List reply while re-using the pods of the last one."""

from __future__ import annotations

from exporter.kubelet.convert import (
    list_response_to_proto,
    pods_from_list_response,
    pods_from_list_response_reusing,
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
