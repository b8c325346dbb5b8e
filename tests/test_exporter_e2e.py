"""The real exporter parts against the simulated kubelet over a real unix socket."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import gzip
import json
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import grpc
import pytest
from aiohttp.test_utils import TestClient
from manualclock import ManualClock
from openfiles import held_under
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs
from yarl import URL

from exporter.app import LOOKUP_BURST, LOOKUP_RATE_PER_S, Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.debugview import EncodedView, rfc3339
from exporter.kubelet.errors import KubeletError
from exporter.ratelimit import TokenBucket
from exporter.sim.kubelet import V1_LIST
from exporter.sim.node import SimulatedNode
from exporter.web import DEBUG_VIEWS, SETTINGS

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _config(node: SimulatedNode, *extra: str) -> Any:
    return parse_config(
        [
            *node.exporter_flags(),
            "--kubelet.timeout",
            "1",
            "--poll.interval",
            "1",
            "--collector.timeout",
            "1",
            "--node-name",
            "demo-node",
            *extra,
        ],
        {},
    )


@pytest.fixture
async def exporter(sim_node: SimulatedNode) -> AsyncIterator[Exporter]:
    config = _config(sim_node)
    exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
    yield exporter
    await exporter.close()


@pytest.fixture
async def client(exporter: Exporter, aiohttp_client: Any) -> TestClient:  # type: ignore[type-arg]
    return await aiohttp_client(exporter.create_app())


def _lookup_bucket(clock: ManualClock) -> TokenBucket:
    """The fresh look-ups' bucket as the exporter makes it, on the test's clock."""
    return TokenBucket(rate_per_s=LOOKUP_RATE_PER_S, burst=LOOKUP_BURST, clock=clock)


async def _series(client: TestClient) -> Series:  # type: ignore[type-arg]
    response = await client.get("/metrics")
    assert response.status == 200
    text = await response.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, tuple(sorted(labels.items())))


# The trainer's exclusive CPUs' iowait seconds, whose floors the two late-render tests watch.
TRAINER_IOWAIT = _key(
    "podresources_container_exclusive_cpu_seconds_total",
    namespace="ml-training",
    pod="trainer-0",
    container="trainer",
    cpus="2-9",
    mode="iowait",
)


def _stat_with_iowait(text: str, ticks: int, *, offline: str = "") -> str:
    """/proc/stat ``text`` with every CPU's iowait ``ticks`` on, and CPU ``offline``'s
    line left out."""
    lines = []
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == offline:
            continue
        if fields and fields[0].startswith("cpu") and fields[0] != "cpu":
            fields[5] = str(int(fields[5]) + ticks)  # name, user, nice, ... iowait
        lines.append(" ".join(fields))
    return "\n".join(lines) + "\n"


async def _iowait_rendered_during_a_hung_poll(
    exporter: Exporter,
    client: TestClient,  # type: ignore[type-arg]
    sim_node: SimulatedNode,
) -> float:
    """The trainer's iowait on the published snapshot's page, first scraped while the
    next poll waits on a hung kubelet, its collectors' readings already taken."""
    lists = sim_node.kubelet.calls["v1.List"]
    sim_node.kubelet.hang = True
    try:
        polling = asyncio.ensure_future(exporter.poller.poll_once())
        for _ in range(1000):
            await asyncio.sleep(0.005)
            if sim_node.kubelet.calls["v1.List"] > lists and not exporter.runner.busy():
                break
        late = (await _series(client))[TRAINER_IOWAIT]
        await polling
    finally:
        sim_node.kubelet.hang = False
    return late


def _with_name(series: Series, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in series.items() if n == name}


def _owners(series: Series, name: str) -> set[tuple[str, str, str]]:
    return {
        (dict(labels)["namespace"], dict(labels)["pod"], dict(labels)["container"])
        for labels in _with_name(series, name)
    }


class TestMetrics:
    async def test_container_device_info_labels(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """Every allocated device of the scenario appears once with its owner and NUMA node."""
        await exporter.poller.poll_once()
        series = await _series(client)
        expected = {
            (
                ("container", c.name),
                ("device_id", device_id),
                ("namespace", pod.namespace),
                ("numa_node", ",".join(map(str, group.numa_nodes))),
                ("pod", pod.name),
                ("resource", group.resource),
            )
            for pod in sim_node.scenario.state_at(0).pods
            for c in pod.containers
            for group in c.devices
            for device_id in group.device_ids
        }
        assert set(_with_name(series, "podresources_container_device_info")) == expected
        assert len(expected) == 16  # the virtio NIC of net/edge-proxy-0 included

    async def test_gpu_nic_paths_of_the_demo(self, exporter: Exporter, client: TestClient) -> None:  # type: ignore[type-arg]
        """Through the whole exporter, on the simulated tree: the trainer's GPU 0 reaches
        its VF through one switch (1, PIX); the inference server's MIG slice reaches its VF,
        PF 0's, only across the sockets (5, SYS) while PF 1's VFs share its GPU's switch
        (best 1): the pair PodresourcesGPUNICNotAligned fires on."""
        await exporter.poller.poll_once()
        series = await _series(client)
        vf = "mellanox.com/cx7_sriov_vf"
        trainer = {"namespace": "ml-training", "pod": "trainer-0", "container": "trainer"}
        server = {"namespace": "ml-inference", "pod": "llm-server-7d9f8", "container": "server"}
        gpu_0 = {**trainer, "resource": "nvidia.com/gpu"}
        gpu_0["device_id"] = "GPU-00000100-5e1f-4c2a-9d3b-000000000100"
        mig = {**server, "resource": "nvidia.com/mig-3g.40gb"}
        mig["device_id"] = "MIG-00000201-5e1f-4c2a-9d3b-000000000201"
        level = "podresources_container_gpu_nic_pcie_level"
        best = "podresources_container_gpu_nic_pcie_best_level"
        assert (1, 1, 5, 1) == (
            series[_key(level, **gpu_0, nic_resource=vf, nic_device_id="0000:4b:00.3")],
            series[_key(best, **gpu_0, nic_resource=vf)],
            series[_key(level, **mig, nic_resource=vf, nic_device_id="0000:4b:00.2")],
            series[_key(best, **mig, nic_resource=vf)],
        )

    async def test_scenario_elements(self, exporter: Exporter, client: TestClient) -> None:  # type: ignore[type-arg]
        """CPUs, hugepages, DRA, alignment and node counts carry the scenario's values."""
        await exporter.poller.poll_once()
        series = await _series(client)
        trainer = {"namespace": "ml-training", "pod": "trainer-0", "container": "trainer"}
        cpus = _key("podresources_container_exclusive_cpus", **trainer, numa_node="0")
        assert series[cpus] == 8
        hugepages = _key(
            "podresources_container_memory_bytes",
            **trainer,
            memory_type="hugepages-1Gi",
            numa_node="0",
        )
        assert series[hugepages] == 8 * 2**30
        server = _key(
            "podresources_container_numa_aligned",
            namespace="ml-inference",
            pod="llm-server-7d9f8",
            container="server",
        )
        assert series[server] == 0
        claims = _with_name(series, "podresources_container_dynamic_resource_info")
        # exporter.sim.dra: NVIDIA's GPU and MIG device, AMD's card, one VF in two claims.
        assert sorted(dict(labels)["driver"] for labels in claims) == [
            "gpu.amd.com",
            "gpu.example.com",
            "gpu.nvidia.com",
            "gpu.nvidia.com",
            "sriovnetwork.k8snetworkplumbingwg.io",
            "sriovnetwork.k8snetworkplumbingwg.io",
        ]
        shared = (("numa_node", "1"), ("resource", "nvidia.com/gpu.shared"))
        assert series[("podresources_node_allocatable_devices", shared)] == 4
        assert series[("podresources_node_allocated_devices", shared)] == 2
        assert series[("podresources_kubelet_up", ())] == 1
        assert (
            series[("podresources_kubelet_requests_total", (("code", "OK"), ("method", "List")))]
            == 1
        )

    async def test_telemetry_joined_to_owners(self, exporter: Exporter, client: TestClient) -> None:  # type: ignore[type-arg]
        """GPU figures carry their owner's labels; shared replicas give one series per owner."""
        await exporter.poller.poll_once()
        series = await _series(client)
        owners = _owners(series, "podresources_gpu_power_watts")
        assert ("ml-training", "trainer-0", "trainer") in owners
        assert ("notebooks", "jupyter-alice", "notebook") in owners
        assert ("notebooks", "jupyter-bob", "notebook") in owners
        assert ("rendering", "blender-0", "render") in owners  # AMD via drm
        cpu = _owners(series, "podresources_container_exclusive_cpu_seconds_total")
        assert ("ml-training", "trainer-0", "trainer") in cpu

    async def test_numa_disagreement_with_sysfs(
        self, exporter: Exporter, client: TestClient
    ) -> None:  # type: ignore[type-arg]
        """The demo's Intel plugin says NUMA 0 where sysfs says 1: one mismatch per device ID."""
        await exporter.poller.poll_once()
        series = await _series(client)
        mismatches = _with_name(series, "podresources_device_numa_mismatch")
        assert sorted(dict(labels)["device_id"] for labels in mismatches) == ["card2-0", "card2-1"]
        assert {
            (dict(labels)["kubelet_numa_node"], dict(labels)["sysfs_numa_node"])
            for labels in mismatches
        } == {("0", "1")}

    async def test_allocation_changes_are_logged(
        self, exporter: Exporter, sim_node: SimulatedNode
    ) -> None:
        """A container that loses its devices and CPUs gets one allocation_changed event."""
        await exporter.poller.poll_once()
        for _ in range(3):
            await sim_node.advance()
        with capture_logs() as logs:
            await exporter.poller.poll_once()
        changes = [e for e in logs if e["event"] == "allocation_changed"]
        assert [(e["pod"], e["devices_removed"], e["cpus_removed"]) for e in changes] == [
            ("etl-0", ["mellanox.com/cx7_sriov_vf/0000:4b:00.4"], [18, 19, 20, 21])
        ]

    async def test_every_change_of_a_poll_is_logged_in_full(
        self, exporter: Exporter, sim_node: SimulatedNode
    ) -> None:
        """A poll after the demo's batch pod went and the next one started: one
        allocation_changed event for each, naming its container, with what it gained
        and lost as lists (as every log format renders them alike)."""
        await exporter.poller.poll_once()
        for _ in range(6):
            await sim_node.advance()
        with capture_logs() as logs:
            await exporter.poller.poll_once()
        fields = ("pod", "container", "devices_added", "devices_removed", "cpus_added")
        vf = "mellanox.com/cx7_sriov_vf/0000:4b:00.4"
        assert [
            ("etl-0", "etl", [], [vf], [], [18, 19, 20, 21]),
            ("etl-1", "etl", [vf], [], [18, 19, 20, 21], []),
        ] == [
            (*[e[f] for f in fields], e["cpus_removed"])
            for e in logs
            if e["event"] == "allocation_changed"
        ]

    async def test_the_first_answer_is_loaded_not_changed(
        self, exporter: Exporter, sim_node: SimulatedNode
    ) -> None:
        """What the kubelet holds at the exporter's start, or when it first answers after
        it, changed no hands: one allocations_loaded line with the counts, not an
        allocation_changed line per container (a rollout over a cluster wrote one for
        every allocation of every node)."""
        await sim_node.kubelet.stop()
        with capture_logs() as logs:
            await exporter.poller.poll_once()  # no kubelet yet
            await sim_node.kubelet.start()
            for _ in range(100):  # until the client's reconnect backoff lets it through
                first = await exporter.poller.poll_once()
                if first.snapshot.kubelet.up:
                    break
                await asyncio.sleep(0.05)
            await exporter.poller.poll_once()
        holders = sum(  # containers with devices (a DRA claim's too) or exclusive CPUs
            1
            for p in first.snapshot.pods
            for c in p.containers
            if c.devices or c.claim_devices or c.cpu_ids
        )
        assert [] == [e for e in logs if e["event"] == "allocation_changed"]
        assert [(len(first.snapshot.pods), holders)] == [
            (e["pods"], e["holders"]) for e in logs if e["event"] == "allocations_loaded"
        ]
        assert holders > 10

    @pytest.mark.parametrize(("unimplemented", "api"), [((), "v1"), ((V1_LIST,), "v1alpha1")])
    async def test_the_first_answer_says_which_api_gave_it(
        self,
        exporter: Exporter,
        sim_node: SimulatedNode,
        unimplemented: tuple[str, ...],
        api: str,
    ) -> None:
        """allocations_loaded names the PodResources API that answered: on a kubelet
        without v1 (before 1.20) v1alpha1 gives device IDs only, no exclusive CPUs,
        memory or DRA claims, and nothing at the start said which one was read."""
        sim_node.kubelet.unimplemented |= set(unimplemented)
        with capture_logs() as logs:
            await exporter.poller.poll_once()
        assert [api] == [e["api"] for e in logs if e["event"] == "allocations_loaded"]

    async def test_a_first_answer_never_published_is_still_loaded_not_changed(
        self, exporter: Exporter, sim_node: SimulatedNode, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The kubelet's first answer, whose poll failed after it (here the join), then
        the kubelet gone: the poll that publishes that answer, from the last good data,
        loads it too, rather than logging every allocation as changed."""
        import exporter.poller as poller_module

        real = poller_module.join_snapshot
        failed: list[bool] = []

        def fails_on_the_first_answer(**arguments: Any) -> Any:
            if arguments["kubelet"].up and not failed:
                failed.append(True)
                raise RuntimeError("the join failed once")
            return real(**arguments)

        await sim_node.kubelet.stop()
        with capture_logs() as logs:
            await exporter.poller.poll_once()  # no kubelet yet
            await sim_node.kubelet.start()
            monkeypatch.setattr(poller_module, "join_snapshot", fails_on_the_first_answer)
            for _ in range(100):  # until List answers, and that poll fails
                with contextlib.suppress(RuntimeError):
                    await exporter.poller.poll_once()
                if failed:
                    break
                await asyncio.sleep(0.05)
            await sim_node.kubelet.stop()
            published = await exporter.poller.poll_once()  # the last good data, kubelet down
        assert (False, True) == (published.snapshot.kubelet.up, bool(published.snapshot.pods))
        assert [] == [e for e in logs if e["event"] == "allocation_changed"]
        assert 1 == len([e for e in logs if e["event"] == "allocations_loaded"])

    async def test_deleted_pod_disappears(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """The churning batch pod's series are gone at the first poll after it is."""
        await exporter.poller.poll_once()
        text = await (await client.get("/metrics")).text()
        assert 'pod="etl-0"' in text
        for _ in range(3):
            await sim_node.advance()
        await exporter.poller.poll_once()
        text = await (await client.get("/metrics")).text()
        assert 'pod="etl-0"' not in text
        assert 'pod="trainer-0"' in text

    async def test_negotiates_openmetrics_and_gzip(
        self, exporter: Exporter, client: TestClient
    ) -> None:  # type: ignore[type-arg]
        """OpenMetrics when asked by Accept, gzip when asked by Accept-Encoding."""
        await exporter.poller.poll_once()
        response = await client.get(
            "/metrics",
            headers={
                "Accept": "application/openmetrics-text;version=1.0.0",
                "Accept-Encoding": "gzip",
            },
            auto_decompress=False,
        )
        assert response.headers["Content-Type"].startswith("application/openmetrics-text")
        assert response.headers["Content-Encoding"] == "gzip"
        body = gzip.decompress(await response.read())
        assert body.endswith(b"# EOF\n")

    async def test_scrapes_never_call_the_kubelet(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """50 concurrent scrapes and debug reads add zero kubelet calls (counted server-side)."""
        await exporter.poller.poll_once()
        before = dict(sim_node.kubelet.calls)
        responses = await asyncio.gather(
            *(client.get("/metrics") for _ in range(50)),
            *(client.get("/debug/allocations") for _ in range(10)),
        )
        assert [r.status for r in responses] == [200] * 60
        assert dict(sim_node.kubelet.calls) == before
        assert before == {"v1.List": 1, "v1.GetAllocatableResources": 1, "v1.Get": 1}

    async def test_a_netdev_named_by_a_byte_that_is_not_utf8(
        self, sim_node: SimulatedNode, aiohttp_client: Any
    ) -> None:
        """The kernel lets a netdev's name hold any byte but '/', ':' and whitespace.
        One not UTF-8 used to fail every scrape with a 500 (the page could not be
        encoded); its series now name it with the byte escaped, in both formats."""
        net = sim_node.sysfs / "class" / "net"
        os.rename(os.fsencode(net / "ens1f0np0"), os.fsencode(net) + b"/eth\xe9")
        exporter = Exporter(
            _config(sim_node), collectors=demo_collectors(_config(sim_node), sim_node)
        )
        try:
            await exporter.poller.poll_once()
            client = await aiohttp_client(exporter.create_app())
            for accept in ("text/plain", "application/openmetrics-text;version=1.0.0"):
                response = await client.get("/metrics", headers={"Accept": accept})
                assert response.status == 200
                assert 'interface="eth\\\\xe9"' in await response.text()
        finally:
            await exporter.close()


async def test_each_timing_flag_reaches_the_part_that_keeps_it(sim_node: SimulatedNode) -> None:
    """--kubelet.timeout, --poll.interval and --collector.timeout, all different (the
    other tests give each 1 s, which would hide a swap): the kubelet calls' deadline, the
    look-ups' backoff cap (half a poll), the poller's interval, the collectors' timeout
    and /readyz's three intervals each get their own; the look-ups' bucket its rate."""
    config = parse_config(
        [
            *sim_node.exporter_flags(),
            "--kubelet.timeout=2s",
            "--poll.interval=8s",
            "--collector.timeout=3s",
        ],
        {},
    )
    exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
    try:
        kept = (
            exporter.client._timeout_s,
            exporter.client._backoff._max_s,
            exporter.poller._interval_s,
            exporter.runner._timeout_s,
            exporter.create_app()[SETTINGS].poll_interval_s,
            exporter.lookup._bucket._rate_per_s,
            exporter.lookup._bucket._burst,
        )
    finally:
        await exporter.close()
    assert (2.0, 4.0, 8.0, 3.0, 8.0, LOOKUP_RATE_PER_S, LOOKUP_BURST) == kept


async def test_close_lets_go_of_the_kubelet_and_the_kept_files(sim_node: SimulatedNode) -> None:
    """Closing the exporter, as SIGTERM's clean-up does, closes the kubelet channel (a
    later call is refused) and every counter file the collectors kept open from poll to
    poll (netdev's statistics)."""
    config = _config(sim_node)
    exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
    try:
        await exporter.poller.poll_once()
        kept = held_under(sim_node.sysfs)
    finally:
        await exporter.close()
    with pytest.raises(KubeletError, match="closed"):
        await exporter.client.get_pod(namespace="ml-training", name="trainer-0")
    assert (True, []) == (len(kept) > 0, held_under(sim_node.sysfs))


class TestKubeletFailures:
    async def test_killed_kubelet_keeps_last_snapshot_then_recovers(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """Kubelet gone: last data served with its age and kubelet_up 0; back: recovers."""
        first = await exporter.poller.poll_once()
        await sim_node.kubelet.stop()
        await asyncio.sleep(0.05)
        stale = await exporter.poller.poll_once()
        series = await _series(client)
        assert series[("podresources_kubelet_up", ())] == 0
        assert (
            series[("podresources_snapshot_timestamp_seconds", ())] == first.snapshot.collected_at
        )
        assert 'pod="trainer-0"' in (await (await client.get("/metrics")).text())
        body = await (await client.get("/debug/allocations")).json()
        assert body["kubelet"]["up"] is False
        assert body["kubelet"]["last_error"].startswith("List: ")
        assert body["age_seconds"] > 0
        assert [(p.namespace, p.name) for p in stale.snapshot.pods] == [
            (p.namespace, p.name) for p in first.snapshot.pods
        ]

        await sim_node.kubelet.start()
        for _ in range(40):  # the client backs off after UNAVAILABLE; bounded wait
            published = await exporter.poller.poll_once()
            if published.snapshot.kubelet.up:
                break
            await asyncio.sleep(0.25)
        assert published.snapshot.kubelet.up
        assert published.snapshot.collected_at > first.snapshot.collected_at

    async def test_no_process_is_foreign_before_the_kubelet_first_answers(
        self, sim_node: SimulatedNode, aiohttp_client: Any
    ) -> None:
        """Started while the kubelet's socket does not answer (the kubelet restarting, a
        socket the pod may not open), the exporter does not know who holds a GPU: no
        process is counted foreign -- not every busy GPU's on a device nobody holds --
        until the kubelet answers."""
        config = _config(sim_node, "--collector.gpu_processes")
        exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
        foreign = "podresources_gpu_foreign_processes"
        try:
            client = await aiohttp_client(exporter.create_app())
            await sim_node.kubelet.stop()
            await exporter.poller.poll_once()
            refreshed = await exporter.poller.poll_once()  # the readings of the same data
            unknown = _with_name(await _series(client), foreign)
            await sim_node.kubelet.start()
            for _ in range(40):  # the client backs off after UNAVAILABLE; bounded wait
                if (await exporter.poller.poll_once()).snapshot.kubelet.up:
                    break
                await asyncio.sleep(0.25)
            known = _with_name(await _series(client), foreign)
        finally:
            await exporter.close()
        assert ({}, None) == (unknown, refreshed.snapshot.collected_at)
        gpu_6 = "GPU-00000106-5e1f-4c2a-9d3b-000000000106"  # busy with a host process
        assert {("unallocated_device", gpu_6)} == {
            (dict(labels)["kind"], dict(labels)["device_id"])
            for labels, value in known.items()
            if dict(labels)["kind"] == "unallocated_device" and value
        }

    async def test_hung_kubelet_costs_one_deadline(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """A kubelet that never answers: the poll ends at the deadline, the old data stays."""
        await exporter.poller.poll_once()
        sim_node.kubelet.hang = True
        try:
            published = await asyncio.wait_for(exporter.poller.poll_once(), timeout=10)
        finally:
            sim_node.kubelet.hang = False
        assert published.snapshot.kubelet.up is False
        assert "DEADLINE_EXCEEDED" in (published.snapshot.kubelet.last_error or "")
        assert 'pod="trainer-0"' in (await (await client.get("/metrics")).text())

    async def test_cpu_seconds_never_fall_when_a_page_is_rendered_during_the_next_poll(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """A snapshot's page is rendered by its first scrape; while the next poll waits on
        a hung kubelet, that scrape comes after the poll has read /proc/stat. iowait going
        back a little in between (as the kernel's does) must not fall on the next page:
        Prometheus reads any decrease as a reset and counts the CPUs' lifetime again."""
        stat = sim_node.procfs / "stat"
        text = stat.read_text()
        await exporter.poller.poll_once()
        first = (await _series(client))[TRAINER_IOWAIT]
        stat.write_text(_stat_with_iowait(text, 10))
        await exporter.poller.poll_once()  # published; its first scrape comes later
        stat.write_text(_stat_with_iowait(text, 5))  # back by 5 ticks
        late = await _iowait_rendered_during_a_hung_poll(exporter, client, sim_node)
        latest = (await _series(client))[TRAINER_IOWAIT]
        assert (first + 8 * 0.1, late, late) == pytest.approx((late, late, latest))

    async def test_cpu_seconds_never_fall_when_the_next_poll_finds_a_cpu_offline(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """As above, with the next poll's read finding one of the container's CPUs
        offline: the page rendered late still floors that CPU on the figures last given
        (iowait 10 ticks on, then 5 back), instead of giving a sum that fell."""
        stat = sim_node.procfs / "stat"
        text = stat.read_text()
        stat.write_text(_stat_with_iowait(text, 10))
        await exporter.poller.poll_once()
        rendered = (await _series(client))[TRAINER_IOWAIT]
        stat.write_text(_stat_with_iowait(text, 5))  # back by 5 ticks
        await exporter.poller.poll_once()  # published; its first scrape comes later
        stat.write_text(_stat_with_iowait(text, 5, offline="cpu2"))
        late = await _iowait_rendered_during_a_hung_poll(exporter, client, sim_node)
        assert late == pytest.approx(rendered)

    async def test_rate_limited_kubelet_backs_off(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """RESOURCE_EXHAUSTED marks the kubelet down; fresh look-ups are held back
        meanwhile (answered from the snapshot), the poller's own calls are not."""
        await exporter.poller.poll_once()
        sim_node.kubelet.force_code = grpc.StatusCode.RESOURCE_EXHAUSTED
        await exporter.poller.poll_once()
        body = await (await client.get("/debug/allocations/ml-training/trainer-0")).json()
        assert body["source"].endswith("(backing off))")
        assert sim_node.kubelet.calls["v1.Get"] == 1  # the first poll's probe only
        await exporter.poller.poll_once()
        series = await _series(client)
        assert series[("podresources_kubelet_up", ())] == 0
        assert (
            series[
                (
                    "podresources_kubelet_requests_total",
                    (("code", "RESOURCE_EXHAUSTED"), ("method", "List")),
                )
            ]
            == 2
        )

    async def test_unimplemented_allocatable(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """An old kubelet without GetAllocatableResources: pods still listed, API marked."""
        sim_node.kubelet.unimplemented.add("v1.GetAllocatableResources")
        await exporter.poller.poll_once()
        series = await _series(client)
        assert series[("podresources_kubelet_up", ())] == 1
        assert (
            series[("podresources_kubelet_api_available", (("method", "GetAllocatableResources"),))]
            == 0
        )
        assert series[("podresources_kubelet_api_available", (("method", "List"),))] == 1
        assert _with_name(series, "podresources_container_device_info")
        assert not _with_name(series, "podresources_node_allocatable_devices")
        # No inventory says nothing of the held devices: none is "no longer offered".
        assert not _with_name(series, "podresources_device_not_allocatable")

    async def test_reply_over_4_mib_is_read(self, sim_node: SimulatedNode) -> None:
        """With --kubelet.max-message-bytes raised, a List reply of more than gRPC's own
        4 MiB default arrives whole."""
        config = _config(sim_node, "--kubelet.max-message-bytes", str(8 * 1024 * 1024))
        exporter = Exporter(config, collectors=demo_collectors(config, sim_node))
        sim_node.kubelet.padding_bytes = 5 * 1024 * 1024
        try:
            published = await exporter.poller.poll_once()
        finally:
            await exporter.close()
        assert published.snapshot.kubelet.up
        padding = [
            d
            for p in published.snapshot.pods
            if p.namespace == "sim-padding"
            for c in p.containers
            for d in c.devices
        ]
        assert sum(len(d.device_id) for d in padding) >= 5 * 1024 * 1024


class TestDebugEndpoints:
    async def test_filters_and_text(self, exporter: Exporter, client: TestClient) -> None:  # type: ignore[type-arg]
        """Filters narrow the pods; the text table lists them; the age is always there."""
        await exporter.poller.poll_once()
        body = await (
            await client.get("/debug/allocations", params={"namespace": "notebooks"})
        ).json()
        assert sorted(p["name"] for p in body["pods"]) == ["jupyter-alice", "jupyter-bob"]
        assert body["node"] == "demo-node"
        assert body["age_seconds"] >= 0
        assert body["collected_at"].endswith("Z")
        body = await (
            await client.get("/debug/allocations", params={"resource": "amd.com/gpu"})
        ).json()
        assert [(p["namespace"], p["name"]) for p in body["pods"]] == [("rendering", "blender-0")]
        device = body["pods"][0]["containers"][0]["devices"][0]
        assert device["telemetry"]["identity"]["vendor"] == "amd"
        text = await (await client.get("/debug/allocations", params={"format": "text"})).text()
        assert "trainer-0" in text
        assert "llm-server-7d9f8" in text
        assert "NO" in text

    async def test_an_empty_container_filter_is_answered(
        self,
        exporter: Exporter,
        client: TestClient,  # type: ignore[type-arg]
    ) -> None:
        """?container= names a pod's shared pool by its JSON name (README): answered
        through the HTTP layer, not refused as an empty value as every other empty
        filter is. What it selects is test_debugview's and test_debugview_processes'."""
        await exporter.poller.poll_once()
        for asked in ("", "(pod pool)"):
            for output in ("json", "text"):
                params = {"container": asked, "format": output}
                response = await client.get("/debug/allocations", params=params)
                assert 200 == response.status, await response.text()

    @pytest.mark.parametrize(
        ("path", "status"),
        [
            ("/debug/allocations?bogus=1", 400),
            ("/debug/allocations?format=xml", 400),
            ("/debug/allocations?namespace=", 400),
            ("/debug/allocations?pod=&container=", 400),
            ("/debug/allocations?namespace=%ff", 400),
            ("/debug/allocations?namespace=%zz", 400),  # escapes are two hex digits
            ("/debug/allocations?namespace=ab%", 400),
            (f"/debug/allocations?namespace={'n' * 513}", 400),  # values of sane length
            ("/debug/allocations?pod=a%09b", 400),  # printable ones
            ("/debug/allocations?namespace=a&namespace=b", 400),  # each given once
            ("/debug/allocations/ml-training/NOT_A_NAME", 400),
            ("/debug/allocations/ml-training/Trainer-0", 400),  # names are lower case
            ("/debug/allocations/ml.training/trainer-0", 400),  # namespaces have no dots
            (f"/debug/allocations/{'n' * 64}/trainer-0", 400),  # nor more than 63 characters
            # Python's "$" matches before a final newline: names are matched whole.
            ("/debug/allocations/ml-training/trainer-0%0A", 400),
            ("/debug/allocations/ml-training%0A/trainer-0", 400),
            ("/debug/allocations/ml-training/no-such-pod", 404),
            ("/debug/allocations/ml-training/no.such.pod", 404),  # pod names may have dots
            ("/nope", 404),
        ],
    )
    async def test_bad_input_gets_one_line_json(
        self,
        exporter: Exporter,
        client: TestClient,  # type: ignore[type-arg]
        sim_node: SimulatedNode,
        path: str,
        status: int,
    ) -> None:
        """Bad input: a 4xx with one line of JSON naming the problem, never a 500; a name
        Kubernetes could not have costs no kubelet call."""
        await exporter.poller.poll_once()
        asked_before = sim_node.kubelet.calls["v1.Get"]
        response = await client.get(URL(path, encoded=True))  # sent as written
        assert response.status == status
        text = await response.text()
        assert text.count("\n") == 1
        assert "error" in json.loads(text)
        if status == 400:
            assert asked_before == sim_node.kubelet.calls["v1.Get"]

    async def test_fresh_pod_via_get(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """One pod answered fresh through Get; with Get disabled, from the snapshot."""
        await exporter.poller.poll_once()
        body = await (await client.get("/debug/allocations/ml-training/trainer-0")).json()
        assert body["source"] == "kubelet Get"
        assert [c["name"] for c in body["pods"][0]["containers"]] == ["log-shipper", "trainer"]
        sim_node.kubelet.disabled.add("v1.Get")
        body = await (await client.get("/debug/allocations/ml-training/trainer-0")).json()
        assert body["source"].startswith("snapshot")
        assert body["pods"][0]["name"] == "trainer-0"
        assert "telemetry_collected_at" not in body  # one time: the snapshot's

    async def test_fresh_pod_while_list_fails(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """List failing (a reply too large to decode), Get still answering: the pod Get
        gives is current ("ok", not "stale: kubelet down"), and its hardware figures are
        the last poll's, not as old as the last good List (the collectors go on)."""
        from exporter.sim.kubelet import V1_LIST

        await exporter.poller.poll_once()
        sim_node.kubelet.undecodable = {V1_LIST}
        for _ in range(2):
            await asyncio.sleep(0.4)
            published = await exporter.poller.poll_once()
        body = await (await client.get("/debug/allocations/ml-training/trainer-0")).json()
        assert (published.snapshot.kubelet.up, body["source"], body["status"]) == (
            False,
            "kubelet Get",
            "ok",
        )
        assert body["telemetry_older_by_seconds"] < 0.4

    async def test_the_age_shown_is_not_moved_by_a_wall_clock_step(
        self, exporter: Exporter, client: TestClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:  # type: ignore[type-arg]
        """NTP stepping the wall clock back an hour after a poll: the view still says the
        data is a moment old, not -3600 s (nor, stepped on, an hour: on-call would take
        the kubelet for stuck)."""
        await exporter.poller.poll_once()
        real = time.time
        for step in (-3600, 3600):
            monkeypatch.setattr("exporter.web.time.time", lambda step=step: real() + step)
            body = await (await client.get("/debug/allocations")).json()
            assert 0 <= body["age_seconds"] < 5
            text = await (await client.get("/debug/allocations?format=text")).text()
            shown = re.search(r", data age (-?[0-9.]+)s,", text.splitlines()[0])
            assert shown is not None
            assert 0 <= float(shown.group(1)) < 5

    async def test_fresh_pod_says_its_telemetry_is_the_polls(
        self, exporter: Exporter, client: TestClient
    ) -> None:  # type: ignore[type-arg]
        """A Get view's allocation is fresh, its hardware figures are the last poll's:
        the view says when they were read and how much older they are, in JSON and in
        the table's header (it gave one age, ~0, for both)."""
        published = await exporter.poller.poll_once()
        await asyncio.sleep(0.3)
        body = await (await client.get("/debug/allocations/ml-training/trainer-0")).json()
        text = await (
            await client.get("/debug/allocations/ml-training/trainer-0?format=text")
        ).text()
        readings_at = published.snapshot.readings_at
        assert readings_at is not None
        assert (body["telemetry_collected_at"], 0 <= body["age_seconds"] < 0.3) == (
            rfc3339(readings_at),
            True,
        )
        assert body["telemetry_older_by_seconds"] >= 0.3
        assert "s older: the last poll's)" in text.splitlines()[0]

    async def test_a_pod_newer_than_the_snapshot_is_not_denied_when_unasked(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """A pod scheduled since the last poll, looked up while fresh look-ups are held
        back: 503 with Retry-After, not a 404 saying it does not exist. With Get disabled
        the snapshot is all there is, and a pod missing from it is a 404."""
        clock = ManualClock()
        exporter.lookup._bucket = _lookup_bucket(clock)  # the time is the test's
        await exporter.poller.poll_once()
        kubelet = sim_node.kubelet
        pods = kubelet.listed_pods()
        new = replace(next(p for p in pods if p.namespace == "ml-training"), name="just-started")
        kubelet.set_state(pods=(*pods, new), allocatable=kubelet.allocatable())
        for _ in range(5):  # others spend the look-ups' burst
            await client.get("/debug/allocations/ml-training/elsewhere")
        response = await client.get("/debug/allocations/ml-training/just-started")
        assert (response.status, response.headers.get("Retry-After")) == (503, "1")
        assert "rate-limited" in (await response.json())["error"]
        kubelet.disabled.add("v1.Get")
        clock.now += 1.0  # a token again
        response = await client.get("/debug/allocations/ml-training/just-started")
        assert response.status == 404
        assert (await response.json())["error"].endswith("not in the last snapshot")

    async def test_unfiltered_views_go_with_their_snapshot(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """The unfiltered view's encodings are kept with their snapshot: once a newer one
        is published and nobody holds them, they are gone (they used to stay until the
        next /debug request: after large kubelet data, the whole large snapshot too)."""

        def encodings_alive() -> int:
            gc.collect()
            return sum(1 for o in gc.get_objects() if isinstance(o, EncodedView))

        await exporter.poller.poll_once()
        before = encodings_alive()  # other tests' may linger in this process
        for output in ("json", "text"):
            assert (await client.get(f"/debug/allocations?format={output}")).status == 200
        assert encodings_alive() == before + 2
        await sim_node.advance()
        await exporter.poller.poll_once()
        assert encodings_alive() == before

    async def test_fresh_lookups_are_coalesced_and_rate_limited(
        self, exporter: Exporter, client: TestClient, sim_node: SimulatedNode
    ) -> None:  # type: ignore[type-arg]
        """40 concurrent curls of one pod make one Get; a burst over many pods is capped."""
        exporter.lookup._bucket = _lookup_bucket(ManualClock())  # no token comes back meanwhile
        await exporter.poller.poll_once()
        before = sim_node.kubelet.calls["v1.Get"]
        sim_node.kubelet.hang = True  # hold the first call so the others must join it
        requests = [
            asyncio.ensure_future(client.get("/debug/allocations/ml-training/trainer-0"))
            for _ in range(40)
        ]
        views = client.app[DEBUG_VIEWS]
        for _ in range(1000):  # until all 40 wait on the one call the kubelet holds
            if sim_node.kubelet.calls["v1.Get"] > before and views.in_flight == 40:
                break
            await asyncio.sleep(0.01)
        sim_node.kubelet.hang = False
        responses = await asyncio.gather(*requests)
        assert [r.status for r in responses] == [200] * 40
        assert sim_node.kubelet.calls["v1.Get"] - before == 1

        names = [(p.namespace, p.name) for p in sim_node.scenario.state_at(0).pods]
        bodies = [
            await (await client.get(f"/debug/allocations/{ns}/{name}")).json() for ns, name in names
        ]
        fresh = [b for b in bodies if b["source"] == "kubelet Get"]
        limited = [b for b in bodies if "rate-limited" in b["source"]]
        # The bucket (burst 5) had one token spent above; the rest come from the snapshot.
        assert len(fresh) == 4
        assert len(fresh) + len(limited) == len(names)
        assert sim_node.kubelet.calls["v1.Get"] - before == 1 + len(fresh)

    async def test_debug_can_be_switched_off(self, exporter: Exporter, aiohttp_client: Any) -> None:
        """--no-web.enable-debug: /debug/allocations is not served; /metrics still is."""
        from exporter.web import WebSettings, create_app

        await exporter.poller.poll_once()
        app = create_app(
            store=exporter.store,
            settings=WebSettings(poll_interval_s=1, enable_debug=False),
            lookup=exporter.lookup,
        )
        client = await aiohttp_client(app)
        assert (await client.get("/debug/allocations")).status == 404
        assert (await client.get("/metrics")).status == 200
        landing = await client.get("/")
        assert (200, False) == (landing.status, "debug/allocations" in await landing.text())

    async def test_readyz_wants_kubelet_data_three_intervals_young(
        self, exporter: Exporter, client: TestClient
    ) -> None:  # type: ignore[type-arg]
        """A snapshot without kubelet data (the kubelet never answered), or with data
        older than three poll intervals (1 s here), is not ready; /healthz stays 200."""
        published = await exporter.poller.poll_once()
        answers = []
        for age in (None, 60, 2):
            collected_at = None if age is None else time.time() - age
            collected_monotonic = None if age is None else time.monotonic() - age
            snapshot = replace(
                published.snapshot,
                collected_at=collected_at,
                collected_monotonic=collected_monotonic,
            )
            exporter.store.current = replace(published, snapshot=snapshot)
            ready = await client.get("/readyz")
            answers.append((ready.status, (await ready.text()).split(":")[0]))
        assert [(503, "not ready"), (503, "not ready"), (200, "ok\n")] == answers
        assert 200 == (await client.get("/healthz")).status

    async def test_readyz_holds_when_the_wall_clock_steps_forward(
        self, exporter: Exporter, client: TestClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:  # type: ignore[type-arg]
        """NTP stepping the clock an hour on (a node booted with its RTC behind) ages no
        kubelet data: data just polled stays ready, the pod stays in its endpoints."""
        await exporter.poller.poll_once()
        stepped = time.time() + 3600
        monkeypatch.setattr("exporter.web.time.time", lambda: stepped)
        ready = await client.get("/readyz")
        assert (200, "ok\n") == (ready.status, await ready.text())

    async def test_readyz_still_sees_stale_data_after_the_clock_steps_back(
        self, exporter: Exporter, client: TestClient, monkeypatch: pytest.MonkeyPatch
    ) -> None:  # type: ignore[type-arg]
        """Kubelet data polled 60 s ago (on the monotonic clock), and since then the wall
        clock stepped back an hour: the data is still 60 s old, not ready; an hour
        behind, it would pass for fresh for an hour while the kubelet stays down."""
        published = await exporter.poller.poll_once()
        collected_at = published.snapshot.collected_at
        assert published.snapshot.collected_monotonic is not None
        assert collected_at is not None
        exporter.store.current = replace(
            published,
            snapshot=replace(
                published.snapshot,
                collected_monotonic=published.snapshot.collected_monotonic - 60,
            ),
        )
        stepped = collected_at - 3600
        monkeypatch.setattr("exporter.web.time.time", lambda: stepped)
        ready = await client.get("/readyz")
        assert (503, "not ready: kubelet data is 60s old\n") == (ready.status, await ready.text())

    async def test_readyz_follows_the_snapshot(
        self, exporter: Exporter, client: TestClient
    ) -> None:  # type: ignore[type-arg]
        """Not ready before the first poll; ready after; healthz always."""
        assert (await client.get("/readyz")).status == 503
        assert (await client.get("/metrics")).status == 503
        assert (await client.get("/healthz")).status == 200
        await exporter.poller.poll_once()
        assert (await client.get("/readyz")).status == 200
        assert (await client.get("/")).status == 200
