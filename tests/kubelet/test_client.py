"""Tests for exporter.kubelet.client against the simulated kubelet on a real unix socket."""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import stat
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import grpc
import pytest
from manualclock import ManualClock
from structlog.testing import capture_logs

from exporter.kubelet.client import (
    MAX_DETAILS_SHOWN,
    METHOD_LIST,
    METHOD_V1ALPHA1_LIST,
    KubeletClient,
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
from exporter.kubelet.stats import LATENCY_BUCKETS_S, PRESET_CODES, RequestCount
from exporter.model import (
    AllocatableResources,
    ContainerResources,
    DeviceGroup,
    MemoryBlock,
    PodResources,
)
from exporter.sim.kubelet import (
    V1_GET,
    V1_GET_ALLOCATABLE,
    V1_LIST,
    V1ALPHA1_LIST,
    SimKubelet,
)

MIB = 1024 * 1024
RECHECK_S = 300.0

TRAINER = PodResources(
    namespace="ml",
    name="trainer-0",
    containers=(
        ContainerResources(
            name="main",
            devices=(
                DeviceGroup(
                    resource="nvidia.com/gpu", device_ids=("GPU-aaaa", "GPU-bbbb"), numa_nodes=(0,)
                ),
            ),
            cpu_ids=(2, 3),
            memory=(MemoryBlock(memory_type="memory", size_bytes=MIB, numa_nodes=(0,)),),
        ),
    ),
)
WEB = PodResources(namespace="default", name="web", containers=(ContainerResources(name="nginx"),))
PODS = (WEB, TRAINER)  # canonical order: by namespace, then name
ALLOCATABLE = AllocatableResources(
    devices=(
        DeviceGroup(
            resource="nvidia.com/gpu", device_ids=("GPU-aaaa", "GPU-bbbb"), numa_nodes=(0,)
        ),
    ),
    cpu_ids=(0, 1, 2, 3),
)


async def _until_held(sim: SimKubelet) -> None:
    """Until the hanging kubelet holds a List call (at most 5 s)."""
    for _ in range(500):
        if sim.calls[V1_LIST]:
            return
        await asyncio.sleep(0.01)


@pytest.fixture
async def sim(socket_path: str) -> AsyncIterator[SimKubelet]:
    kubelet = SimKubelet(socket_path=socket_path)
    kubelet.set_state(pods=PODS, allocatable=ALLOCATABLE)
    await kubelet.start()
    yield kubelet
    await kubelet.stop()


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1000.0)


@pytest.fixture
async def make_client(
    socket_path: str, clock: ManualClock
) -> AsyncIterator[Callable[..., KubeletClient]]:
    clients: list[KubeletClient] = []

    def make(**overrides: Any) -> KubeletClient:
        options: dict[str, Any] = {
            "socket_path": socket_path,
            "max_message_bytes": 16 * MIB,
            "timeout_s": 2.0,
            "capability_recheck_s": RECHECK_S,
            "backoff_initial_s": 1.0,
            "backoff_max_s": 60.0,
            "clock": clock,
        }
        client = KubeletClient(**(options | overrides))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.close()


@pytest.fixture
def client(make_client: Callable[..., KubeletClient]) -> KubeletClient:
    return make_client()


async def list_when_up(client: KubeletClient, *, within_s: float = 5.0) -> tuple[PodResources, ...]:
    """List, retrying while the kubelet is unavailable, for at most ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return await client.list_pods()
        except KubeletUnavailable:
            assert time.monotonic() < deadline, "client did not reach the kubelet"
            await asyncio.sleep(0.05)


async def test_a_socket_path_with_uri_characters_is_the_file_it_names(
    short_tmp: Path, make_client: Callable[..., KubeletClient]
) -> None:
    """gRPC parses its target as a URI: a socket path with '%41', '?', '#' or a space
    reached another file ('%41' is 'A', '?' and '#' end the path), on the server's side
    and the client's alike. Each is percent-encoded now, so both meet at the very file."""
    path = str(short_tmp / "k%41 b?c#d.sock")
    kubelet = SimKubelet(socket_path=path)
    kubelet.set_state(pods=PODS, allocatable=ALLOCATABLE)
    await kubelet.start()
    try:
        assert stat.S_ISSOCK(os.stat(path).st_mode)  # the file named, not another
        assert await make_client(socket_path=path).list_pods() == PODS
    finally:
        await kubelet.stop()


async def test_a_relative_socket_path_is_the_file_it_names(
    sim: SimKubelet,
    short_tmp: Path,
    make_client: Callable[..., KubeletClient],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A socket path relative to the working directory reaches that socket: not read as
    a URI authority ("unix://kubelet.sock" names no path at all)."""
    monkeypatch.chdir(short_tmp)
    assert await make_client(socket_path=os.path.basename(sim.socket_path)).list_pods() == PODS


class TestValues:
    async def test_an_unchanged_node_in_a_new_order_gives_the_last_objects(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """The kubelet answers in map order: new bytes, same content. The client hands back
        the very objects of the last call, which lets the poller skip the join."""
        pods, allocatable = await client.list_pods(), await client.get_allocatable()
        for _ in range(3):
            assert await client.list_pods() is pods
            assert await client.get_allocatable() is allocatable
        assert (pods, allocatable) == (PODS, ALLOCATABLE)

    async def test_list_pods_returns_every_pod(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """List gives back the kubelet's pods whole, in its order."""
        assert await client.list_pods() == PODS

    async def test_get_allocatable_returns_inventory(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """GetAllocatableResources gives back the node's allocatable resources whole."""
        assert await client.get_allocatable() == ALLOCATABLE

    async def test_get_pod_returns_one_pod(self, sim: SimKubelet, client: KubeletClient) -> None:
        """Get gives back the named pod whole."""
        assert await client.get_pod(namespace="ml", name="trainer-0") == TRAINER

    async def test_get_missing_pod_raises_pod_not_found(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """Get for an unknown pod raises PodNotFound naming it, and Get stays available."""
        with pytest.raises(PodNotFound) as caught:
            await client.get_pod(namespace="ml", name="gone")
        assert (caught.value.namespace, caught.value.name, client.api_status()["Get"]) == (
            "ml",
            "gone",
            True,
        )

    async def test_api_status_starts_all_available(self, client: KubeletClient) -> None:
        """Before any call every method counts as available."""
        assert client.api_status() == {"List": True, "GetAllocatableResources": True, "Get": True}

    async def test_a_changed_reply_gives_the_new_data_and_keeps_the_unchanged_pods(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """One pod's allocation changes: List gives the new data, and the pod that did not
        change is the very object of the last reply (its join is re-used)."""
        first = await client.list_pods()
        moved = replace(TRAINER, containers=(replace(TRAINER.containers[0], cpu_ids=(4, 5)),))
        sim.set_state(pods=(WEB, moved), allocatable=ALLOCATABLE)
        second = await client.list_pods()
        assert second == (WEB, moved)
        assert second[0] is first[0]

    async def test_an_empty_get_reply_is_pod_not_found(
        self, sim: SimKubelet, client: KubeletClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A Get answered OK but with no pod in it (an empty message) is no pod at all:
        PodNotFound, not a pod without a name."""
        monkeypatch.setattr(
            sim, "reply", lambda method, message: b"" if method == V1_GET else message
        )
        with pytest.raises(PodNotFound) as caught:
            await look_up(client)
        assert (caught.value.namespace, caught.value.name) == (TRAINER.namespace, TRAINER.name)

    async def test_not_found_code_is_pod_not_found_for_get_only(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """NOT_FOUND, should a kubelet send the proper code, is PodNotFound for Get; for
        List (no pod asked about) it is a plain KubeletError."""
        sim.force_code = grpc.StatusCode.NOT_FOUND
        with pytest.raises(PodNotFound):
            await look_up(client)
        with pytest.raises(KubeletError) as caught:
            await client.list_pods()
        assert type(caught.value) is KubeletError
        assert caught.value.message.startswith("List: NOT_FOUND: ")

    async def test_hostile_details_make_one_bounded_printable_line(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """A status's details are the peer's words, percent-encoded on the wire: any bytes,
        up to 8 KiB. The error (which goes into the log and /debug) escapes control
        characters and keeps the first MAX_DETAILS_SHOWN, saying how many it left out."""
        sim.force_code = grpc.StatusCode.UNKNOWN
        sim.force_details = "boom\x01\x00\nsecond line" + "x" * 5000
        with pytest.raises(KubeletError) as caught:
            await client.list_pods()
        message = caught.value.message
        assert message.startswith("List: UNKNOWN: boom\\x01\\x00\\nsecond line")
        assert message.isprintable()
        left_out = len(sim.force_details) - MAX_DETAILS_SHOWN
        assert message.endswith(f"xxx... ({left_out} more characters)")
        assert len(message) < MAX_DETAILS_SHOWN + 100

    @pytest.mark.parametrize(
        ("details", "shown"),
        [
            # Printable words beyond ASCII: shown as they are.
            ("naïve pod «x» failed", "naïve pod «x» failed"),
            # Length alone is enough to cut (8 KiB of plain words would still fill a log
            # line); what is kept, letters beyond ASCII included, is shown as it is.
            ("naïve " * 300, ("naïve " * 300)[:MAX_DETAILS_SHOWN] + "... (1400 more characters)"),
            # Escaping alone says nothing of a cut: nothing was left out.
            ("bad\ttab", "bad\\ttab"),
        ],
        ids=["ordinary", "long", "control-character"],
    )
    async def test_details_are_shown_escaped_and_cut_only_when_long(
        self, sim: SimKubelet, client: KubeletClient, details: str, shown: str
    ) -> None:
        sim.force_code = grpc.StatusCode.UNKNOWN
        sim.force_details = details
        with pytest.raises(KubeletError) as caught:
            await client.list_pods()
        assert f"List: UNKNOWN: {shown}" == caught.value.message

    async def test_an_unimplemented_methods_reason_is_shown_escaped_and_cut(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """The reason a method is left alone is kept and repeated (its log line, and every
        refusal until the recheck): it is the peer's words too, escaped and cut."""
        sim.force_code = grpc.StatusCode.UNIMPLEMENTED
        sim.force_details = "old\nkubelet" + "x" * 5000
        with capture_logs() as logs, pytest.raises(MethodUnavailable):
            await client.get_allocatable()
        with pytest.raises(MethodUnavailable) as caught:
            await client.get_allocatable()
        [reason] = [e["reason"] for e in logs if e["event"] == "kubelet_method_unavailable"]
        for said in (reason, caught.value.message):
            assert "old\\nkubelet" in said
            assert f"({len(sim.force_details) - MAX_DETAILS_SHOWN} more characters)" in said
            assert said.isprintable()


class TestCapabilities:
    async def test_unimplemented_method_is_not_asked_until_recheck(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """An UNIMPLEMENTED method raises MethodUnavailable and is left alone until the recheck."""
        sim.unimplemented = {V1_GET_ALLOCATABLE}
        with pytest.raises(MethodUnavailable):
            await client.get_allocatable()
        clock.advance(RECHECK_S - 1)
        with pytest.raises(MethodUnavailable):
            await client.get_allocatable()
        assert (sim.calls[V1_GET_ALLOCATABLE], client.api_status()["GetAllocatableResources"]) == (
            1,
            False,
        )

    async def test_a_kubelet_back_from_going_away_is_asked_again_at_once(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient], clock: ManualClock
    ) -> None:
        """Kubelets are upgraded by a restart: a method missing before the kubelet went
        away is asked again at the first call after, not at the 5-minute recheck."""
        client = make_client(backoff_initial_s=0.0, backoff_max_s=0.0)
        sim.unimplemented = {V1_GET_ALLOCATABLE}
        with pytest.raises(MethodUnavailable):
            await client.get_allocatable()
        await sim.stop()
        with pytest.raises(KubeletUnavailable):
            await client.list_pods()
        sim.unimplemented = set()
        await sim.start()
        await list_when_up(client)
        assert (await client.get_allocatable(), sim.calls[V1_GET_ALLOCATABLE]) == (ALLOCATABLE, 2)

    async def test_recheck_notices_method_came_back(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """After the recheck period one call goes through and, answered, restores the method."""
        sim.unimplemented = {V1_GET_ALLOCATABLE}
        with pytest.raises(MethodUnavailable):
            await client.get_allocatable()
        sim.unimplemented = set()
        clock.advance(RECHECK_S)
        allocatable = await client.get_allocatable()
        assert (
            allocatable,
            sim.calls[V1_GET_ALLOCATABLE],
            client.api_status()["GetAllocatableResources"],
        ) == (ALLOCATABLE, 2, True)

    async def test_failed_recheck_waits_another_period(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """A recheck that finds the method still missing starts a new quiet period."""
        sim.unimplemented = {V1_GET_ALLOCATABLE}
        asked = []
        for step in (0.0, RECHECK_S, RECHECK_S - 1, 1.0):
            clock.advance(step)
            with pytest.raises(MethodUnavailable):
                await client.get_allocatable()
            asked.append(sim.calls[V1_GET_ALLOCATABLE])
        assert asked == [1, 2, 2, 3]

    async def test_state_changes_logged_once(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """Losing and regaining a method logs one event each, not one per call."""
        sim.unimplemented = {V1_GET_ALLOCATABLE}
        with capture_logs() as logs:
            for _ in range(3):
                with pytest.raises(MethodUnavailable):
                    await client.get_allocatable()
                clock.advance(RECHECK_S)
            sim.unimplemented = set()
            await client.get_allocatable()
            await client.get_allocatable()
        assert [(e["event"], e["method"]) for e in logs] == [
            ("kubelet_method_unavailable", "GetAllocatableResources"),
            ("kubelet_method_available", "GetAllocatableResources"),
        ]

    async def test_a_missing_get_is_said_at_info_the_inventory_at_warning(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """Get lost costs nothing (look-ups answer from the snapshot; its gate is off by
        default on older kubelets): info. GetAllocatableResources lost costs the inventory
        series: warning."""
        sim.disabled = {V1_GET, V1_GET_ALLOCATABLE}
        with capture_logs() as logs:
            with pytest.raises(MethodUnavailable):
                await client.get_pod(namespace="ml", name="trainer-0")
            with pytest.raises(MethodUnavailable):
                await client.get_allocatable()
        assert [("Get", "info"), ("GetAllocatableResources", "warning")] == [
            (e["method"], e["log_level"])
            for e in logs
            if e["event"] == "kubelet_method_unavailable"
        ]

    async def test_disabled_get_raises_method_unavailable(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """Get disabled by feature gate raises MethodUnavailable with the kubelet's words."""
        sim.disabled = {V1_GET}
        with pytest.raises(MethodUnavailable) as caught:
            await client.get_pod(namespace="ml", name="trainer-0")
        assert (caught.value.message, caught.value.method, client.api_status()["Get"]) == (
            "Get: UNKNOWN: PodResources API Get method disabled",
            "Get",
            False,
        )

    async def test_disabled_allocatable_raises_method_unavailable(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """GetAllocatableResources disabled raises MethodUnavailable and marks it unavailable,
        though the kubelet spells it "Pod Resources API GetAllocatableResources disabled"."""
        sim.disabled = {V1_GET_ALLOCATABLE}
        with pytest.raises(MethodUnavailable) as caught:
            await client.get_allocatable()
        assert (caught.value.message, client.api_status()) == (
            "GetAllocatableResources: UNKNOWN: Pod Resources API GetAllocatableResources disabled",
            {"List": True, "GetAllocatableResources": False, "Get": True},
        )

    async def test_probe_get_reports_available(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """Probing Get on a kubelet that has it answers True after one not-found call."""
        assert (await client.probe_get(), sim.calls[V1_GET]) == (True, 1)

    @pytest.mark.parametrize("knob", ["unimplemented", "disabled"])
    async def test_probe_get_reports_unavailable(
        self, sim: SimKubelet, client: KubeletClient, knob: str
    ) -> None:
        """Probing Get where it is missing or disabled answers False and updates api_status."""
        setattr(sim, knob, {V1_GET})
        assert (await client.probe_get(), client.api_status()["Get"]) == (False, False)

    async def test_a_pod_named_disabled_is_not_a_disabled_method(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """The kubelet's not-found answer names the pod: "disabled" in a pod's name does
        not read as the feature gate being off."""
        with pytest.raises(PodNotFound):
            await client.get_pod(namespace="default", name="nightly-disabled-check")
        assert (await look_up(client), client.api_status()["Get"]) == (TRAINER, True)

    async def test_probe_rechecks_while_get_is_known_unavailable(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """The probe is the recheck: it asks the kubelet whenever it is made, even inside
        the quiet period its last failure started (the poller paces it), so a kubelet
        upgraded to Get is found at the next probe; look-ups meanwhile are refused."""
        sim.disabled = {V1_GET}
        assert await client.probe_get() is False
        clock.advance(RECHECK_S - 0.001)  # the poller's next probe, a hair early
        with pytest.raises(MethodUnavailable):
            await look_up(client)
        sim.disabled = set()
        assert (await client.probe_get(), sim.calls[V1_GET]) == (True, 2)
        assert await look_up(client) == TRAINER

    async def test_a_kubelet_that_timed_out_is_not_taken_for_one_that_went_away(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """A deadline is a busy kubelet, not one that went away (and may come back
        upgraded): methods missing stay unasked until the recheck, and the poller is not
        told to probe Get again."""
        client = make_client(timeout_s=0.2, backoff_initial_s=0.0, backoff_max_s=0.0)
        sim.unimplemented = {V1_GET_ALLOCATABLE}
        with pytest.raises(MethodUnavailable):
            await client.get_allocatable()
        sim.hang = True
        with pytest.raises(KubeletUnavailable):
            await client.list_pods()
        sim.hang = False
        with pytest.raises(MethodUnavailable):
            await client.get_allocatable()
        assert (sim.calls[V1_GET_ALLOCATABLE], client.take_went_away()) == (1, False)


class TestV1alpha1Fallback:
    async def test_list_falls_back_to_v1alpha1(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """With v1 List UNIMPLEMENTED, pods come from v1alpha1 with device IDs only."""
        sim.unimplemented = {V1_LIST}
        expected = (
            WEB,
            PodResources(
                namespace="ml",
                name="trainer-0",
                containers=(
                    ContainerResources(
                        name="main",
                        devices=(
                            DeviceGroup(
                                resource="nvidia.com/gpu", device_ids=("GPU-aaaa", "GPU-bbbb")
                            ),
                        ),
                    ),
                ),
            ),
        )
        assert (await client.list_pods(), client.list_method, client.api_status()["List"]) == (
            expected,
            METHOD_V1ALPHA1_LIST,
            True,
        )

    async def test_fallback_is_remembered(self, sim: SimKubelet, client: KubeletClient) -> None:
        """Once v1 List proved missing, later Lists go straight to v1alpha1."""
        sim.unimplemented = {V1_LIST}
        for _ in range(3):
            await client.list_pods()
        assert (sim.calls[V1_LIST], sim.calls[V1ALPHA1_LIST]) == (1, 3)

    async def test_fallback_returns_to_v1_after_recheck(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """After the recheck period a kubelet upgraded to v1 is used again."""
        sim.unimplemented = {V1_LIST}
        await client.list_pods()
        sim.unimplemented = set()
        clock.advance(RECHECK_S)
        assert (await client.list_pods(), client.list_method) == (PODS, METHOD_LIST)

    async def test_list_unavailable_without_either_api(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """With neither v1 nor v1alpha1 List, List raises MethodUnavailable and reads False."""
        sim.unimplemented = {V1_LIST, V1ALPHA1_LIST}
        with pytest.raises(MethodUnavailable) as caught:
            await client.list_pods()
        assert (caught.value.method, client.api_status()["List"]) == ("List", False)


async def look_up(client: KubeletClient) -> PodResources:
    """A fresh look-up of TRAINER, as /debug/allocations/ml/trainer-0 makes it."""
    return await client.get_pod(namespace=TRAINER.namespace, name=TRAINER.name)


class TestBackoff:
    async def test_rate_limited_call_holds_back_look_ups(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """RESOURCE_EXHAUSTED raises KubeletRateLimited; look-ups in the window never
        reach the kubelet, the poller's own calls still do."""
        sim.rate_limit(qps=0.001, burst=1)
        await client.list_pods()
        with pytest.raises(KubeletRateLimited):
            await client.list_pods()
        for _ in range(2):
            with pytest.raises(KubeletRateLimited) as caught:
                await look_up(client)
            assert caught.value.message.endswith("(backing off)")
        with pytest.raises(KubeletRateLimited):
            await client.get_allocatable()
        assert (sim.calls[V1_LIST], sim.calls[V1_GET_ALLOCATABLE], sim.calls[V1_GET]) == (2, 1, 0)

    async def test_a_failed_look_up_costs_the_next_poll_nothing(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """An on-call curl's Get rate-limited by a busy socket opens the window; the
        poller's List and GetAllocatableResources right after are still made, and get
        the data the kubelet has by then."""
        sim.rate_limit(qps=0.001, burst=0)
        with pytest.raises(KubeletRateLimited):
            await look_up(client)
        sim.clear_rate_limit()
        assert (await client.list_pods(), await client.get_allocatable()) == (PODS, ALLOCATABLE)
        assert (sim.calls[V1_GET], sim.calls[V1_LIST], sim.calls[V1_GET_ALLOCATABLE]) == (1, 1, 1)

    async def test_backoff_ends_after_window(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """Once the window has passed the kubelet is asked again."""
        sim.rate_limit(qps=0.001, burst=0)
        with pytest.raises(KubeletRateLimited):
            await look_up(client)
        sim.clear_rate_limit()
        with pytest.raises(KubeletRateLimited):
            await look_up(client)
        clock.advance(1.0)  # the first window is at most backoff_initial_s
        assert (await look_up(client), sim.calls[V1_GET]) == (TRAINER, 2)

    async def test_a_poll_that_works_ends_the_window(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """The kubelet answering the poller closes the window for look-ups too."""
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        with pytest.raises(KubeletUnavailable):
            await client.list_pods()
        sim.force_code = None
        await client.list_pods()
        assert await look_up(client) == TRAINER

    async def test_window_doubles_and_resets_on_success(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """Each failure doubles the window (jittered within [d/2, d]); success resets it."""
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        asked = []
        # Windows after each failure: <= 1 s, then [1, 2], then [2, 4], then [4, 8].
        for step in (0.0, 1.0, 0.99, 1.01, 1.99, 2.01):
            clock.advance(step)
            with pytest.raises(KubeletUnavailable):
                await look_up(client)
            asked.append(sim.calls[V1_GET])
        sim.force_code = None
        clock.advance(8.0)
        await look_up(client)
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        for step in (0.0, 1.0):  # back to a window <= 1 s
            clock.advance(step)
            with pytest.raises(KubeletUnavailable):
                await look_up(client)
            asked.append(sim.calls[V1_GET])
        assert asked == [1, 2, 2, 3, 3, 4, 6, 7]

    async def test_window_is_capped(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient], clock: ManualClock
    ) -> None:
        """The window never grows past backoff_max_s."""
        client = make_client(backoff_initial_s=1.0, backoff_max_s=2.0)
        sim.force_code = grpc.StatusCode.RESOURCE_EXHAUSTED
        for _ in range(6):
            with pytest.raises(KubeletRateLimited):
                await look_up(client)
            clock.advance(2.0)
        assert sim.calls[V1_GET] == 6

    async def test_window_counts_from_the_start_of_the_failed_call(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """A call that ran to its deadline does not hold look-ups back past its window."""
        client = make_client(clock=time.monotonic, timeout_s=0.3, backoff_max_s=0.2)
        sim.hang = True
        with pytest.raises(KubeletUnavailable):
            await client.list_pods()
        sim.hang = False
        # The window (<= 0.2 s from the start) closed before the 0.3 s deadline struck.
        assert (await look_up(client), sim.calls[V1_GET]) == (TRAINER, 1)

    async def test_refusals_say_the_same_thing_each_time(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """A refusal's message holds no countdown, so an outage reads the same each time."""
        sim.force_code = grpc.StatusCode.RESOURCE_EXHAUSTED
        messages = []
        for step in (0.0, 0.1, 0.3):
            clock.advance(step)
            with pytest.raises(KubeletRateLimited) as caught:
                await look_up(client)
            messages.append(caught.value.message)
        assert [messages[0] + " (backing off)"] * 2 == messages[1:]

    @pytest.mark.parametrize(
        "code",
        [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED, "deadline"],
    )
    async def test_every_backoff_code_doubles_the_window(
        self,
        sim: SimKubelet,
        make_client: Callable[..., KubeletClient],
        clock: ManualClock,
        code: Any,
    ) -> None:
        """Unreachable, rate-limited or past its deadline alike: the second failure's
        window is [1, 2] s, not the first's <= 1 s again."""
        client = make_client(timeout_s=0.2)
        if code == "deadline":
            sim.hang = True
        else:
            sim.force_code = code
        asked = []
        for step in (0.0, 1.0, 1.0):
            clock.advance(step)
            with pytest.raises((KubeletUnavailable, KubeletRateLimited)):
                await look_up(client)
            asked.append(sim.calls[V1_GET])
        sim.hang = False
        assert asked == [1, 2, 2]

    async def test_the_window_doubles_with_each_failure(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """Doubling, not growing by a step: after four failures the window is [4, 8] s,
        so 4 s after the fourth the kubelet is still not asked."""
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        asked = []
        # Windows after each failure: <= 1 s, [1, 2], [2, 4], [4, 8].
        for step in (0.0, 1.0, 2.0, 4.0, 4.0):
            clock.advance(step)
            with pytest.raises(KubeletUnavailable):
                await look_up(client)
            asked.append(sim.calls[V1_GET])
        assert asked == [1, 2, 3, 4, 4]

    async def test_a_failure_right_after_an_answer_opens_a_new_window(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """An answer closes the window whole: the next failure, however soon, opens a
        new one, and look-ups are held back again."""
        for code in (grpc.StatusCode.UNAVAILABLE, None, grpc.StatusCode.UNAVAILABLE):
            sim.force_code = code
            if code is None:
                await client.list_pods()
            else:
                with pytest.raises(KubeletUnavailable):
                    await client.list_pods()
        with pytest.raises(KubeletUnavailable) as caught:
            await look_up(client)
        assert (caught.value.message.endswith("(backing off)"), sim.calls[V1_GET]) == (True, 0)

    async def test_failures_inside_the_window_do_not_widen_it(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """The poller's calls are made inside a window; their failures are the same
        outage, and the window (<= 1 s after the first) is not drawn again, doubled."""
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        with pytest.raises(KubeletUnavailable):
            await look_up(client)
        for _ in range(2):
            with pytest.raises(KubeletUnavailable):
                await client.list_pods()
        clock.advance(1.0)
        with pytest.raises(KubeletUnavailable):
            await look_up(client)
        assert sim.calls[V1_GET] == 2

    async def test_a_zero_backoff_refuses_nothing(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """With backoff 0 the window is empty: the very next look-up is asked."""
        client = make_client(backoff_initial_s=0.0, backoff_max_s=0.0)
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        for _ in range(2):
            with pytest.raises(KubeletUnavailable) as caught:
                await look_up(client)
            assert not caught.value.message.endswith("(backing off)")
        assert sim.calls[V1_GET] == 2

    async def test_a_reply_over_the_limit_ends_the_window(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """A reply refused as too large came from a kubelet that answered: look-ups held
        back since it was unreachable are made again."""
        client = make_client(max_message_bytes=4 * MIB)
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        with pytest.raises(KubeletUnavailable):
            await look_up(client)
        sim.force_code = None
        sim.padding_bytes = 5 * MIB
        with pytest.raises(MessageTooLarge):
            await client.list_pods()
        assert (await look_up(client), sim.calls[V1_GET]) == (TRAINER, 2)

    async def test_an_outage_logs_its_start_and_end_once(
        self, sim: SimKubelet, client: KubeletClient, clock: ManualClock
    ) -> None:
        """Backing off is said once when it starts and once when the kubelet answers."""
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        with capture_logs() as logs:
            for _ in range(3):
                with pytest.raises(KubeletUnavailable):
                    await client.list_pods()
                clock.advance(10.0)
            sim.force_code = None
            await client.list_pods()
            await client.list_pods()
        assert [e["event"] for e in logs if e["event"].startswith("kubelet_backoff")] == [
            "kubelet_backoff_started",
            "kubelet_backoff_ended",
        ]


class TestUndecodable:
    async def test_undecodable_reply_is_a_kubelet_error(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """Bytes that are no ListPodResourcesResponse raise ReplyUndecodable saying so."""
        sim.undecodable = {V1_LIST}
        with pytest.raises(ReplyUndecodable) as caught:
            await client.list_pods()
        assert caught.value.message.startswith(
            "List: undecodable reply of 2 bytes, not a ListPodResourcesResponse: "
        )

    async def test_undecodable_reply_is_counted_internal(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """The call is counted with code INTERNAL, not OK, for every method."""
        sim.undecodable = {V1_LIST, V1_GET_ALLOCATABLE, V1_GET}
        for call in (
            client.list_pods(),
            client.get_allocatable(),
            client.get_pod(namespace="ml", name="trainer-0"),
        ):
            with pytest.raises(ReplyUndecodable):
                await call
        stats = client.stats()
        counts = {(r.method, r.code): r.count for r in stats.requests if r.count}
        assert {
            ("List", "INTERNAL"): 1,
            ("GetAllocatableResources", "INTERNAL"): 1,
            ("Get", "INTERNAL"): 1,
        } == counts

    async def test_undecodable_reply_logs_no_traceback(
        self, sim: SimKubelet, client: KubeletClient, caplog: pytest.LogCaptureFixture
    ) -> None:
        """grpc.aio's own parser would log a traceback and return None: ours logs nothing."""
        sim.undecodable = {V1_LIST}
        with pytest.raises(ReplyUndecodable):
            await client.list_pods()
        assert [] == [r.getMessage() for r in caplog.records]

    async def test_good_replies_follow_undecodable_ones(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """The kubelet answered: no back-off, the next good reply is read."""
        sim.undecodable = {V1_LIST}
        with pytest.raises(ReplyUndecodable):
            await client.list_pods()
        sim.undecodable = set()
        assert PODS == await client.list_pods()


class TestUnavailable:
    async def test_stopped_kubelet_raises_unavailable_quickly(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """With the socket gone a call fails with KubeletUnavailable well before its deadline."""
        await client.list_pods()
        await sim.stop()
        started = time.monotonic()
        with pytest.raises(KubeletUnavailable):
            await client.list_pods()
        assert time.monotonic() - started < 1.0

    async def test_client_recovers_after_restart(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """The same client reaches a kubelet that went away and came back on the same path."""
        client = make_client(clock=time.monotonic, backoff_initial_s=0.05, backoff_max_s=0.1)
        await client.list_pods()
        await sim.stop()
        with pytest.raises(KubeletUnavailable):
            await client.list_pods()
        await sim.start()
        assert await list_when_up(client) == PODS

    async def test_reconnects_stay_a_poll_interval_apart_in_a_long_outage(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """In a long outage gRPC keeps trying the socket at most ~1.2 s apart (the 1 s cap
        plus its 20% jitter), so a poll soon after the kubelet returns gets data. With
        gRPC's default cap the tries, 0.1 s apart at first and 1.6x further each time,
        are over 2 s apart within 6 s. A socket that hangs up on every connection stands
        in for the kubelet meanwhile, to count the tries."""
        client = make_client(clock=time.monotonic, backoff_max_s=0.5)
        await client.list_pods()
        await sim.stop()
        tries: list[float] = []

        def hang_up(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            tries.append(time.monotonic())
            writer.close()

        stopped = time.monotonic()
        impostor = await asyncio.start_unix_server(hang_up, path=sim.socket_path)
        for _ in range(7):  # polls 1 s apart, the shortest interval allowed
            with pytest.raises(KubeletUnavailable):
                await client.list_pods()
            await asyncio.sleep(1.0)
        impostor.close()
        await impostor.wait_closed()
        await sim.start()
        await asyncio.sleep(1.5)
        data = await client.list_pods()

        late = [t - stopped for t in tries if t - stopped > 3.0]
        gaps = [round(b - a, 2) for a, b in itertools.pairwise(late)]
        assert (PODS, True) == (data, len(gaps) >= 2 and max(gaps) < 1.6), gaps

    async def test_a_released_channel_is_opened_again_by_the_next_call(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """The poller releases the channel after each poll; the next poll's calls work."""
        client = make_client()
        assert await client.list_pods() == PODS
        await client.release_channel()
        await client.release_channel()  # nothing open: nothing to do
        assert (await client.list_pods(), sim.calls[V1_LIST]) == (PODS, 2)

    async def test_release_leaves_a_call_in_flight_alone(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """A fresh Get for /debug may still be on the channel when a poll ends: releasing
        then must not cut it."""
        client = make_client()
        sim.hang = True
        pending = asyncio.create_task(client.list_pods())
        await _until_held(sim)
        await client.release_channel()
        sim.hang = False
        assert await pending == PODS

    async def test_client_waits_for_kubelet_not_yet_up(
        self, socket_path: str, make_client: Callable[..., KubeletClient]
    ) -> None:
        """A client made before the socket exists fails, then works once the kubelet starts."""
        client = make_client(clock=time.monotonic, backoff_initial_s=0.05, backoff_max_s=0.1)
        with pytest.raises(KubeletUnavailable) as caught:
            await client.list_pods()
        async with SimKubelet(socket_path=socket_path) as kubelet:
            kubelet.set_state(pods=PODS, allocatable=ALLOCATABLE)
            pods = await list_when_up(client)
        assert (socket_path in caught.value.message, pods) == (True, PODS)

    async def test_a_kubelet_slow_to_greet_is_waited_for_within_the_timeout(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient], socket_path: str
    ) -> None:
        """A kubelet that sends its first HTTP/2 frame (SETTINGS) 300 ms after the connect,
        as a busy node's may, answers the call: only --kubelet.timeout bounds it. gRPC takes
        min_reconnect_backoff_ms as the least time a connection attempt is given, and the
        client's 100 ms there failed such a kubelet UNAVAILABLE every time."""
        held_s = 0.3
        relays: list[asyncio.Task[None]] = []
        ends: list[asyncio.StreamWriter] = []

        async def relay(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, hold_s: float
        ) -> None:
            await asyncio.sleep(hold_s)  # holds everything, the first frame included
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
            writer.close()

        async def slow_to_greet(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            relays.append(task)
            ends.append(writer)
            up_reader, up_writer = await asyncio.open_unix_connection(socket_path)
            ends.append(up_writer)
            await asyncio.gather(
                relay(reader, up_writer, hold_s=0.0),
                relay(up_reader, writer, hold_s=held_s),
                return_exceptions=True,
            )

        proxy = await asyncio.start_unix_server(slow_to_greet, path=socket_path + ".slow")
        client = make_client(socket_path=socket_path + ".slow", timeout_s=5.0)
        try:
            assert await client.list_pods() == PODS
        finally:
            await client.close()
            proxy.close()
            # A closed server leaves its connections open: the relay's two ends are
            # closed here and it ends, else a later test's garbage collection finds
            # them ("unclosed transport", a ResourceWarning).
            for end in ends:
                end.close()
            await asyncio.gather(*relays)

    @pytest.mark.parametrize("proxy", ["proxy.corp:3128", "socks5://proxy.corp:1080"])
    async def test_a_proxy_setting_grpc_cannot_parse_writes_nothing(
        self,
        sim: SimKubelet,
        make_client: Callable[..., KubeletClient],
        monkeypatch: pytest.MonkeyPatch,
        capfd: pytest.CaptureFixture[str],
        proxy: str,
    ) -> None:
        """A node's https_proxy without a scheme, or of one gRPC does not take: the unix
        socket is never proxied, yet gRPC core parsed the variable on every channel and
        wrote a plain-text error line to stderr for each, a poll's, into the JSON log."""
        monkeypatch.setenv("https_proxy", proxy)
        monkeypatch.setenv("GRPC_VERBOSITY", "ERROR")
        client = make_client()
        for _ in range(2):
            assert await client.list_pods() == PODS
            await client.release_channel()
        assert "proxy" not in capfd.readouterr().err

    async def test_hung_kubelet_raises_unavailable_at_deadline(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """A kubelet that never answers fails the call with KubeletUnavailable at its deadline."""
        client = make_client(timeout_s=0.2)
        sim.hang = True
        started = time.monotonic()
        with pytest.raises(KubeletUnavailable) as caught:
            await client.list_pods()
        elapsed = time.monotonic() - started
        assert ("DEADLINE_EXCEEDED" in caught.value.message, 0.15 < elapsed < 2.0) == (True, True)


class TestMessageSize:
    async def test_reply_over_4_mib_is_read_with_16_mib_limit(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """A List reply of more than 4 MiB (gRPC's default) arrives whole."""
        sim.padding_bytes = 5 * MIB
        pods = await client.list_pods()
        assert (pods[:2], len(pods) > 2) == (PODS, True)

    async def test_reply_over_limit_raises_clear_error(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """A reply past the limit raises MessageTooLarge naming the flag and both sizes."""
        client = make_client(max_message_bytes=4 * MIB)
        sim.padding_bytes = 5 * MIB
        with pytest.raises(MessageTooLarge) as caught:
            await client.list_pods()
        assert re.fullmatch(
            r"List: reply of (\d+) bytes is larger than --kubelet.max-message-bytes=4194304; "
            r"raise the flag to accept it",
            caught.value.message,
        ), caught.value.message
        size = int(caught.value.message.split()[3])
        assert 5 * MIB < size < 6 * MIB

    async def test_reply_over_limit_does_not_back_off(
        self, sim: SimKubelet, make_client: Callable[..., KubeletClient]
    ) -> None:
        """A too large reply is our limit, not the kubelet's: the next call is made."""
        client = make_client(max_message_bytes=4 * MIB)
        sim.padding_bytes = 5 * MIB
        with pytest.raises(MessageTooLarge):
            await client.list_pods()
        sim.padding_bytes = 0
        assert await client.list_pods() == PODS


def _made(client: KubeletClient) -> tuple[RequestCount, ...]:
    """The requests counted, without the codes still at their preset 0."""
    return tuple(r for r in client.stats().requests if r.count)


class TestStats:
    async def test_requests_counted_by_method_and_code(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """Every real call is counted under its method and gRPC code."""
        await client.list_pods()
        await client.list_pods()
        await client.get_allocatable()
        with pytest.raises(PodNotFound):
            await client.get_pod(namespace="ml", name="gone")
        assert _made(client) == (
            RequestCount(method="Get", code="UNKNOWN", count=1),
            RequestCount(method="GetAllocatableResources", code="OK", count=1),
            RequestCount(method="List", code="OK", count=2),
        )

    async def test_every_code_of_every_method_counts_from_zero(self, client: KubeletClient) -> None:
        """Before any call, each method has a 0 for each code a call can end with: the
        first failure is then an increase (a series first seen at 1 is none to rate())."""
        counts = {(r.method, r.code): r.count for r in client.stats().requests}
        methods = ("List", "GetAllocatableResources", "Get")
        assert {(m, c): 0 for m in methods for c in PRESET_CODES} == counts
        assert {"UNAVAILABLE", "DEADLINE_EXCEEDED", "RESOURCE_EXHAUSTED"} <= set(PRESET_CODES)

    async def test_the_v1alpha1_fallback_counts_every_code_from_zero(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """On a kubelet without v1 List, v1alpha1 List has each code from its first call
        on, as the preset methods do: its first failure is then an increase too."""
        sim.unimplemented = {V1_LIST}
        await client.list_pods()
        counts = {r.code: r.count for r in client.stats().requests if r.method == "v1alpha1.List"}
        assert {**dict.fromkeys(PRESET_CODES, 0), "OK": 1} == counts

    async def test_local_refusals_are_not_counted(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """Calls refused by capability detection or backoff are not requests."""
        sim.unimplemented = {V1_GET_ALLOCATABLE}
        for _ in range(2):
            with pytest.raises(MethodUnavailable):
                await client.get_allocatable()
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        for _ in range(2):
            with pytest.raises(KubeletUnavailable):
                await look_up(client)
        sim.force_code = None
        stats = client.stats()
        assert (_made(client), stats.count(method="Get", code="UNAVAILABLE")) == (
            (
                RequestCount(method="Get", code="UNAVAILABLE", count=1),
                RequestCount(method="GetAllocatableResources", code="UNIMPLEMENTED", count=1),
            ),
            1,
        )

    async def test_latency_histogram_per_method(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """Each method has a cumulative histogram over LATENCY_BUCKETS_S ending at +Inf."""
        for _ in range(3):
            await client.list_pods()
        (histogram,) = client.stats().durations
        bounds = tuple(bound for bound, _ in histogram.buckets)
        counts = [count for _, count in histogram.buckets]
        assert (
            histogram.method,
            bounds,
            histogram.count,
            counts[-1],
            counts == sorted(counts),
            0 < histogram.sum_seconds < 3 * 2.0,
        ) == ("List", LATENCY_BUCKETS_S, 3, 3, True, True)

    async def test_a_cancelled_call_is_counted_cancelled(
        self, sim: SimKubelet, client: KubeletClient
    ) -> None:
        """A call cancelled while the kubelet holds it (shutdown) is counted CANCELLED."""
        sim.hang = True
        pending = asyncio.create_task(client.list_pods())
        await _until_held(sim)
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        sim.hang = False
        assert client.stats().count(method="List", code="CANCELLED") == 1


class TestClose:
    async def test_closed_client_raises(self, sim: SimKubelet, client: KubeletClient) -> None:
        """After close() calls raise KubeletError and touch nothing."""
        await client.list_pods()
        await client.close()
        with pytest.raises(KubeletError):
            await client.list_pods()
        assert sim.calls[V1_LIST] == 1
