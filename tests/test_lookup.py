"""Fresh look-ups through the kubelet's Get: coalesced per pod, one rate limit for all."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import grpc
import pytest
from manualclock import ManualClock

from exporter.kubelet.client import KubeletClient
from exporter.kubelet.errors import KubeletUnavailable
from exporter.lookup import CoalescingLookup
from exporter.model import ContainerResources, PodResources
from exporter.ratelimit import TokenBucket
from exporter.sim.kubelet import V1_GET, SimKubelet

WORKER = PodResources(
    namespace="team-a", name="worker-0", containers=(ContainerResources(name="main"),)
)
NAMESAKE = replace(WORKER, namespace="team-b", containers=(ContainerResources(name="other"),))


@pytest.fixture
async def sim(socket_path: str) -> AsyncIterator[SimKubelet]:
    kubelet = SimKubelet(socket_path=socket_path)
    kubelet.set_state(pods=(WORKER, NAMESAKE))
    await kubelet.start()
    yield kubelet
    await kubelet.stop()


@pytest.fixture
async def lookup(sim: SimKubelet) -> AsyncIterator[CoalescingLookup]:
    client = KubeletClient(socket_path=sim.socket_path, max_message_bytes=1 << 20, timeout_s=2.0)
    yield CoalescingLookup(
        lambda namespace, name: client.get_pod(namespace=namespace, name=name),
        bucket=TokenBucket(rate_per_s=2.0, burst=5, clock=ManualClock()),
    )
    await client.close()


async def _held(sim: SimKubelet, calls: int) -> None:
    for _ in range(500):  # until the kubelet holds the calls (at most 5 s)
        if sim.calls[V1_GET] >= calls:
            return
        await asyncio.sleep(0.01)


async def test_pods_of_one_name_in_two_namespaces_are_asked_apart(
    sim: SimKubelet, lookup: CoalescingLookup
) -> None:
    """Concurrent look-ups share a call only for the same pod: a namesake in another
    namespace is asked about on its own and answered with itself."""
    found = await asyncio.gather(
        lookup.get(namespace="team-a", name="worker-0"),
        lookup.get(namespace="team-b", name="worker-0"),
    )
    assert (found, sim.calls[V1_GET]) == ([WORKER, NAMESAKE], 2)


async def test_one_client_giving_up_leaves_the_others_their_answer(
    sim: SimKubelet, lookup: CoalescingLookup
) -> None:
    """Two requests share one call; the first client disconnecting (its handler
    cancelled) does not cancel the call the second still waits on."""
    sim.hang = True
    impatient = asyncio.ensure_future(lookup.get(namespace="team-a", name="worker-0"))
    patient = asyncio.ensure_future(lookup.get(namespace="team-a", name="worker-0"))
    await _held(sim, 1)
    impatient.cancel()
    await asyncio.sleep(0)
    sim.hang = False
    assert (await patient, sim.calls[V1_GET]) == (WORKER, 1)


async def test_a_call_failing_after_every_client_left_logs_nothing(
    sim: SimKubelet, lookup: CoalescingLookup
) -> None:
    """The call goes on when its only client leaves; its failure then has nobody to
    raise to, and must not end up in asyncio's "exception was never retrieved"."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        sim.hang = True
        alone = asyncio.ensure_future(lookup.get(namespace="team-a", name="worker-0"))
        await _held(sim, 1)
        alone.cancel()
        sim.force_code = grpc.StatusCode.UNAVAILABLE
        sim.hang = False
        for _ in range(500):  # until the call has failed and been forgotten
            if not lookup._in_flight:
                break
            await asyncio.sleep(0.01)
        with pytest.raises(KubeletUnavailable):  # the next client gets its own call
            await lookup.get(namespace="team-a", name="worker-0")
        del alone
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert [] == [c["message"] for c in reported]
