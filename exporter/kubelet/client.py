"""Async client for the kubelet PodResources API on its unix socket.

One long-lived grpc.aio channel; gRPC reconnects by itself when the kubelet restarts and
recreates the socket, so the client is never recreated. Every call has a deadline, is
counted in ``stats()``, and fails with an ``exporter.kubelet.errors`` exception.

Two things keep load off the kubelet, whose socket is rate-limited for every client on
the node: a method found missing or disabled is not asked again for
``capability_recheck_s``, and after RESOURCE_EXHAUSTED, UNAVAILABLE or a deadline every
call is refused locally for a jittered window that doubles up to ``backoff_max_s``.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import grpc  # type: ignore[import-untyped, unused-ignore]  # grpcio ships no stubs
import structlog
from google.protobuf.message import DecodeError

from exporter.kubelet.api.v1 import api_pb2 as v1
from exporter.kubelet.api.v1 import api_pb2_grpc as v1_grpc
from exporter.kubelet.api.v1alpha1 import api_pb2 as v1alpha1
from exporter.kubelet.api.v1alpha1 import api_pb2_grpc as v1alpha1_grpc
from exporter.kubelet.convert import (
    allocatable_from_proto,
    pod_from_proto,
    pods_from_list_response_reusing,
    pods_from_v1alpha1_list_response,
)
from exporter.kubelet.errors import (
    KubeletError,
    KubeletRateLimited,
    KubeletUnavailable,
    MessageTooLarge,
    MethodUnavailable,
    PodNotFound,
)
from exporter.kubelet.stats import KubeletRequestStats, StatsRecorder
from exporter.model import AllocatableResources, PodResources

__all__ = [
    "DEFAULT_BACKOFF_INITIAL_S",
    "DEFAULT_BACKOFF_MAX_S",
    "DEFAULT_CAPABILITY_RECHECK_S",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_TIMEOUT_S",
    "METHOD_GET",
    "METHOD_GET_ALLOCATABLE",
    "METHOD_LIST",
    "METHOD_V1ALPHA1_LIST",
    "RECONNECT_BACKOFF_INITIAL_MS",
    "RECONNECT_BACKOFF_MAX_MS",
    "KubeletClient",
]

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024  # what the reference client uses; gRPC's is 4 MiB
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_CAPABILITY_RECHECK_S = 300.0
DEFAULT_BACKOFF_INITIAL_S = 1.0
DEFAULT_BACKOFF_MAX_S = 60.0

# gRPC's own reconnect backoff once the socket is gone (defaults: 1 s growing to 120 s).
# Capped low so a restarted kubelet is seen within a few seconds, i.e. inside one poll
# interval; a failed connect on a local unix socket costs nearly nothing.
RECONNECT_BACKOFF_INITIAL_MS = 100
RECONNECT_BACKOFF_MAX_MS = 5_000

# Method names used in stats(), api_status() and logs: the v1 RPC names, and the v1alpha1
# List (the fallback for kubelets without v1) spelled out.
METHOD_LIST = "List"
METHOD_GET_ALLOCATABLE = "GetAllocatableResources"
METHOD_GET = "Get"
METHOD_V1ALPHA1_LIST = "v1alpha1.List"

# A namespace that cannot exist (not a DNS label): Get for it tells "available" from
# "unimplemented/disabled" without asking about a real pod.
_PROBE_NAMESPACE = "-podresources-exporter-probe-"
_PROBE_NAME = "-probe-"

_NOT_FOUND = re.compile(r"^pod \S* in namespace \S* not found")
_TOO_LARGE = re.compile(r"larger than max", re.IGNORECASE)

_BACKOFF_CODES = frozenset({"RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED"})

_T = TypeVar("_T")
_M = TypeVar("_M")

_log = structlog.get_logger()


# --- Backoff -----------------------------------------------------------------------------


class _Backoff:
    """Refuses calls for a window after the kubelet was unreachable or rate-limited."""

    def __init__(
        self, *, initial_s: float, max_s: float, clock: Callable[[], float], rng: random.Random
    ) -> None:
        self._initial_s = initial_s
        self._max_s = max_s
        self._clock = clock
        self._rng = rng
        self._delay_s = initial_s
        self._until: float | None = None
        self._error: KubeletRateLimited | KubeletUnavailable | None = None

    def refusal(self) -> KubeletError | None:
        """The error to raise instead of calling, or None when calling is allowed."""
        if self._until is None or self._error is None:
            return None
        remaining = self._until - self._clock()
        if remaining <= 0:
            return None
        return type(self._error)(
            f"{self._error.message} (backing off, not asking the kubelet for {remaining:.1f} s)"
        )

    def failed(self, error: KubeletRateLimited | KubeletUnavailable) -> None:
        now = self._clock()
        if self._until is not None and now < self._until:
            return  # a concurrent call of the same outage: the window is already open
        if self._error is None:
            _log.warning("kubelet_backoff_started", reason=error.message)
        # "Equal jitter": the window lies in [delay/2, delay], so it never passes the cap.
        window = self._delay_s / 2 + self._rng.uniform(0, self._delay_s / 2)
        self._until = now + window
        self._error = error
        self._delay_s = min(self._delay_s * 2, self._max_s)

    def answered(self) -> None:
        if self._error is not None:
            _log.info("kubelet_backoff_ended")
        self._delay_s = self._initial_s
        self._until = None
        self._error = None


# --- Replies ------------------------------------------------------------------------------


class _ReplyMemo(Generic[_T]):
    """The last reply's raw bytes and what they converted to.

    On a quiet node the kubelet answers the same bytes poll after poll; comparing them
    (microseconds) skips decoding and conversion (milliseconds), and handing back the
    very same object lets the poller skip the join too.
    """

    def __init__(self) -> None:
        self._raw: bytes | None = None
        self._value: _T | None = None

    async def convert(self, raw: bytes, convert: Callable[[bytes], _T]) -> _T:
        """The last value for the same bytes; else ``convert`` in a thread (1,000 pods
        take ~20 ms, which would hold up scrapes on the event loop)."""
        if raw == self._raw and self._value is not None:
            return self._value
        value = await asyncio.to_thread(convert, raw)
        self._raw, self._value = raw, value
        return value


def _decode(method: str, parse: Callable[[bytes], _M], raw: bytes) -> _M:
    try:
        return parse(raw)
    except DecodeError as error:
        raise KubeletError(f"{method}: undecodable reply ({len(raw)} bytes): {error}") from error


# --- Client ------------------------------------------------------------------------------


class KubeletClient:
    """PodResources v1 (with v1alpha1 List as fallback) over one grpc.aio channel."""

    def __init__(
        self,
        *,
        socket_path: str,
        max_message_bytes: int,
        timeout_s: float,
        capability_recheck_s: float = DEFAULT_CAPABILITY_RECHECK_S,
        backoff_initial_s: float = DEFAULT_BACKOFF_INITIAL_S,
        backoff_max_s: float = DEFAULT_BACKOFF_MAX_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._socket_path = socket_path
        self._max_message_bytes = max_message_bytes
        self._timeout_s = timeout_s
        self._capability_recheck_s = capability_recheck_s
        self._clock = clock
        self._backoff = _Backoff(
            initial_s=backoff_initial_s, max_s=backoff_max_s, clock=clock, rng=random.Random()
        )
        self._stats = StatsRecorder()
        # method -> (clock time it was found unavailable, why)
        self._unavailable: dict[str, tuple[float, str]] = {}
        self._channel: grpc.aio.Channel | None = None  # opened on first use, inside the loop
        self._v1: Any = None
        self._v1alpha1: Any = None
        # List and GetAllocatableResources fetched as raw bytes (see _ReplyMemo).
        self._list_raw: Any = None
        self._allocatable_raw: Any = None
        self._pods_memo: _ReplyMemo[tuple[PodResources, ...]] = _ReplyMemo()
        self._pods_by_bytes: dict[bytes, PodResources] = {}  # each pod of the last reply
        self._allocatable_memo: _ReplyMemo[AllocatableResources] = _ReplyMemo()
        self._closed = False

    @property
    def socket_path(self) -> str:
        return self._socket_path

    # --- public calls ---

    async def list_pods(self) -> tuple[PodResources, ...]:
        """Every pod's resources: v1 List, or v1alpha1 List where the kubelet lacks v1."""
        try:
            raw: bytes = await self._call(
                METHOD_LIST,
                lambda: self._raw_calls()[0](v1.ListPodResourcesRequest(), timeout=self._timeout_s),
            )
        except MethodUnavailable:
            pass
        else:
            return await self._pods_memo.convert(raw, self._convert_pods)
        try:
            old: v1alpha1.ListPodResourcesResponse = await self._call(
                METHOD_V1ALPHA1_LIST,
                lambda: self._stubs()[1].List(
                    v1alpha1.ListPodResourcesRequest(), timeout=self._timeout_s
                ),
            )
        except MethodUnavailable as err:
            raise MethodUnavailable(
                f"List: neither v1 nor v1alpha1 available: {err.message}", method=METHOD_LIST
            ) from err
        return pods_from_v1alpha1_list_response(old)

    async def get_allocatable(self) -> AllocatableResources:
        """What the node can allocate; MethodUnavailable where unimplemented or disabled."""
        raw: bytes = await self._call(
            METHOD_GET_ALLOCATABLE,
            lambda: self._raw_calls()[1](v1.AllocatableResourcesRequest(), timeout=self._timeout_s),
        )
        return await self._allocatable_memo.convert(
            raw,
            lambda r: allocatable_from_proto(
                _decode(METHOD_GET_ALLOCATABLE, v1.AllocatableResourcesResponse.FromString, r)
            ),
        )

    async def get_pod(self, *, namespace: str, name: str) -> PodResources:
        """One pod's resources, fresh; PodNotFound, MethodUnavailable."""
        request = v1.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        reply: v1.GetPodResourcesResponse = await self._call(
            METHOD_GET,
            lambda: self._stubs()[0].Get(request, timeout=self._timeout_s),
            pod=(namespace, name),
        )
        if not reply.HasField("pod_resources"):
            raise PodNotFound(
                f"Get: empty reply for pod {name} in namespace {namespace}",
                namespace=namespace,
                name=name,
            )
        return pod_from_proto(reply.pod_resources)

    async def probe_get(self) -> bool:
        """Whether Get works, asked about a pod that cannot exist; updates api_status()."""
        try:
            await self.get_pod(namespace=_PROBE_NAMESPACE, name=_PROBE_NAME)
        except PodNotFound:
            return True
        except MethodUnavailable:
            return False
        return True

    def api_status(self) -> dict[str, bool]:
        """Per method, False once proven unimplemented or disabled (until a recheck works)."""
        return {
            METHOD_LIST: not (
                METHOD_LIST in self._unavailable and METHOD_V1ALPHA1_LIST in self._unavailable
            ),
            METHOD_GET_ALLOCATABLE: METHOD_GET_ALLOCATABLE not in self._unavailable,
            METHOD_GET: METHOD_GET not in self._unavailable,
        }

    @property
    def list_method(self) -> str:
        """The List the client uses now: METHOD_LIST, or METHOD_V1ALPHA1_LIST as fallback."""
        return METHOD_V1ALPHA1_LIST if METHOD_LIST in self._unavailable else METHOD_LIST

    def stats(self) -> KubeletRequestStats:
        """A snapshot of request counts and latencies."""
        return self._stats.snapshot()

    async def close(self) -> None:
        """Close the channel; later calls raise KubeletError."""
        self._closed = True
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    # --- internals ---

    def _stubs(self) -> tuple[Any, Any]:
        if self._channel is None:
            target = (
                f"unix://{self._socket_path}"
                if self._socket_path.startswith("/")
                else f"unix:{self._socket_path}"
            )
            channel = grpc.aio.insecure_channel(
                target,
                options=[
                    ("grpc.max_receive_message_length", self._max_message_bytes),
                    ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_INITIAL_MS),
                    ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_INITIAL_MS),
                    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
                ],
            )
            # Generated gRPC modules carry no annotations.
            self._v1 = v1_grpc.PodResourcesListerStub(channel)  # type: ignore[no-untyped-call]
            v1alpha1_stub = v1alpha1_grpc.PodResourcesListerStub
            self._v1alpha1 = v1alpha1_stub(channel)  # type: ignore[no-untyped-call]
            # No response deserializer: grpc hands back the reply's bytes as they came.
            self._list_raw = channel.unary_unary(
                "/v1.PodResourcesLister/List",
                request_serializer=v1.ListPodResourcesRequest.SerializeToString,
                response_deserializer=None,
            )
            self._allocatable_raw = channel.unary_unary(
                "/v1.PodResourcesLister/GetAllocatableResources",
                request_serializer=v1.AllocatableResourcesRequest.SerializeToString,
                response_deserializer=None,
            )
            self._channel = channel
        return self._v1, self._v1alpha1

    def _convert_pods(self, raw: bytes) -> tuple[PodResources, ...]:
        reply = _decode(METHOD_LIST, v1.ListPodResourcesResponse.FromString, raw)
        pods, self._pods_by_bytes = pods_from_list_response_reusing(reply, self._pods_by_bytes)
        return pods

    def _raw_calls(self) -> tuple[Any, Any]:
        self._stubs()
        return self._list_raw, self._allocatable_raw

    async def _call(
        self,
        method: str,
        invoke: Callable[[], Awaitable[_T]],
        *,
        pod: tuple[str, str] | None = None,
    ) -> _T:
        """One RPC: local refusals first, then the call, its stats and error translation.

        ``pod`` is the (namespace, name) a Get asks for, to tell "not found" apart.
        """
        if self._closed:
            raise KubeletError(f"{method}: kubelet client is closed")
        self._refuse_if_unavailable(method)
        refusal = self._backoff.refusal()
        if refusal is not None:
            raise refusal
        started = time.perf_counter()
        try:
            reply = await invoke()
        except grpc.aio.AioRpcError as err:
            code: str = err.code().name
            self._stats.record(method=method, code=code, seconds=time.perf_counter() - started)
            raise self._translate(method, code=code, details=err.details() or "", pod=pod) from err
        except asyncio.CancelledError:
            self._stats.record(
                method=method, code="CANCELLED", seconds=time.perf_counter() - started
            )
            raise
        self._stats.record(method=method, code="OK", seconds=time.perf_counter() - started)
        self._backoff.answered()
        self._mark_available(method)
        return reply

    def _translate(
        self, method: str, *, code: str, details: str, pod: tuple[str, str] | None
    ) -> KubeletError:
        message = f"{method}: {code}: {details}"
        too_large = code == "RESOURCE_EXHAUSTED" and _TOO_LARGE.search(details) is not None
        if code not in _BACKOFF_CODES or too_large:
            # The kubelet answered (or our own size limit struck): it is reachable.
            self._backoff.answered()
        if too_large:
            return MessageTooLarge(
                f"{method}: reply larger than max_message_bytes={self._max_message_bytes}: "
                f"{details}"
            )
        if code == "RESOURCE_EXHAUSTED":
            rate_limited = KubeletRateLimited(message)
            self._backoff.failed(rate_limited)
            return rate_limited
        if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            unavailable = KubeletUnavailable(f"{message} (socket {self._socket_path})")
            self._backoff.failed(unavailable)
            return unavailable
        if code == "UNIMPLEMENTED" or (code == "UNKNOWN" and "disabled" in details):
            self._mark_unavailable(method, reason=f"{code}: {details}")
            return MethodUnavailable(message, method=method)
        # The kubelet says UNKNOWN "pod X in namespace Y not found"; NOT_FOUND would be the
        # proper code, should a kubelet ever send it.
        if pod is not None and (
            code == "NOT_FOUND" or (code == "UNKNOWN" and _NOT_FOUND.match(details))
        ):
            self._mark_available(method)  # a real answer: the method works
            return PodNotFound(message, namespace=pod[0], name=pod[1])
        return KubeletError(message)

    def _refuse_if_unavailable(self, method: str) -> None:
        found = self._unavailable.get(method)
        if found is None:
            return
        since, reason = found
        wait_s = since + self._capability_recheck_s - self._clock()
        if wait_s > 0:
            raise MethodUnavailable(
                f"{method}: {reason} (not asked again for {wait_s:.0f} s)", method=method
            )

    def _mark_unavailable(self, method: str, *, reason: str) -> None:
        if method not in self._unavailable:
            _log.warning("kubelet_method_unavailable", method=method, reason=reason)
        self._unavailable[method] = (self._clock(), reason)

    def _mark_available(self, method: str) -> None:
        if self._unavailable.pop(method, None) is not None:
            _log.info("kubelet_method_available", method=method)
