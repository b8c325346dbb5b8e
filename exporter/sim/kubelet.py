"""A simulated kubelet: a real grpc.aio PodResources server on a unix socket.

It serves v1 (List, GetAllocatableResources, Get) and v1alpha1 (List) from model objects,
answers like the real kubelet (same codes, same messages, and with ``kubelet_order`` the
same shape and order: below) and can be made to misbehave:
hang, lack or disable methods, rate-limit, fail every call, send huge replies or send
bytes that are no protobuf message at all.
Method names everywhere are qualified by API version, as in ``calls``: "v1.List".

The real kubelet walks Go maps to answer (pkg/kubelet/apis/podresources/server_v1.go;
pkg/kubelet/cm/container_manager_linux.go's
``containerDevicesFromResourceDeviceInstances``; the CPU manager's ``cpuset``), so two
answers from an unchanged node are rarely the same bytes: pods, devices and CPU ids come
in a new order each call, and every device is its own ``ContainerDevices`` entry, once per
NUMA node of its topology. ``kubelet_order`` (on by default) answers so; off, replies come
in the state's order and shape, byte-identical while the state is.
"""

from __future__ import annotations

import asyncio
import os
import pathlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn, TypeAlias, TypeVar

import grpc  # type: ignore[import-untyped, unused-ignore]  # grpcio ships no stubs

from exporter.kubelet.api.v1 import api_pb2 as v1
from exporter.kubelet.api.v1 import api_pb2_grpc as v1_grpc
from exporter.kubelet.api.v1alpha1 import api_pb2 as v1alpha1
from exporter.kubelet.api.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from exporter.kubelet.client import unix_target
from exporter.kubelet.convert import (
    allocatable_to_proto,
    get_response_to_proto,
    list_response_to_proto,
    v1alpha1_list_response_to_proto,
)
from exporter.model import AllocatableResources, ContainerResources, DeviceGroup, PodResources
from exporter.ratelimit import TokenBucket

__all__ = [
    "DISABLED_MESSAGES",
    "KUBELET_RATE_LIMIT_BURST",
    "KUBELET_RATE_LIMIT_QPS",
    "METHODS",
    "PADDING_NAMESPACE",
    "RATE_LIMIT_MESSAGE",
    "UNDECODABLE_REPLY",
    "V1ALPHA1_LIST",
    "V1_GET",
    "V1_GET_ALLOCATABLE",
    "V1_LIST",
    "SimKubelet",
]

V1_LIST = "v1.List"
V1_GET_ALLOCATABLE = "v1.GetAllocatableResources"
V1_GET = "v1.Get"
V1ALPHA1_LIST = "v1alpha1.List"
METHODS = (V1_LIST, V1_GET_ALLOCATABLE, V1_GET, V1ALPHA1_LIST)

# What the kubelet answers, word for word (pkg/kubelet/apis/podresources/server_v1.go):
# "Pod Resources" in two words for GetAllocatableResources (kubelets 1.21 to 1.27, gate
# KubeletPodResourcesGetAllocatable, locked on from 1.28), one for Get (gate
# KubeletPodResourcesGet).
DISABLED_MESSAGES = {
    V1_GET: "PodResources API Get method disabled",
    V1_GET_ALLOCATABLE: "Pod Resources API GetAllocatableResources disabled",
}
RATE_LIMIT_MESSAGE = "rejected by rate limit"
KUBELET_RATE_LIMIT_QPS = 100.0  # the real kubelet's limit for the whole socket
KUBELET_RATE_LIMIT_BURST = 10

# A length-delimited field 1 claiming 127 bytes, followed by none: truncated, so no
# protobuf parser accepts it, whatever message it expects.
UNDECODABLE_REPLY = b"\x0a\x7f"

_V1_REQUESTS: dict[str, Any] = {
    "List": v1.ListPodResourcesRequest,
    "GetAllocatableResources": v1.AllocatableResourcesRequest,
    "Get": v1.GetPodResourcesRequest,
}
_V1ALPHA1_REQUESTS: dict[str, Any] = {"List": v1alpha1.ListPodResourcesRequest}

PADDING_NAMESPACE = "sim-padding"  # synthetic pods that only make List replies bigger
_PADDING_RESOURCE = "sim.example.com/padding"
_PADDING_ID_BYTES = 200
_PADDING_IDS_PER_POD = 500

# grpc.aio runs each call a server accepted in a task of this coroutine (its
# server.pyx.pxi); how long stop() waits for another server's to end.
_GRPC_CALL_COROUTINE = "_schedule_rpc_coro"
CALLS_END_TIMEOUT_S = 1.0

_Reply = TypeVar("_Reply")
_Item = TypeVar("_Item")
_Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


def _padding_pods(padding_bytes: int, id_bytes: int) -> tuple[PodResources, ...]:
    # Long device IDs in pods of a bounded size: the reply grows by at least padding_bytes.
    count = -(-padding_bytes // id_bytes)
    pods = []
    for first in range(0, count, _PADDING_IDS_PER_POD):
        ids = tuple(
            f"pad-{i:012d}-".ljust(id_bytes, "x")
            for i in range(first, min(first + _PADDING_IDS_PER_POD, count))
        )
        pods.append(
            PodResources(
                namespace=PADDING_NAMESPACE,
                name=f"padding-{first // _PADDING_IDS_PER_POD}",
                containers=(
                    ContainerResources(
                        name="padding",
                        devices=(DeviceGroup(resource=_PADDING_RESOURCE, device_ids=ids),),
                    ),
                ),
            )
        )
    return tuple(pods)


class SimKubelet:
    """PodResources server on ``socket_path``; set the knobs as attributes at any time."""

    def __init__(self, *, socket_path: str) -> None:
        self.socket_path = socket_path
        self._target = unix_target(os.path.abspath(socket_path))
        self.calls: Counter[str] = Counter()  # every call that reached the server
        self.unimplemented: set[str] = set()  # answer UNIMPLEMENTED, like an older kubelet
        self.disabled: set[str] = set()  # answer UNKNOWN "... disabled" (feature gate off)
        self.force_code: grpc.StatusCode | None = None  # fail every call with this code
        self.force_details: str | None = None  # and these words, where given
        self.padding_bytes = 0  # List replies grow by at least this much
        # ... in device IDs this long: many short ones (a busy node) or few long ones (a
        # big reply that stays cheap to join and render).
        self.padding_id_bytes = _PADDING_ID_BYTES
        self.undecodable: set[str] = set()  # answer OK with bytes no client can parse
        self.kubelet_order = True  # shape and shuffle replies as the kubelet's maps do
        # False: List and Get leave out every container's dynamic_resources, as kubelets
        # before 1.34 do by default (feature gate KubeletPodResourcesDynamicResources off).
        self.dynamic_resources = True
        self.rng = random.Random(0)  # the order kubelet_order draws: seeded, repeatable
        self._hang = False
        self._release = asyncio.Event()
        self._bucket: TokenBucket | None = None
        self._pods: tuple[PodResources, ...] = ()
        self._allocatable = AllocatableResources()
        self._padding: tuple[tuple[int, int], tuple[PodResources, ...]] = ((0, 0), ())
        self._server: grpc.aio.Server | None = None

    # --- knobs ---

    @property
    def hang(self) -> bool:
        """While True, handlers wait past any deadline until it turns False or the server stops."""
        return self._hang

    @hang.setter
    def hang(self, value: bool) -> None:
        self._hang = value
        if value:
            self._release.clear()
        else:
            self._release.set()

    def rate_limit(
        self, *, qps: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Answer RESOURCE_EXHAUSTED past a token bucket, like the kubelet (100 QPS, burst
        10); ``clock`` lets a test say when tokens come back."""
        self._bucket = TokenBucket(rate_per_s=qps, burst=burst, clock=clock)

    def clear_rate_limit(self) -> None:
        """Stop rate limiting (the default)."""
        self._bucket = None

    def set_state(
        self,
        *,
        pods: tuple[PodResources, ...],
        allocatable: AllocatableResources = AllocatableResources(),  # noqa: B008 - frozen, safe to share
    ) -> None:
        """What the kubelet reports from now on."""
        self._pods = pods
        self._allocatable = allocatable

    # --- lifecycle ---

    @property
    def running(self) -> bool:
        return self._server is not None

    async def start(self) -> None:
        """Listen on the socket, replacing a stale socket file as the kubelet does."""
        if self._server is not None:
            raise RuntimeError("SimKubelet already started")
        _unlink(self.socket_path)
        server = grpc.aio.server(
            options=[
                # Replies of busy nodes exceed gRPC's 4 MiB default; let the client decide.
                ("grpc.max_send_message_length", -1),
                ("grpc.max_receive_message_length", -1),
            ]
        )
        _add_service(server, "v1.PodResourcesLister", _V1Servicer(self), _V1_REQUESTS)
        _add_service(
            server, "v1alpha1.PodResourcesLister", _V1alpha1Servicer(self), _V1ALPHA1_REQUESTS
        )
        if server.add_insecure_port(self._target) == 0:
            raise RuntimeError(f"cannot listen on unix socket {self.socket_path}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        """Abort calls in flight, stop serving and remove the socket, as a kubelet going down."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(None)
            await _calls_ended()
        _unlink(self.socket_path)

    async def restart(self) -> None:
        """Stop, then start again on the same path."""
        await self.stop()
        await self.start()

    async def __aenter__(self) -> SimKubelet:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # --- serving ---

    async def admit(self, method: str, context: _Context) -> None:
        """Count the call and apply the knobs, in the kubelet's order: a method it lacks
        first, then the rate limit. grpc-go answers a method or service it does not
        serve before any interceptor runs (server.go, ``handleStream``), so such a call
        spends no token and is never refused as rate-limited."""
        self.calls[method] += 1
        api, _, rpc = method.partition(".")
        if method in self.unimplemented:
            service = f"{api}.PodResourcesLister"
            lacks_service = all(m in self.unimplemented for m in METHODS if m.startswith(f"{api}."))
            await _abort(
                context,
                grpc.StatusCode.UNIMPLEMENTED,
                f"unknown service {service}"
                if lacks_service
                else f"unknown method {rpc} for service {service}",
            )
        if self._bucket is not None and not self._bucket.try_take():
            await _abort(context, grpc.StatusCode.RESOURCE_EXHAUSTED, RATE_LIMIT_MESSAGE)
        if self._hang:
            await self._release.wait()
        if self.force_code is not None:
            details = self.force_details
            if details is None:
                details = f"forced by SimKubelet: {self.force_code.name}"
            await _abort(context, self.force_code, details)
        if method in self.disabled:
            await _abort(
                context,
                grpc.StatusCode.UNKNOWN,
                DISABLED_MESSAGES.get(method, f"PodResources API {rpc} disabled"),
            )

    def reply(self, method: str, message: _Reply) -> _Reply | bytes:
        """``message``, or undecodable bytes where the ``undecodable`` knob names ``method``."""
        return UNDECODABLE_REPLY if method in self.undecodable else message

    def listed_pods(self) -> tuple[PodResources, ...]:
        """The pods List answers with: the state plus any padding pods."""
        if self.padding_bytes <= 0:
            return self._pods
        shape = (self.padding_bytes, self.padding_id_bytes)
        if self._padding[0] != shape:
            self._padding = (shape, _padding_pods(*shape))
        return self._pods + self._padding[1]

    def allocatable(self) -> AllocatableResources:
        return self._allocatable

    def shaped_pods(self, pods: tuple[PodResources, ...]) -> tuple[PodResources, ...]:
        """``pods`` as this kubelet sends them (``dynamic_resources``, ``kubelet_order``)."""
        if not self.dynamic_resources:
            pods = tuple(_without_dynamic_resources(p) for p in pods)
        if not self.kubelet_order:
            return pods
        # Padding pods keep their shape: their knob sets the reply's size.
        shuffled = [
            p if p.namespace == PADDING_NAMESPACE else _pod_in_kubelet_order(p, self.rng)
            for p in pods
        ]
        self.rng.shuffle(shuffled)
        return tuple(shuffled)

    def shaped_allocatable(self) -> AllocatableResources:
        """The allocatable resources as this kubelet sends them (``kubelet_order``)."""
        allocatable = self._allocatable
        if not self.kubelet_order:
            return allocatable
        return replace(
            allocatable,
            devices=_devices_in_kubelet_order(allocatable.devices, self.rng),
            cpu_ids=_shuffled(allocatable.cpu_ids, self.rng),
        )

    def find_pod(self, *, namespace: str, name: str) -> PodResources | None:
        return next((p for p in self._pods if (p.namespace, p.name) == (namespace, name)), None)


class _V1Servicer(v1_grpc.PodResourcesListerServicer):
    def __init__(self, sim: SimKubelet) -> None:
        self._sim = sim

    async def List(  # noqa: N802 - gRPC method name
        self, request: v1.ListPodResourcesRequest, context: _Context
    ) -> v1.ListPodResourcesResponse | bytes:
        await self._sim.admit(V1_LIST, context)
        pods = self._sim.shaped_pods(self._sim.listed_pods())
        return self._sim.reply(V1_LIST, list_response_to_proto(pods))

    async def GetAllocatableResources(  # noqa: N802 - gRPC method name
        self, request: v1.AllocatableResourcesRequest, context: _Context
    ) -> v1.AllocatableResourcesResponse | bytes:
        await self._sim.admit(V1_GET_ALLOCATABLE, context)
        allocatable = self._sim.shaped_allocatable()
        return self._sim.reply(V1_GET_ALLOCATABLE, allocatable_to_proto(allocatable))

    async def Get(  # noqa: N802 - gRPC method name
        self, request: v1.GetPodResourcesRequest, context: _Context
    ) -> v1.GetPodResourcesResponse | bytes:
        await self._sim.admit(V1_GET, context)
        pod = self._sim.find_pod(namespace=request.pod_namespace, name=request.pod_name)
        if pod is None:
            await _abort(
                context,
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        (shaped,) = self._sim.shaped_pods((pod,))
        return self._sim.reply(V1_GET, get_response_to_proto(shaped))


class _V1alpha1Servicer(v1alpha1_grpc.PodResourcesListerServicer):
    def __init__(self, sim: SimKubelet) -> None:
        self._sim = sim

    async def List(  # noqa: N802 - gRPC method name
        self, request: v1alpha1.ListPodResourcesRequest, context: _Context
    ) -> v1alpha1.ListPodResourcesResponse | bytes:
        await self._sim.admit(V1ALPHA1_LIST, context)
        return self._sim.reply(
            V1ALPHA1_LIST,
            v1alpha1_list_response_to_proto(self._sim.shaped_pods(self._sim.listed_pods())),
        )


def _without_dynamic_resources(pod: PodResources) -> PodResources:
    containers = tuple(replace(c, dynamic_resources=()) for c in pod.containers)
    return replace(pod, containers=containers)


def _shuffled(items: tuple[_Item, ...], rng: random.Random) -> tuple[_Item, ...]:
    return tuple(rng.sample(items, len(items)))


def _devices_in_kubelet_order(
    groups: tuple[DeviceGroup, ...], rng: random.Random
) -> tuple[DeviceGroup, ...]:
    # One entry per device ID and NUMA node (none without topology), in map order.
    entries = [
        DeviceGroup(group.resource, (device_id,), (node,) if node is not None else ())
        for group in groups
        for device_id in group.device_ids
        for node in (group.numa_nodes or (None,))
    ]
    rng.shuffle(entries)
    return tuple(entries)


def _pod_in_kubelet_order(pod: PodResources, rng: random.Random) -> PodResources:
    # Containers keep the pod spec's order; what the managers keep in maps does not.
    containers = tuple(
        replace(
            c,
            devices=_devices_in_kubelet_order(c.devices, rng),
            cpu_ids=_shuffled(c.cpu_ids, rng),
            # A claim's devices come driver by driver from a map.
            dynamic_resources=tuple(
                replace(r, devices=_shuffled(r.devices, rng)) for r in c.dynamic_resources
            ),
        )
        for c in pod.containers
    )
    return replace(pod, containers=containers, cpu_ids=_shuffled(pod.cpu_ids, rng))


def _serialize(reply: Any) -> bytes:
    # Raw bytes pass as they are: that is how the undecodable knob reaches the wire.
    return reply if isinstance(reply, bytes) else bytes(reply.SerializeToString())


def _add_service(
    server: grpc.aio.Server, service: str, servicer: Any, requests: dict[str, Any]
) -> None:
    """Register like the generated add_*_to_server, but with a serializer that lets bytes by."""
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            getattr(servicer, name),
            request_deserializer=request_type.FromString,
            response_serializer=_serialize,
        )
        for name, request_type in requests.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))


async def _abort(context: _Context, code: grpc.StatusCode, details: str) -> NoReturn:
    await context.abort(code, details)  # raises, ending the call with this status
    raise AssertionError("unreachable: context.abort() raises")


async def _calls_ended() -> None:
    """Wait for grpc.aio's tasks of the calls an ended server had in flight. stop()
    returns before they end, and one still pending when the event loop closes is
    cancelled there, which gRPC logs as an ERROR with a traceback ("Exception not
    handled by _handle_exceptions"): ``--demo`` stopped during a poll printed one. They
    end within milliseconds; the bound is for another server's calls, which stay."""
    calls = [
        task
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", None) == _GRPC_CALL_COROUTINE
    ]
    if calls:
        await asyncio.wait(calls, timeout=CALLS_END_TIMEOUT_S)


def _unlink(path: str) -> None:
    pathlib.Path(path).unlink(missing_ok=True)
