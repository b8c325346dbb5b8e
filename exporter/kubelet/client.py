"""Async client for the kubelet PodResources API on its unix socket.

One grpc.aio channel, opened by the first call; ``release_channel()`` closes it, and
the next call opens another. The poller releases it after each poll when polls are 5 s
or more apart: while any channel exists gRPC's event-engine threads (four on two cores,
and a lifeguard) wake up on their own, ~1.3 ms of CPU a second on an otherwise idle
exporter against ~0.1 ms with none, and opening a channel again costs ~3.5 ms. gRPC
reconnects an open channel by itself when the kubelet restarts and recreates its
socket. Every call has a deadline, is counted in ``stats()``, and fails with an
``exporter.kubelet.errors`` exception.

Two things keep load off the kubelet, whose socket is rate-limited for every client on
the node: a method found missing or disabled is not asked again for
``capability_recheck_s`` (``probe_get``, the recheck itself, always asks), and after
RESOURCE_EXHAUSTED, UNAVAILABLE or a deadline, of any call, fresh ``Get`` look-ups are
refused locally for a jittered window that doubles up to ``backoff_max_s``, counted from
the start of the failed call; a successful call closes it. The poller's own calls, one
set per interval, are never refused: data returns at the first poll after the kubelet
does, and a look-up that failed cannot cost a poll its data.
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import grpc  # type: ignore[import-untyped, unused-ignore]  # grpcio ships no stubs
import structlog
from google.protobuf.message import DecodeError, Message

from exporter.kubelet.api.v1 import api_pb2 as v1
from exporter.kubelet.api.v1alpha1 import api_pb2 as v1alpha1
from exporter.kubelet.convert import (
    allocatable_from_proto_reusing,
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
    ReplyUndecodable,
)
from exporter.kubelet.stats import KubeletRequestStats, StatsRecorder
from exporter.logs import cut_line
from exporter.model import AllocatableResources, PodResources

__all__ = [
    "DEFAULT_BACKOFF_INITIAL_S",
    "DEFAULT_BACKOFF_MAX_S",
    "DEFAULT_CAPABILITY_RECHECK_S",
    "MAX_DETAILS_SHOWN",
    "METHOD_GET",
    "METHOD_GET_ALLOCATABLE",
    "METHOD_LIST",
    "METHOD_V1ALPHA1_LIST",
    "RECONNECT_BACKOFF_INITIAL_MS",
    "RECONNECT_BACKOFF_MAX_MS",
    "KubeletClient",
    "unix_target",
]

DEFAULT_CAPABILITY_RECHECK_S = 300.0
DEFAULT_BACKOFF_INITIAL_S = 1.0
DEFAULT_BACKOFF_MAX_S = 60.0

# gRPC's own reconnect backoff once the socket is gone (defaults: 1 s growing to 120 s).
# Capped at the shortest poll interval allowed (1 s): a call made while the channel waits
# out its backoff fails without trying, so a longer cap let the first poll after the
# kubelet's return fail too. gRPC adds 20% jitter: tries come at most ~1.2 s apart, and
# any poll that late after the kubelet's return gets data. A failed connect on a local
# unix socket costs nearly nothing. Not min_reconnect_backoff_ms: gRPC core takes it as
# the least time a connection attempt is given (20 s by default, which only a
# --kubelet.timeout over 20 s can outlast), and 100 ms there failed any kubelet slower
# than that to send its first HTTP/2 frame, before the call's deadline.
RECONNECT_BACKOFF_INITIAL_MS = 100
RECONNECT_BACKOFF_MAX_MS = 1_000


def unix_target(path: str) -> str:
    """gRPC's target for a unix socket at ``path``, absolute or relative. gRPC parses
    the target as a URI: the path is percent-encoded, or a '%41' in it would reach 'A',
    and a '?' or '#' cut it short."""
    quoted = urllib.parse.quote(path, safe="/")
    return f"unix://{quoted}" if path.startswith("/") else f"unix:{quoted}"


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
# The kubelet's words for a method its feature gate turns off ("PodResources API Get
# method disabled", "Pod Resources API GetAllocatableResources disabled": server_v1.go
# spells them differently), whole: a not-found message naming a pod
# "nightly-disabled-check" must not read as one.
_DISABLED = re.compile(r"Pod ?Resources API \w+( method)? disabled")
_TOO_LARGE = re.compile(r"larger than max", re.IGNORECASE)
_SIZES = re.compile(r"\((\d+) vs\. (\d+)\)")  # gRPC: "larger than max (20971780 vs. 16777216)"
# The most of a status's details (the kubelet's words, or gRPC's) shown in an error:
# they go into log lines and /debug, and a peer may send up to 8 KiB of anything.
MAX_DETAILS_SHOWN = 400


_RPC_PATHS = {
    METHOD_LIST: "/v1.PodResourcesLister/List",
    METHOD_GET_ALLOCATABLE: "/v1.PodResourcesLister/GetAllocatableResources",
    METHOD_GET: "/v1.PodResourcesLister/Get",
    METHOD_V1ALPHA1_LIST: "/v1alpha1.PodResourcesLister/List",
}

_BACKOFF_CODES = frozenset({"RESOURCE_EXHAUSTED", "UNAVAILABLE", "DEADLINE_EXCEEDED"})

_T = TypeVar("_T")
_Reply = TypeVar("_Reply", bound=Message)


def _serialize(request: Message) -> bytes:
    return request.SerializeToString()


def _decoded(parse: Callable[[bytes], _T]) -> Callable[[bytes], Awaitable[_T]]:
    """A small reply's decoding, done on the spot (List and GetAllocatableResources,
    the big ones, are decoded in a thread by _ReplyMemo)."""

    async def decode(raw: bytes) -> _T:
        return parse(raw)

    return decode


def _parse(reply_type: type[_Reply], raw: bytes) -> _Reply:
    try:
        return reply_type.FromString(raw)
    except DecodeError as err:
        raise ReplyUndecodable(
            f"undecodable reply of {len(raw)} bytes, not a {reply_type.DESCRIPTOR.name}: {err}"
        ) from err


_log = structlog.get_logger()


# --- Backoff -----------------------------------------------------------------------------


class _Backoff:
    """Refuses calls for a window after the kubelet was unreachable or rate-limited."""

    def __init__(
        self, *, initial_s: float, max_s: float, clock: Callable[[], float], rng: random.Random
    ) -> None:
        self._initial_s = min(initial_s, max_s)
        self._max_s = max_s
        self._clock = clock
        self._rng = rng
        self._delay_s = self._initial_s
        self._until: float | None = None
        self._error: KubeletRateLimited | KubeletUnavailable | None = None

    def refusal(self) -> KubeletError | None:
        """The error to raise instead of calling, or None when calling is allowed."""
        if self._until is None or self._error is None:
            return None
        remaining = self._until - self._clock()
        if remaining <= 0:
            return None
        # No remaining time in the text: an outage's message stays the same from poll to
        # poll, so whoever logs changes of it logs the outage once.
        return type(self._error)(f"{self._error.message} (backing off)")

    def failed(self, error: KubeletRateLimited | KubeletUnavailable, *, started: float) -> None:
        """``started``: when the failed call began; the window counts from there, so a
        call that ran to its deadline does not push the window past the next poll."""
        if self._until is not None and self._clock() < self._until:
            return  # a concurrent call of the same outage: the window is already open
        if self._error is None:
            _log.debug("kubelet_backoff_started", reason=error.message)
        # "Equal jitter": the window lies in [delay/2, delay], so it never passes the cap.
        window = self._delay_s / 2 + self._rng.uniform(0, self._delay_s / 2)
        self._until = started + window
        self._error = error
        self._delay_s = min(self._delay_s * 2, self._max_s)

    def answered(self) -> None:
        if self._error is not None:
            _log.debug("kubelet_backoff_ended")
        self._delay_s = self._initial_s
        self._until = None
        self._error = None


# --- Replies ------------------------------------------------------------------------------


class _ReplyMemo(Generic[_T]):
    """The last reply's raw bytes and what they converted to.

    A kubelet answers an unchanged node in a new order each call (it walks Go maps), so
    the bytes match only on the quietest nodes (one pod, one device); there, comparing
    them (microseconds) skips decoding and conversion. Otherwise the conversion, which
    gives one model for one content whatever the order (``exporter.kubelet.convert``),
    is compared with the last: equal, the last object is handed back, and that very
    object lets the poller skip the join.
    """

    def __init__(self) -> None:
        self._raw: bytes | None = None
        self._value: _T | None = None

    async def convert(self, raw: bytes, convert: Callable[[bytes], _T]) -> _T:
        """The last value for the same bytes or content; else ``convert``'s, made in a
        thread (1,000 pods take ~20 ms, which would hold up scrapes on the event loop)."""
        if raw == self._raw and self._value is not None:
            return self._value
        value = await asyncio.to_thread(convert, raw)
        if value == self._value:
            value = self._value  # the same content in another order
        self._raw, self._value = raw, value
        return value


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
        self._stats = StatsRecorder(methods=(METHOD_LIST, METHOD_GET_ALLOCATABLE, METHOD_GET))
        # method -> (clock time it was found unavailable, why)
        self._unavailable: dict[str, tuple[float, str]] = {}
        self._channel: grpc.aio.Channel | None = None  # opened on first use, inside the loop
        self._rpcs: dict[str, Any] = {}
        self._in_flight = 0  # calls on the channel, which release_channel() must not cut
        self._pods_memo: _ReplyMemo[tuple[PodResources, ...]] = _ReplyMemo()
        self._pods_by_bytes: dict[bytes, PodResources] = {}  # each pod of the last reply
        self._allocatable_memo: _ReplyMemo[AllocatableResources] = _ReplyMemo()
        # The last reply put in order, as bytes, and its model
        self._allocatable_in_order: tuple[bytes, AllocatableResources] | None = None
        self._v1alpha1_pods_memo: _ReplyMemo[tuple[PodResources, ...]] = _ReplyMemo()
        self._closed = False
        self._went_away = False  # UNAVAILABLE since take_went_away() last asked
        self._largest_reply_bytes = 0  # since take_largest_reply_bytes() last asked

    @property
    def socket_path(self) -> str:
        return self._socket_path

    # --- public calls ---

    async def list_pods(self) -> tuple[PodResources, ...]:
        """Every pod's resources: v1 List, or v1alpha1 List where the kubelet lacks v1."""
        try:
            return await self._call(
                METHOD_LIST,
                v1.ListPodResourcesRequest(),
                lambda raw: self._pods_memo.convert(raw, self._convert_pods),
            )
        except MethodUnavailable:
            pass
        try:
            return await self._call(
                METHOD_V1ALPHA1_LIST,
                v1alpha1.ListPodResourcesRequest(),
                lambda raw: self._v1alpha1_pods_memo.convert(
                    raw,
                    lambda r: pods_from_v1alpha1_list_response(
                        _parse(v1alpha1.ListPodResourcesResponse, r)
                    ),
                ),
            )
        except MethodUnavailable as err:
            raise MethodUnavailable(
                f"List: neither v1 nor v1alpha1 available: {err.message}", method=METHOD_LIST
            ) from err

    async def get_allocatable(self) -> AllocatableResources:
        """What the node can allocate; MethodUnavailable where unimplemented or disabled."""
        return await self._call(
            METHOD_GET_ALLOCATABLE,
            v1.AllocatableResourcesRequest(),
            lambda raw: self._allocatable_memo.convert(raw, self._convert_allocatable),
        )

    async def get_pod(self, *, namespace: str, name: str) -> PodResources:
        """One pod's resources, fresh; PodNotFound, MethodUnavailable. A look-up: refused
        locally while Get is known unavailable or the kubelet is being backed off from."""
        return await self._get_pod(namespace, name, look_up=True)

    async def _get_pod(self, namespace: str, name: str, *, look_up: bool) -> PodResources:
        request = v1.GetPodResourcesRequest(pod_name=name, pod_namespace=namespace)
        reply = await self._call(
            METHOD_GET,
            request,
            _decoded(lambda raw: _parse(v1.GetPodResourcesResponse, raw)),
            pod=(namespace, name),
            look_up=look_up,
            recheck=not look_up,
        )
        if not reply.HasField("pod_resources"):
            raise PodNotFound(
                f"Get: empty reply for pod {name} in namespace {namespace}",
                namespace=namespace,
                name=name,
            )
        return pod_from_proto(reply.pod_resources)

    async def probe_get(self) -> bool:
        """Whether Get works, asked about a pod that cannot exist; updates api_status().
        The caller paces it: it asks even while Get is known unavailable (it is the
        recheck) or the kubelet is backed off from."""
        try:
            await self._get_pod(_PROBE_NAMESPACE, _PROBE_NAME, look_up=False)
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

    def take_largest_reply_bytes(self) -> int:
        """The size of the largest reply received since the last call, and start over."""
        largest, self._largest_reply_bytes = self._largest_reply_bytes, 0
        return largest

    def stats(self) -> KubeletRequestStats:
        """A snapshot of request counts and latencies."""
        return self._stats.snapshot()

    async def release_channel(self) -> None:
        """Close the channel unless a call is on it; the next call opens a new one."""
        channel = self._channel
        if channel is None or self._in_flight:
            return
        self._channel = None  # before the await: a call made meanwhile opens its own
        self._rpcs = {}
        await channel.close()

    async def close(self) -> None:
        """Close the channel; later calls raise KubeletError."""
        self._closed = True
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    # --- internals ---

    def _rpc(self, method: str) -> Any:
        """The method's callable on the one channel, opened on first use (inside the loop).

        Replies come back as bytes and are parsed here, not by grpc.aio: its deserializer
        turns a parse error into a None reply and a logged traceback.
        """
        if self._channel is None:
            self._channel = grpc.aio.insecure_channel(
                unix_target(self._socket_path),
                options=[
                    ("grpc.max_receive_message_length", self._max_message_bytes),
                    ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_INITIAL_MS),
                    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
                    # A unix socket is never proxied, but gRPC core parses the node's
                    # https_proxy for every channel first, and a value it cannot use
                    # (no scheme, socks5://) wrote a plain-text line to stderr each poll.
                    ("grpc.enable_http_proxy", 0),
                ],
            )
            self._rpcs = {}
        rpc = self._rpcs.get(method)
        if rpc is None:
            rpc = self._channel.unary_unary(
                _RPC_PATHS[method],
                request_serializer=_serialize,
                response_deserializer=None,
            )
            self._rpcs[method] = rpc
        return rpc

    def _convert_allocatable(self, raw: bytes) -> AllocatableResources:
        reply = _parse(v1.AllocatableResourcesResponse, raw)
        allocatable, key = allocatable_from_proto_reusing(reply, self._allocatable_in_order)
        self._allocatable_in_order = (key, allocatable)
        return allocatable

    def _convert_pods(self, raw: bytes) -> tuple[PodResources, ...]:
        reply = _parse(v1.ListPodResourcesResponse, raw)
        pods, self._pods_by_bytes = pods_from_list_response_reusing(reply, self._pods_by_bytes)
        return pods

    async def _call(
        self,
        method: str,
        request: Message,
        decode: Callable[[bytes], Awaitable[_T]],
        *,
        pod: tuple[str, str] | None = None,
        look_up: bool = False,
        recheck: bool = False,
    ) -> _T:
        """One RPC: local refusals first, then the call, its stats and error translation.

        ``decode`` turns the reply's bytes into the result (ReplyUndecodable when they are
        not the message). ``pod`` is the (namespace, name) a Get asks for, to tell "not
        found" apart. ``look_up``: an extra call, refused during a backoff window;
        ``recheck``: asked even while the method is known unavailable.
        """
        if self._closed:
            raise KubeletError(f"{method}: kubelet client is closed")
        if not recheck:
            self._refuse_if_unavailable(method)
        refusal = self._backoff.refusal() if look_up else None
        if refusal is not None:
            raise refusal
        started = time.perf_counter()
        started_clock = self._clock()
        self._in_flight += 1
        try:
            raw = await self._rpc(method)(request, timeout=self._timeout_s)
        except grpc.aio.AioRpcError as err:
            code: str = err.code().name
            self._stats.record(method=method, code=code, seconds=time.perf_counter() - started)
            raise self._translate(
                method, code=code, details=err.details() or "", pod=pod, started=started_clock
            ) from err
        except asyncio.CancelledError:
            self._stats.record(
                method=method, code="CANCELLED", seconds=time.perf_counter() - started
            )
            raise
        finally:
            self._in_flight -= 1
        seconds = time.perf_counter() - started
        self._backoff.answered()  # the kubelet answered, whatever the bytes say
        try:
            if not isinstance(raw, bytes):
                raise ReplyUndecodable(f"undecodable reply: got {type(raw).__name__}, not bytes")
            self._largest_reply_bytes = max(self._largest_reply_bytes, len(raw))
            result = await decode(raw)
        except ReplyUndecodable as err:
            # INTERNAL, as gRPC's own clients in other languages say for a reply they
            # cannot unmarshal: never counted OK.
            self._stats.record(method=method, code="INTERNAL", seconds=seconds)
            raise ReplyUndecodable(f"{method}: {err.message}") from err
        self._stats.record(method=method, code="OK", seconds=seconds)
        self._mark_available(method)
        return result

    def _translate(
        self,
        method: str,
        *,
        code: str,
        details: str,
        pod: tuple[str, str] | None,
        started: float,
    ) -> KubeletError:
        message = f"{method}: {code}: {cut_line(details, MAX_DETAILS_SHOWN)}"
        too_large = code == "RESOURCE_EXHAUSTED" and _TOO_LARGE.search(details) is not None
        if code not in _BACKOFF_CODES or too_large:
            # The kubelet answered (or our own size limit struck): it is reachable.
            self._backoff.answered()
        if too_large:
            sizes = _SIZES.search(details)
            size = f"of {sizes.group(1)} bytes " if sizes else ""
            return MessageTooLarge(
                f"{method}: reply {size}is larger than --kubelet.max-message-bytes="
                f"{self._max_message_bytes}; raise the flag to accept it"
            )
        if code == "RESOURCE_EXHAUSTED":
            rate_limited = KubeletRateLimited(message)
            self._backoff.failed(rate_limited, started=started)
            return rate_limited
        if code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
            unavailable = KubeletUnavailable(f"{message} (socket {self._socket_path})")
            self._backoff.failed(unavailable, started=started)
            if code == "UNAVAILABLE":
                self._recheck_methods()
            return unavailable
        if code == "UNIMPLEMENTED" or (code == "UNKNOWN" and _DISABLED.fullmatch(details)):
            self._mark_unavailable(method, reason=f"{code}: {cut_line(details, MAX_DETAILS_SHOWN)}")
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
                f"{method}: {reason} (not asked again until the recheck)", method=method
            )

    def _recheck_methods(self) -> None:
        # A kubelet that went away may come back upgraded (that is how upgrades happen):
        # methods it lacked are asked again at the first call, not 5 minutes later.
        self._went_away = True
        for method, (_, reason) in self._unavailable.items():
            self._unavailable[method] = (-math.inf, reason)

    def take_went_away(self) -> bool:
        """Whether the kubelet could not be reached (UNAVAILABLE) since the last ask: a
        kubelet that comes back may be another version."""
        went_away, self._went_away = self._went_away, False
        return went_away

    def _mark_unavailable(self, method: str, *, reason: str) -> None:
        if method not in self._unavailable:
            # Get serves only /debug look-ups, which then answer from the snapshot, and its
            # gate (KubeletPodResourcesGet) is off by default on older kubelets: no
            # warning from every node of such a cluster at every start.
            level = _log.info if method == METHOD_GET else _log.warning
            level("kubelet_method_unavailable", method=method, reason=reason)
        self._unavailable[method] = (self._clock(), reason)

    def _mark_available(self, method: str) -> None:
        if self._unavailable.pop(method, None) is not None:
            _log.info("kubelet_method_available", method=method)
