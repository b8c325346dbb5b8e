"""The fault matrix, kubelet side: the real exporter process against a misbehaving kubelet.

Each case asserts that the process stays up, that /metrics and /debug/allocations keep
answering within a bound, that the last good data is served with its age, and that
``podresources_kubelet_up``, ``last_error`` and one log line say what happened.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import yaml
from faultkit import ExporterProcess, peak_rss_kib, rss_kib, wait_for
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import DEFAULT_MAX_MESSAGE_BYTES
from exporter.kubelet.convert import list_response_to_proto
from exporter.model import ContainerResources, DeviceGroup, PodResources
from exporter.poller import TRIM_POLLS
from exporter.sim.kubelet import PADDING_NAMESPACE, V1_GET_ALLOCATABLE, V1_LIST
from exporter.sim.node import SimulatedNode

MIB = 1024 * 1024
PROMTOOL = shutil.which("promtool")
SETPRIV = shutil.which("setpriv")
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]
OPENMETRICS = "application/openmetrics-text; version=1.0.0"
DAEMONSET = Path(__file__).resolve().parents[2] / "manifests" / "base" / "daemonset.yaml"
_QUANTITY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def daemonset_memory_limit_bytes() -> int:
    """The exporter container's memory limit in the shipped DaemonSet."""
    (container,) = yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"]["containers"]
    limit = str(container["resources"]["limits"]["memory"])
    return int(limit[:-2]) * _QUANTITY[limit[-2:]]


class Scrape:
    """One look at the exporter: /metrics (parsed when asked), /debug/allocations as JSON."""

    def __init__(self, text: str, debug: dict[str, Any]) -> None:
        self.text = text
        self.debug = debug

    @functools.cached_property
    def series(self) -> Series:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(self.text)
            for s in family.samples
        }

    @property
    def up(self) -> float:
        # Read off the text: parsing a page of 64 KiB label values takes the parser seconds.
        found = re.search(r"^podresources_kubelet_up (\S+)$", self.text, re.MULTILINE)
        assert found, "no podresources_kubelet_up"
        return float(found.group(1))

    @property
    def pods(self) -> set[tuple[str, str]]:
        return {(p["namespace"], p["name"]) for p in self.debug["pods"]}

    def requests(self, *, method: str, code: str) -> float:
        key = ("podresources_kubelet_requests_total", (("code", code), ("method", method)))
        return self.series.get(key, 0.0)


class NoSnapshotYet(Exception):
    """503 before the first poll has published: the one answer that may precede data."""


async def scrape(exporter: ExporterProcess) -> Scrape:
    async with aiohttp.ClientSession() as session:
        status, body, _ = await exporter.get(session, "/metrics")
        if status == 503 and b"no snapshot yet" in body:
            raise NoSnapshotYet()
        assert 200 == status, body[:300]
        debug_status, debug, _ = await exporter.get(session, "/debug/allocations")
        assert 200 == debug_status, debug[:300]
    return Scrape(body.decode(), json.loads(debug))


async def scrape_until(
    exporter: ExporterProcess, check: Callable[[Scrape], bool], *, within_s: float, what: str
) -> Scrape:
    async def attempt() -> Scrape | None:
        try:
            found = await scrape(exporter)
        except NoSnapshotYet:
            return None
        return found if check(found) else None

    result: Scrape = await wait_for(attempt, within_s=within_s, what=what)
    return result


def _thread_names(pid: int) -> list[str]:
    """The kernel's names of a process's threads (gRPC names its own: event_engine...)."""
    names = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            names.append(Path(f"/proc/{pid}/task/{task}/comm").read_text().strip())
        except FileNotFoundError:
            continue  # a thread that ended while listed
    return names


def _refused_lists(scraped: Scrape) -> float:
    """List calls counted RESOURCE_EXHAUSTED (a reply over the size limit among them)."""
    found = re.search(
        r'^podresources_kubelet_requests_total\{code="RESOURCE_EXHAUSTED",method="List"\} (\S+)$',
        scraped.text,
        re.MULTILINE,
    )
    return float(found.group(1)) if found else 0.0


def _refused_for_size(scraped: Scrape) -> bool:
    """/debug shows List refused for the size of its reply (MessageTooLarge)."""
    kubelet = scraped.debug["kubelet"]
    return not kubelet["up"] and "max-message-bytes" in (kubelet["last_error"] or "")


def demo_pods(node: SimulatedNode) -> set[tuple[str, str]]:
    return {(p.namespace, p.name) for p in node.scenario.state_at(0).pods}


class TestSocketFaults:
    @pytest.mark.parametrize("shape", ["absent", "regular file", "directory"])
    async def test_no_kubelet_at_the_socket_path(
        self, sim_node: SimulatedNode, running: Callable[..., Any], shape: str
    ) -> None:
        """No socket at the path: an empty snapshot saying why (not 503), one log line;
        the kubelet coming up there is seen at the next polls, and the end is logged."""
        await sim_node.kubelet.stop()
        if shape == "regular file":
            await asyncio.to_thread(Path(sim_node.socket_path).write_text, "not a socket")
        elif shape == "directory":
            os.mkdir(sim_node.socket_path)
        exporter = await running()
        down = await scrape_until(
            exporter, lambda s: s.debug["kubelet"]["last_error"], within_s=10, what="error"
        )
        await asyncio.sleep(2.5)  # more failing polls: still one log line
        again = await scrape(exporter)
        failed = exporter.named("kubelet_failed")
        assert (0.0, 0.0, set(), None) == (
            down.up,
            again.up,
            again.pods,
            again.debug["age_seconds"],
        )
        assert sim_node.socket_path in again.debug["kubelet"]["last_error"]
        assert (1, "KubeletUnavailable") == (len(failed), failed[0]["kind"])

        if shape == "directory":
            os.rmdir(sim_node.socket_path)
        await sim_node.kubelet.start()  # replaces a stale file, as the kubelet does
        back = await scrape_until(exporter, lambda s: s.up == 1, within_s=15, what="recovery")
        recovered = exporter.named("kubelet_recovered")
        assert (demo_pods(sim_node), None) == (back.pods, back.debug["kubelet"]["last_error"])
        assert (1, True) == (len(recovered), recovered[0]["failures"] >= 2)

    async def test_permission_denied(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """A socket the exporter may not open: kubelet_up 0, the reason in last_error."""
        os.chmod(sim_node.socket_path, 0)
        wrapper: list[str] = []
        if os.geteuid() == 0:  # root opens anything: drop the capabilities that allow it
            if SETPRIV is None:
                pytest.skip("running as root without setpriv (util-linux) to drop CAP_DAC_*")
            wrapper = [SETPRIV, "--bounding-set", "-dac_override,-dac_read_search", "--"]
        exporter = await running(wrapper=wrapper)
        down = await scrape_until(
            exporter, lambda s: s.debug["kubelet"]["last_error"], within_s=10, what="error"
        )
        assert (0.0, 0, True) == (
            down.up,
            sim_node.kubelet.calls[V1_LIST],
            "ermission denied" in down.debug["kubelet"]["last_error"],
        ), down.debug["kubelet"]["last_error"]
        assert 1 == len(exporter.named("kubelet_failed"))


class TestKubeletFaults:
    async def test_killed_and_restarted_with_other_pods(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """Kubelet gone: the last pods served with a growing age; back with other pods:
        those are served and the old ones are gone, at the next polls."""
        exporter = await running(ready_path="/readyz")
        first = await scrape(exporter)
        await sim_node.kubelet.stop()
        stale = await scrape_until(exporter, lambda s: s.up == 0, within_s=10, what="down")
        older = await scrape_until(
            exporter,
            lambda s: s.debug["age_seconds"] > stale.debug["age_seconds"] + 1,
            within_s=10,
            what="age growing",
        )
        # The last good data, unchanged since the kubelet went: only its age grows.
        assert (demo_pods(sim_node), stale.debug["collected_at"]) == (
            older.pods,
            older.debug["collected_at"],
        )
        assert first.debug["collected_at"] <= stale.debug["collected_at"]
        assert 'pod="trainer-0"' in older.text

        replacement = PodResources("ml-training", "trainer-1", (ContainerResources("trainer"),))
        sim_node.kubelet.set_state(pods=(replacement,), allocatable=sim_node.kubelet.allocatable())
        await sim_node.kubelet.start()
        back = await scrape_until(exporter, lambda s: s.up == 1, within_s=15, what="back")
        assert ({("ml-training", "trainer-1")}, False) == (
            back.pods,
            'pod="trainer-0"' in back.text,
        )
        assert (1, 1) == (
            len(exporter.named("kubelet_failed")),
            len(exporter.named("kubelet_recovered")),
        )

    async def test_polls_5_s_apart_hold_no_channel_and_see_a_restart(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """At 5 s between polls the channel is closed after each poll: between polls the
        process runs none of gRPC's event-engine threads, and a kubelet restarted with
        other pods in between is read by the next poll's new channel."""
        exporter = await running("--poll.interval", "5")
        # Between two polls: the data is 1.5-3.5 s old, the next poll 1.5 s away or more.
        await scrape_until(
            exporter,
            lambda s: 1.5 < (s.debug["age_seconds"] or 0) < 3.5,
            within_s=15,
            what="a moment between polls",
        )
        threads = await asyncio.to_thread(_thread_names, exporter.pid)

        await sim_node.kubelet.stop()
        replacement = PodResources("ml-training", "trainer-1", (ContainerResources("trainer"),))
        sim_node.kubelet.set_state(pods=(replacement,), allocatable=sim_node.kubelet.allocatable())
        await sim_node.kubelet.start()
        back = await scrape_until(
            exporter,
            lambda s: s.pods == {("ml-training", "trainer-1")},
            within_s=15,
            what="the restarted kubelet's pods",
        )
        assert ("event_engine" in threads, back.up) == (False, 1.0), threads

    async def test_kubelet_that_never_answers(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """Every call hangs: each poll ends at the deadline, both endpoints keep answering
        with the last data, DEADLINE_EXCEEDED is counted and logged once."""
        exporter = await running(ready_path="/readyz")
        await scrape(exporter)
        sim_node.kubelet.hang = True
        try:
            down = await scrape_until(exporter, lambda s: s.up == 0, within_s=10, what="down")
            await asyncio.sleep(2.5)
            later = await scrape(exporter)
        finally:
            sim_node.kubelet.hang = False
        assert (demo_pods(sim_node), True) == (
            later.pods,
            later.debug["age_seconds"] > down.debug["age_seconds"],
        )
        assert "DEADLINE_EXCEEDED" in later.debug["kubelet"]["last_error"]
        assert later.requests(method="List", code="DEADLINE_EXCEEDED") >= 2
        assert 1 == len(exporter.named("kubelet_failed"))
        await scrape_until(exporter, lambda s: s.up == 1, within_s=10, what="recovery")

    async def test_resource_exhausted_on_every_call(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """RESOURCE_EXHAUSTED always: at most one List and one GetAllocatableResources per
        poll reach the kubelet, whatever the scrape load; logged once."""
        exporter = await running(ready_path="/readyz")
        await scrape(exporter)
        sim_node.kubelet.force_code = grpc.StatusCode.RESOURCE_EXHAUSTED
        before = dict(sim_node.kubelet.calls)
        async with aiohttp.ClientSession() as session:
            loop = asyncio.get_running_loop()
            started = loop.time()
            for _ in range(10):  # scrape load meanwhile: it must not turn into kubelet calls
                await asyncio.gather(
                    *(exporter.get(session, p) for p in ("/metrics", "/debug/allocations") * 20)
                )
                await asyncio.sleep(0.3)
            elapsed = loop.time() - started
        last = await scrape(exporter)
        sim_node.kubelet.force_code = None
        polls = elapsed / 1.0 + 2  # interval 1 s; one poll may straddle each end
        lists = sim_node.kubelet.calls[V1_LIST] - before.get(V1_LIST, 0)
        allocatables = sim_node.kubelet.calls[V1_GET_ALLOCATABLE] - before.get(
            V1_GET_ALLOCATABLE, 0
        )
        assert (True, True, True) == (1 <= lists <= polls, allocatables <= polls, last.up == 0)
        assert last.requests(method="List", code="RESOURCE_EXHAUSTED") >= lists - 1
        failed = exporter.named("kubelet_failed")
        assert (1, "KubeletRateLimited") == (len(failed), failed[0]["kind"])

    async def test_undecodable_replies(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """Undecodable from the first reply: an empty snapshot saying so, not 503 -- and
        no inventory, though GetAllocatableResources answers: beside no pods it would say
        every device and CPU is free; later, the last good data kept; counted INTERNAL,
        logged once per outage."""
        sim_node.kubelet.undecodable = {V1_LIST}
        exporter = await running()
        first = await scrape_until(
            exporter, lambda s: s.debug["kubelet"]["last_error"], within_s=10, what="error"
        )
        assert (0.0, set()) == (first.up, first.pods)
        assert first.requests(method="GetAllocatableResources", code="OK") >= 1
        assert [] == re.findall(r"^podresources_node_alloca\w+", first.text, re.MULTILINE)
        assert "undecodable reply" in first.debug["kubelet"]["last_error"]
        assert first.requests(method="List", code="INTERNAL") >= 1
        assert 0 == first.requests(method="List", code="OK")

        sim_node.kubelet.undecodable = set()
        good = await scrape_until(exporter, lambda s: s.up == 1, within_s=10, what="good")
        sim_node.kubelet.undecodable = {V1_LIST}
        bad = await scrape_until(exporter, lambda s: s.up == 0, within_s=10, what="bad again")
        await asyncio.sleep(1.5)  # another undecodable poll: the same last good data
        worse = await scrape(exporter)
        assert (good.pods, bad.debug["collected_at"]) == (worse.pods, worse.debug["collected_at"])
        assert good.debug["collected_at"] <= bad.debug["collected_at"]
        failed = exporter.named("kubelet_failed")
        assert (2, {"ReplyUndecodable"}) == (len(failed), {e["kind"] for e in failed})

    async def test_list_failing_beside_a_failing_inventory_is_logged(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """GetAllocatableResources failing alone keeps kubelet_up 1; List failing the same
        way beside it flips kubelet_up and /readyz: a line of its own says so, and
        another when List answers again."""
        sim_node.kubelet.undecodable = {V1_GET_ALLOCATABLE}
        exporter = await running()
        await scrape_until(
            exporter, lambda s: exporter.named("kubelet_failed"), within_s=10, what="1"
        )
        sim_node.kubelet.undecodable = {V1_GET_ALLOCATABLE, V1_LIST}
        await scrape_until(exporter, lambda s: s.up == 0, within_s=10, what="List failing")
        sim_node.kubelet.undecodable = {V1_GET_ALLOCATABLE}
        await scrape_until(exporter, lambda s: s.up == 1, within_s=10, what="List back")
        await asyncio.sleep(1.5)
        lines = [
            (e["event"], e["kind"], e["kubelet_up"])
            for e in exporter.named("kubelet_failed") + exporter.named("kubelet_failure_changed")
        ]
        assert lines == [
            ("kubelet_failed", "ReplyUndecodable", True),
            ("kubelet_failure_changed", "ReplyUndecodable", False),
            ("kubelet_failure_changed", "ReplyUndecodable", True),
        ]


class TestLargeReplies:
    async def test_15_mib_then_20_mib(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """With the limit at 16 MiB, 15 MiB is served; 20 MiB fails naming the flag and
        both sizes, the 15 MiB data kept; memory returns to its level after, however many
        polls were refused and however late the next scrape comes (the heap is trimmed
        once small data replaces the large, and again once a scrape lets go of its page)."""
        exporter = await running(f"--kubelet.max-message-bytes={16 * MIB}", ready_path="/readyz")
        await scrape(exporter)
        baseline = rss_kib(exporter.pid)
        # Long IDs: the size without 78,000 series to render (make bench measures those).
        sim_node.kubelet.padding_id_bytes = 64 * 1024
        sim_node.kubelet.padding_bytes = 15 * MIB
        big = await scrape_until(
            exporter,
            lambda s: any(ns == PADDING_NAMESPACE for ns, _ in s.pods),
            within_s=20,
            what="15 MiB reply served",
        )
        sim_node.kubelet.padding_bytes = 20 * MIB
        # Refused for its size, as /debug (read after /metrics) says: a 15 MiB List can
        # also run past the 1 s --kubelet.timeout on a loaded machine (this process, the
        # kubelet's, is busy with the last scrape's 15 MiB /debug page), and a List that
        # got 15 MiB before the knob changed then brings kubelet_up back to 1: /metrics
        # of that deadline's snapshot beside /debug of the next showed last_error null.
        refused = await scrape_until(
            exporter,
            lambda s: s.up == 0 and _refused_for_size(s),
            within_s=20,
            what="refused",
        )
        error = refused.debug["kubelet"]["last_error"]
        # More refused polls than TRIM_POLLS: trims made while the large data was still
        # held (as they once were) would all be spent before it is let go.
        still = await scrape_until(
            exporter,
            lambda s: _refused_lists(s) > TRIM_POLLS,
            within_s=3 * TRIM_POLLS,
            what=f"{TRIM_POLLS + 1} refused polls",
        )
        assert (big.pods, refused.debug["collected_at"]) == (
            still.pods,
            still.debug["collected_at"],
        )
        assert re.fullmatch(
            r"List: reply of 209\d{5} bytes is larger than --kubelet.max-message-bytes="
            r"16777216; raise the flag to accept it",
            error,
        ), error
        # Not necessarily the first failure logged: after a deadline (above) it is logged
        # as kubelet_failure_changed, or as kubelet_failed again once List came back.
        logged = [*exporter.named("kubelet_failed"), *exporter.named("kubelet_failure_changed")]
        assert "MessageTooLarge" in [e["kind"] for e in logged]

        sim_node.kubelet.padding_bytes = 0
        # No scrape for longer than TRIM_POLLS polls (Prometheus scrapes every 15 s to 1
        # min): the page of the large data is let go only by the scrape after.
        await asyncio.sleep(TRIM_POLLS + 1.5)
        await scrape_until(
            exporter, lambda s: s.pods == demo_pods(sim_node), within_s=20, what="small again"
        )
        await asyncio.sleep(2.5)  # a few more polls: the big snapshot's caches let go
        after = rss_kib(exporter.pid)
        # +455 MiB before the allocator was tuned; 17-140 MiB before the heap was trimmed.
        assert after - baseline < 16 * 1024, (baseline, after)

    async def test_a_reply_at_the_default_limit_fits_the_daemonsets_memory(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """A List reply just under the default --kubelet.max-message-bytes, of 40-byte
        device IDs (GPU UUIDs: the shortest that come by the thousand), served, scraped in
        OpenMetrics with gzip, as text, and shown in /debug: the process peaks under the
        manifests' memory limit (~180 MiB of 256 measured; 15 MiB replies passed 450)."""
        exporter = await running(ready_path="/readyz")
        sim_node.kubelet.padding_id_bytes = 40
        sim_node.kubelet.padding_bytes = DEFAULT_MAX_MESSAGE_BYTES * 9 // 10
        reply_bytes = list_response_to_proto(sim_node.kubelet.listed_pods()).ByteSize()
        assert DEFAULT_MAX_MESSAGE_BYTES - 64 * 1024 < reply_bytes <= DEFAULT_MAX_MESSAGE_BYTES
        big = await scrape_until(
            exporter,
            lambda s: any(ns == PADDING_NAMESPACE for ns, _ in s.pods),
            within_s=30,
            what="a reply at the default limit served",
        )
        async with aiohttp.ClientSession() as session:
            headers = {"Accept": OPENMETRICS, "Accept-Encoding": "gzip"}
            status, _, _ = await exporter.get(session, "/metrics", headers=headers)

        assert (200, 1.0) == (status, big.up)
        assert peak_rss_kib(exporter.pid) * 1024 < daemonset_memory_limit_bytes()


HOSTILE = (
    'quote"d',
    "back\\slash",
    "new\nline",
    "ü-ñ-日本",
    "x" * 5000,
    "tab\tand\x1bescape",
    "{}=,#",
)


def hostile_pods() -> tuple[PodResources, ...]:
    return tuple(
        PodResources(
            namespace=f"ns-{value}",
            name=f"pod-{value}",
            containers=(
                ContainerResources(
                    name=f"c-{value}",
                    devices=(DeviceGroup(resource=f"example.com/{value}", device_ids=(value,)),),
                ),
            ),
        )
        for value in HOSTILE
    )


class TestHostileNames:
    async def test_output_stays_valid(
        self, sim_node: SimulatedNode, running: Callable[..., Any]
    ) -> None:
        """Quotes, backslashes, newlines, UTF-8 and 5,000-character values from the kubelet:
        both parsers, promtool and JSON accept the output; the table keeps one row each."""
        sim_node.kubelet.set_state(pods=hostile_pods(), allocatable=sim_node.kubelet.allocatable())
        exporter = await running(ready_path="/readyz")
        found = await scrape_until(
            exporter, lambda s: len(s.pods) == len(HOSTILE), within_s=10, what="hostile pods"
        )
        async with aiohttp.ClientSession() as session:
            _, openmetrics, _ = await exporter.get(
                session, "/metrics", headers={"Accept": "application/openmetrics-text"}
            )
            _, table, _ = await exporter.get(session, "/debug/allocations?format=text")
        families = list(openmetrics_families(openmetrics.decode()))
        infos = sorted(
            dict(labels)["device_id"]
            for name, labels in found.series
            if name == "podresources_container_device_info"
        )
        assert sorted(HOSTILE) == infos
        assert {f"pod-{v}" for v in HOSTILE} == {name for _, name in found.pods}
        assert families, "OpenMetrics parser found nothing"
        assert 2 + len(HOSTILE) == len(table.decode().splitlines())
        if PROMTOOL is None:
            pytest.skip("promtool not found (apt-get install prometheus): parsers checked only")
        result = await asyncio.to_thread(
            subprocess.run,
            [PROMTOOL, "check", "metrics"],
            input=found.text.encode(),
            capture_output=True,
            timeout=60,
        )
        assert 0 == result.returncode, result.stdout.decode() + result.stderr.decode()
