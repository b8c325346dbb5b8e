"""Tests for exporter.sim.kubelet, spoken to with plain gRPC stubs over its unix socket."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest

from exporter.kubelet.api.v1 import api_pb2 as v1
from exporter.kubelet.api.v1 import api_pb2_grpc as v1_grpc
from exporter.kubelet.api.v1alpha1 import api_pb2 as v1alpha1
from exporter.kubelet.api.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from exporter.kubelet.convert import (
    allocatable_from_proto,
    pod_from_proto,
    pods_from_list_response,
    pods_from_v1alpha1_list_response,
)
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    ContainerResources,
    DeviceGroup,
    DynamicResource,
    PodResources,
)
from exporter.sim.kubelet import (
    KUBELET_RATE_LIMIT_BURST,
    KUBELET_RATE_LIMIT_QPS,
    PADDING_NAMESPACE,
    V1_GET,
    V1_GET_ALLOCATABLE,
    V1_LIST,
    V1ALPHA1_LIST,
    SimKubelet,
)

MIB = 1024 * 1024
TIMEOUT_S = 2.0

POD = PodResources(
    namespace="ml",
    name="trainer-0",
    containers=(
        ContainerResources(
            name="main",
            devices=(
                DeviceGroup(resource="nvidia.com/gpu", device_ids=("GPU-aaaa",), numa_nodes=(1,)),
            ),
            cpu_ids=(4, 5),
        ),
    ),
)
ALLOCATABLE = AllocatableResources(
    devices=(DeviceGroup(resource="nvidia.com/gpu", device_ids=("GPU-aaaa",), numa_nodes=(1,)),),
    cpu_ids=(0, 1, 4, 5),
)


@pytest.fixture
async def sim(socket_path: str) -> AsyncIterator[SimKubelet]:
    kubelet = SimKubelet(socket_path=socket_path)
    kubelet.set_state(pods=(POD,), allocatable=ALLOCATABLE)
    await kubelet.start()
    yield kubelet
    await kubelet.stop()


@pytest.fixture
async def channel(socket_path: str) -> AsyncIterator[Any]:
    async with grpc.aio.insecure_channel(
        f"unix://{socket_path}", options=[("grpc.max_receive_message_length", -1)]
    ) as chan:
        yield chan


@pytest.fixture
def stub(channel: Any) -> Any:
    return v1_grpc.PodResourcesListerStub(channel)


@pytest.fixture
def alpha_stub(channel: Any) -> Any:
    return v1alpha1_grpc.PodResourcesListerStub(channel)


async def list_v1(stub: Any) -> v1.ListPodResourcesResponse:
    reply: v1.ListPodResourcesResponse = await stub.List(
        v1.ListPodResourcesRequest(), timeout=TIMEOUT_S
    )
    return reply


async def status_of(call: Any) -> tuple[str, str]:
    """The (code name, details) a call fails with."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call
    return caught.value.code().name, caught.value.details()


def _trainer_0(reply: v1.ListPodResourcesResponse) -> v1.PodResources:
    return next(p for p in reply.pod_resources if p.name == "trainer-0")


class TestServing:
    async def test_v1_list_serves_state(self, sim: SimKubelet, stub: Any) -> None:
        """v1 List answers with the pods set by set_state."""
        assert pods_from_list_response(await list_v1(stub)) == (POD,)

    async def test_v1alpha1_list_serves_devices(self, sim: SimKubelet, alpha_stub: Any) -> None:
        """v1alpha1 List on the same socket answers with names and device IDs only."""
        reply = await alpha_stub.List(v1alpha1.ListPodResourcesRequest(), timeout=TIMEOUT_S)
        expected = PodResources(
            namespace="ml",
            name="trainer-0",
            containers=(
                ContainerResources(
                    name="main",
                    devices=(DeviceGroup(resource="nvidia.com/gpu", device_ids=("GPU-aaaa",)),),
                ),
            ),
        )
        assert pods_from_v1alpha1_list_response(reply) == (expected,)

    async def test_allocatable_serves_state(self, sim: SimKubelet, stub: Any) -> None:
        """GetAllocatableResources answers with the allocatable resources set by set_state."""
        reply = await stub.GetAllocatableResources(
            v1.AllocatableResourcesRequest(), timeout=TIMEOUT_S
        )
        assert allocatable_from_proto(reply) == ALLOCATABLE

    async def test_get_serves_one_pod(self, sim: SimKubelet, stub: Any) -> None:
        """Get answers with the named pod."""
        reply = await stub.Get(
            v1.GetPodResourcesRequest(pod_name="trainer-0", pod_namespace="ml"), timeout=TIMEOUT_S
        )
        assert pod_from_proto(reply.pod_resources) == POD

    async def test_get_unknown_pod_answers_like_kubelet(self, sim: SimKubelet, stub: Any) -> None:
        """Get for an unknown pod answers UNKNOWN with the kubelet's message."""
        call = stub.Get(
            v1.GetPodResourcesRequest(pod_name="gone", pod_namespace="ml"), timeout=TIMEOUT_S
        )
        assert await status_of(call) == ("UNKNOWN", "pod gone in namespace ml not found")

    async def test_get_finds_the_pod_by_namespace_too(self, sim: SimKubelet, stub: Any) -> None:
        """Get looks the pod up by namespace and name (GetPodByName): the same name in
        another namespace is not found."""
        call = stub.Get(
            v1.GetPodResourcesRequest(pod_name="trainer-0", pod_namespace="default"),
            timeout=TIMEOUT_S,
        )
        assert await status_of(call) == (
            "UNKNOWN",
            "pod trainer-0 in namespace default not found",
        )

    async def test_set_state_takes_effect_at_once(self, sim: SimKubelet, stub: Any) -> None:
        """A new state is what the next call sees."""
        sim.set_state(pods=(), allocatable=ALLOCATABLE)
        assert pods_from_list_response(await list_v1(stub)) == ()

    async def test_calls_counted_per_method(
        self, sim: SimKubelet, stub: Any, alpha_stub: Any
    ) -> None:
        """Every call that reaches the server is counted under its qualified method name."""
        await list_v1(stub)
        await list_v1(stub)
        await stub.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT_S)
        await status_of(stub.Get(v1.GetPodResourcesRequest(), timeout=TIMEOUT_S))
        await alpha_stub.List(v1alpha1.ListPodResourcesRequest(), timeout=TIMEOUT_S)
        assert sim.calls == Counter(
            {V1_LIST: 2, V1_GET_ALLOCATABLE: 1, V1_GET: 1, V1ALPHA1_LIST: 1}
        )


class TestMisbehaviour:
    async def test_unimplemented_answers_unimplemented(self, sim: SimKubelet, stub: Any) -> None:
        """A method in `unimplemented` answers UNIMPLEMENTED like an older kubelet."""
        sim.unimplemented = {V1_GET}
        call = stub.Get(v1.GetPodResourcesRequest(), timeout=TIMEOUT_S)
        assert await status_of(call) == (
            "UNIMPLEMENTED",
            "unknown method Get for service v1.PodResourcesLister",
        )

    async def test_unimplemented_service_answers_unknown_service(
        self, sim: SimKubelet, stub: Any, alpha_stub: Any
    ) -> None:
        """A kubelet without a whole service (v1 before 1.20, v1alpha1 should it be
        dropped) answers in grpc-go's words for an unknown service, not method."""
        sim.unimplemented = {V1_LIST, V1_GET_ALLOCATABLE, V1_GET, V1ALPHA1_LIST}
        v1_list = await status_of(stub.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT_S))
        alpha_list = await status_of(
            alpha_stub.List(v1alpha1.ListPodResourcesRequest(), timeout=TIMEOUT_S)
        )
        assert (v1_list, alpha_list) == (
            ("UNIMPLEMENTED", "unknown service v1.PodResourcesLister"),
            ("UNIMPLEMENTED", "unknown service v1alpha1.PodResourcesLister"),
        )

    async def test_unimplemented_spends_no_rate_limit_token(
        self, sim: SimKubelet, stub: Any
    ) -> None:
        """grpc-go answers a method it does not serve before the kubelet's rate-limit
        interceptor runs: never RESOURCE_EXHAUSTED, and the token stays for a real call."""
        sim.rate_limit(qps=0.001, burst=1)
        sim.unimplemented = {V1_GET}
        codes = [
            (await status_of(stub.Get(v1.GetPodResourcesRequest(), timeout=TIMEOUT_S)))[0]
            for _ in range(3)
        ]
        assert (codes, len((await list_v1(stub)).pod_resources)) == (["UNIMPLEMENTED"] * 3, 1)

    async def test_unimplemented_v1_list_leaves_v1alpha1(
        self, sim: SimKubelet, stub: Any, alpha_stub: Any
    ) -> None:
        """With v1 List unimplemented, v1alpha1 List still answers."""
        sim.unimplemented = {V1_LIST}
        failed = await status_of(stub.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT_S))
        reply = await alpha_stub.List(v1alpha1.ListPodResourcesRequest(), timeout=TIMEOUT_S)
        assert (failed[0], len(reply.pod_resources)) == ("UNIMPLEMENTED", 1)

    async def test_disabled_answers_kubelet_messages(self, sim: SimKubelet, stub: Any) -> None:
        """Disabled Get and GetAllocatableResources answer UNKNOWN with the kubelet's words,
        spelled as server_v1.go spells them: "Pod Resources" in two words for the latter."""
        sim.disabled = {V1_GET, V1_GET_ALLOCATABLE}
        get = await status_of(stub.Get(v1.GetPodResourcesRequest(), timeout=TIMEOUT_S))
        allocatable = await status_of(
            stub.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT_S)
        )
        assert (get, allocatable) == (
            ("UNKNOWN", "PodResources API Get method disabled"),
            ("UNKNOWN", "Pod Resources API GetAllocatableResources disabled"),
        )

    async def test_dynamic_resources_gate_off(self, sim: SimKubelet, stub: Any) -> None:
        """With dynamic_resources off, List and Get leave out every claim, as a kubelet
        before 1.34 does unless KubeletPodResourcesDynamicResources is on."""
        claim = DynamicResource("gpus", "ml", (ClaimDevice("gpu.nvidia.com", "node-a", "gpu-0"),))
        container = replace(POD.containers[0], dynamic_resources=(claim,))
        with_claim = replace(POD, containers=(container,))
        sim.set_state(pods=(with_claim,))
        sim.dynamic_resources = False
        get = await stub.Get(
            v1.GetPodResourcesRequest(pod_name="trainer-0", pod_namespace="ml"), timeout=TIMEOUT_S
        )
        listed = pods_from_list_response(await list_v1(stub))
        assert ((POD,), POD) == (listed, pod_from_proto(get.pod_resources))

    async def test_rate_limit_rejects_past_burst(self, sim: SimKubelet, stub: Any) -> None:
        """Past the burst the server answers RESOURCE_EXHAUSTED, counting the rejected call."""
        sim.rate_limit(qps=0.001, burst=3)
        for _ in range(3):
            await list_v1(stub)
        rejected = await status_of(stub.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT_S))
        assert (rejected, sim.calls[V1_LIST]) == (
            ("RESOURCE_EXHAUSTED", "rejected by rate limit"),
            4,
        )

    async def test_rate_limit_covers_every_method(self, sim: SimKubelet, stub: Any) -> None:
        """The bucket is shared by all methods on the socket, as in the kubelet."""
        sim.rate_limit(qps=0.001, burst=1)
        await list_v1(stub)
        call = stub.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT_S)
        assert (await status_of(call))[0] == "RESOURCE_EXHAUSTED"

    async def test_rate_limit_refills(self, sim: SimKubelet, stub: Any) -> None:
        """Tokens come back at the configured rate: one 20 ms after the last at 50 QPS. On
        the test's clock, which a loaded machine's pause between calls cannot move."""
        now = [0.0]
        sim.rate_limit(qps=50.0, burst=1, clock=lambda: now[0])
        await list_v1(stub)
        now[0] = 0.019
        rejected = await status_of(stub.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT_S))
        now[0] = 0.021
        assert (rejected[0], len((await list_v1(stub)).pod_resources)) == ("RESOURCE_EXHAUSTED", 1)

    async def test_rate_limit_at_the_kubelets_values(self, sim: SimKubelet, stub: Any) -> None:
        """At the kubelet's DefaultQPS 100 and DefaultBurstTokens 10 (podresources
        grpc/ratelimit.go): ten calls at once, the eleventh refused, one more 10 ms on."""
        now = [0.0]
        sim.rate_limit(
            qps=KUBELET_RATE_LIMIT_QPS, burst=KUBELET_RATE_LIMIT_BURST, clock=lambda: now[0]
        )
        for _ in range(10):
            await list_v1(stub)
        rejected = await status_of(stub.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT_S))
        now[0] = 0.0101
        assert (rejected[0], len((await list_v1(stub)).pod_resources)) == ("RESOURCE_EXHAUSTED", 1)

    async def test_clear_rate_limit(self, sim: SimKubelet, stub: Any) -> None:
        """clear_rate_limit() lets every call through again."""
        sim.rate_limit(qps=0.001, burst=0)
        sim.clear_rate_limit()
        assert len((await list_v1(stub)).pod_resources) == 1

    async def test_force_code_fails_every_call(
        self, sim: SimKubelet, stub: Any, alpha_stub: Any
    ) -> None:
        """force_code makes every method fail with that code."""
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        codes = [
            (await status_of(stub.List(v1.ListPodResourcesRequest(), timeout=TIMEOUT_S)))[0],
            (await status_of(stub.Get(v1.GetPodResourcesRequest(), timeout=TIMEOUT_S)))[0],
            (
                await status_of(
                    alpha_stub.List(v1alpha1.ListPodResourcesRequest(), timeout=TIMEOUT_S)
                )
            )[0],
        ]
        assert codes == ["UNAVAILABLE"] * 3

    async def test_hang_runs_past_deadline(self, sim: SimKubelet, stub: Any) -> None:
        """While hanging the server does not answer before the client's deadline."""
        sim.hang = True
        call = stub.List(v1.ListPodResourcesRequest(), timeout=0.1)
        assert (await status_of(call))[0] == "DEADLINE_EXCEEDED"

    async def test_hang_released_answers(self, sim: SimKubelet, stub: Any) -> None:
        """A hung call answers normally once hang is turned off."""
        sim.hang = True
        call = asyncio.ensure_future(list_v1(stub))
        await asyncio.sleep(0.05)
        pending = not call.done()
        sim.hang = False
        reply = await call
        assert (pending, len(reply.pod_resources)) == (True, 1)

    async def test_padding_makes_list_bigger(self, sim: SimKubelet, stub: Any) -> None:
        """padding_bytes adds synthetic pods so the reply grows past gRPC's 4 MiB default."""
        sim.padding_bytes = 5 * MIB
        reply = await list_v1(stub)
        pods = pods_from_list_response(reply)
        assert (
            reply.ByteSize() > 5 * MIB,
            pods[0],
            {p.namespace for p in pods[1:]},
        ) == (True, POD, {PADDING_NAMESPACE})

    async def test_padding_smaller_than_one_id_still_pads(self, sim: SimKubelet, stub: Any) -> None:
        """Replies grow by at least padding_bytes, however few: one byte adds a pod."""
        plain = (await list_v1(stub)).ByteSize()
        sim.padding_bytes = 1
        assert (await list_v1(stub)).ByteSize() > plain

    async def test_padding_follows_its_knobs(self, sim: SimKubelet, stub: Any) -> None:
        """Changing padding_bytes or padding_id_bytes between calls changes the padding;
        padding pods keep their shape (one entry of all their IDs) under kubelet_order."""

        def padding(reply: v1.ListPodResourcesResponse) -> list[tuple[int, set[int]]]:
            return [
                (
                    len(p.containers[0].devices),
                    {len(i) for i in p.containers[0].devices[0].device_ids},
                )
                for p in reply.pod_resources
                if p.namespace == PADDING_NAMESPACE
            ]

        sim.padding_bytes, sim.padding_id_bytes = 1000, 100
        first = padding(await list_v1(stub))
        sim.padding_id_bytes = 50
        shorter = padding(await list_v1(stub))
        sim.padding_bytes = 60_000
        more = padding(await list_v1(stub))
        assert (first, shorter, more) == ([(1, {100})], [(1, {50})], [(1, {50})] * 3)

    async def test_padding_reaches_v1alpha1_too(self, sim: SimKubelet, alpha_stub: Any) -> None:
        """v1alpha1 List answers the same padded pods as v1 List."""
        sim.padding_bytes = 64 * 1024
        reply = await alpha_stub.List(v1alpha1.ListPodResourcesRequest(), timeout=TIMEOUT_S)
        assert (reply.ByteSize() > 64 * 1024, {p.namespace for p in reply.pod_resources}) == (
            True,
            {"ml", PADDING_NAMESPACE},
        )


class TestLifecycle:
    async def test_start_twice_is_refused(self, sim: SimKubelet) -> None:
        """A second start() of a running kubelet raises instead of serving twice."""
        with pytest.raises(RuntimeError, match="already started"):
            await sim.start()

    async def test_stop_removes_socket(self, sim: SimKubelet, socket_path: str) -> None:
        """stop() removes the socket file, like a kubelet going down."""
        await sim.stop()
        exists = await asyncio.to_thread(Path(socket_path).exists)
        assert (exists, sim.running) == (False, False)

    async def test_stop_aborts_hung_calls(self, sim: SimKubelet, stub: Any) -> None:
        """Stopping the server ends calls that were hanging."""
        sim.hang = True
        call = asyncio.ensure_future(list_v1(stub))
        await asyncio.sleep(0.05)
        await sim.stop()
        assert (await status_of(call))[0] in {"UNAVAILABLE", "CANCELLED"}

    def test_a_loop_ending_as_stop_returns_logs_no_error(
        self, socket_path: str, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """A call in flight is over when stop() returns: gRPC's task for it, left to the
        end of asyncio.run(), was cancelled there and logged as an ERROR with a traceback
        ("Exception not handled by _handle_exceptions"), as --demo stopped mid-poll did."""

        async def stop_during_a_call() -> None:
            sim = SimKubelet(socket_path=socket_path)
            await sim.start()
            sim.hang = True
            arrived = asyncio.Event()
            admit = sim.admit

            async def admit_noted(method: str, context: Any) -> None:
                arrived.set()
                await admit(method, context)  # held there: hang

            sim.admit = admit_noted  # type: ignore[method-assign]
            channel = grpc.aio.insecure_channel(f"unix://{socket_path}")
            call = asyncio.ensure_future(list_v1(v1_grpc.PodResourcesListerStub(channel)))
            await arrived.wait()
            await sim.stop()
            call.cancel()  # the loop ends now, as the exporter's does after its last stop

        asyncio.run(stop_during_a_call())

        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert ([], "") == (errors, capsys.readouterr().err)

    async def test_restart_serves_again(self, sim: SimKubelet, socket_path: str) -> None:
        """After restart() a new connection on the same path is served."""
        await sim.restart()
        async with grpc.aio.insecure_channel(f"unix://{socket_path}") as fresh:
            reply = await list_v1(v1_grpc.PodResourcesListerStub(fresh))
        assert pods_from_list_response(reply) == (POD,)

    async def test_start_replaces_stale_socket(self, socket_path: str) -> None:
        """A leftover socket file from a previous run does not stop start()."""
        await asyncio.to_thread(Path(socket_path).touch)
        async with SimKubelet(socket_path=socket_path) as kubelet:
            kubelet.set_state(pods=(POD,))
            async with grpc.aio.insecure_channel(f"unix://{socket_path}") as chan:
                reply = await list_v1(v1_grpc.PodResourcesListerStub(chan))
        assert pods_from_list_response(reply) == (POD,)


class TestKubeletOrder:
    """The kubelet walks Go maps: replies of an unchanged node differ in order and bytes."""

    BUSY = tuple(
        PodResources(
            namespace="ml",
            name=f"trainer-{n}",
            containers=(
                ContainerResources(
                    name="main",
                    devices=(
                        DeviceGroup(
                            resource="nvidia.com/gpu",
                            device_ids=tuple(f"GPU-{n}-{i}" for i in range(4)),
                            numa_nodes=(0, 1),
                        ),
                    ),
                    cpu_ids=tuple(range(8 * n, 8 * n + 8)),
                ),
            ),
        )
        for n in range(6)
    )

    async def test_replies_change_order_not_content(self, sim: SimKubelet, stub: Any) -> None:
        """Each reply is a new order (pods, device entries, CPU ids); all convert alike."""
        sim.set_state(pods=self.BUSY)
        replies = [await list_v1(stub) for _ in range(4)]
        assert len({r.SerializeToString() for r in replies}) == 4
        assert {pods_from_list_response(r) for r in replies} == {self.BUSY}

    async def test_order_keeps_everything_else(self, sim: SimKubelet, stub: Any) -> None:
        """Containers stay in the pod's order (sidecar first), and a claim's devices and
        the pod-level CPU ids come back whole, however shuffled."""
        claim = DynamicResource(
            "gpus",
            "ml",
            tuple(ClaimDevice("gpu.nvidia.com", "node-a", f"gpu-{i}") for i in range(3)),
        )
        pod = PodResources(
            namespace="ml",
            name="trainer-0",
            containers=(
                ContainerResources(name="log-shipper"),
                ContainerResources(name="main", cpu_ids=(4, 5), dynamic_resources=(claim,)),
                ContainerResources(name="metrics"),
            ),
            cpu_ids=(2, 3, 4, 5),
        )
        sim.set_state(pods=(pod,))
        replies = [await list_v1(stub) for _ in range(3)]
        assert {pods_from_list_response(r) for r in replies} == {(pod,)}
        assert {tuple(c.name for c in r.pod_resources[0].containers) for r in replies} == {
            ("log-shipper", "main", "metrics")
        }

    async def test_every_device_is_an_entry_per_numa_node(self, sim: SimKubelet, stub: Any) -> None:
        """As containerDevicesFromResourceDeviceInstances sends them: one ID, one node."""
        sim.set_state(pods=self.BUSY[:1])
        (pod,) = (await list_v1(stub)).pod_resources
        entries = sorted(
            (d.resource_name, tuple(d.device_ids), tuple(n.ID for n in d.topology.nodes))
            for d in pod.containers[0].devices
        )
        assert entries == sorted(
            ("nvidia.com/gpu", (f"GPU-0-{i}",), (node,)) for i in range(4) for node in (0, 1)
        )

    @pytest.mark.parametrize(
        "part",
        [
            pytest.param(lambda r: [p.name for p in r.pod_resources], id="pods"),
            pytest.param(
                lambda r: [d.device_ids[0] for d in _trainer_0(r).containers[0].devices],
                id="device-entries",
            ),
            pytest.param(lambda r: list(_trainer_0(r).containers[0].cpu_ids), id="cpu-ids"),
        ],
    )
    async def test_each_part_comes_in_a_new_order(
        self, sim: SimKubelet, stub: Any, part: Callable[[v1.ListPodResourcesResponse], list[Any]]
    ) -> None:
        """Pods, a container's device entries and its CPU ids each change order between
        replies (the pod manager's, device manager's and cpuset's maps)."""
        sim.set_state(pods=self.BUSY)
        orders = {tuple(part(await list_v1(stub))) for _ in range(4)}
        assert (len(orders), len({tuple(sorted(o)) for o in orders})) == (4, 1)

    async def test_allocatable_in_kubelet_order(self, sim: SimKubelet, stub: Any) -> None:
        """GetAllocatableResources sends one entry per device and NUMA node, a device
        without topology as one entry without any, and devices and CPU ids in a new
        order each call (containerDevicesFromResourceDeviceInstances, UnsortedList)."""
        sim.set_state(
            pods=(),
            allocatable=AllocatableResources(
                devices=(
                    DeviceGroup("nvidia.com/gpu", tuple(f"GPU-{i}" for i in range(4)), (0, 1)),
                    DeviceGroup("example.com/nic", ("0000:01:00.0",)),
                ),
                cpu_ids=tuple(range(16)),
            ),
        )
        replies = [
            await stub.GetAllocatableResources(v1.AllocatableResourcesRequest(), timeout=TIMEOUT_S)
            for _ in range(4)
        ]
        entries = {
            frozenset(
                (
                    d.resource_name,
                    tuple(d.device_ids),
                    d.HasField("topology"),
                    *(n.ID for n in d.topology.nodes),
                )
                for d in r.devices
            )
            for r in replies
        }
        assert entries == {
            frozenset(
                {("example.com/nic", ("0000:01:00.0",), False)}
                | {("nvidia.com/gpu", (f"GPU-{i}",), True, n) for i in range(4) for n in (0, 1)}
            )
        }
        assert (
            len({tuple(d.device_ids[0] for d in r.devices) for r in replies}),
            len({tuple(r.cpu_ids) for r in replies}),
            {tuple(sorted(r.cpu_ids)) for r in replies},
        ) == (4, 4, {tuple(range(16))})

    async def test_off_answers_the_same_bytes(self, sim: SimKubelet, stub: Any) -> None:
        """Without kubelet_order, an unchanged state answers byte-identical replies."""
        sim.kubelet_order = False
        sim.set_state(pods=self.BUSY)
        replies = {(await list_v1(stub)).SerializeToString() for _ in range(3)}
        assert len(replies) == 1
