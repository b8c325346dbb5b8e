"""The /metrics page of a snapshot: every variant parses, caches change nothing written."""

from __future__ import annotations

import gzip
import re
from collections.abc import Callable
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text
from test_metricwriter import HOSTILE, PROMTOOL, parse_openmetrics, promtool_problems

from exporter import exposition as exposition_module
from exporter.app import Exporter, demo_collectors
from exporter.cli import parse_config
from exporter.exposition import Exposition, render
from exporter.join import container_cpu_seconds, join_snapshot, refresh_readings
from exporter.metricwriter import FamilyText
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    CollectorRun,
    ContainerResources,
    ContainerView,
    CpuTimes,
    DeviceGroup,
    DeviceIdentity,
    DeviceReading,
    DynamicResource,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    MetricKind,
    MetricSpec,
    PciDevice,
    PodResources,
    Readings,
    Sample,
    Snapshot,
)
from exporter.sim.node import SimulatedNode

VARIANTS = [(om, gz) for om in (False, True) for gz in (False, True)]
VARIANT_IDS = ["text", "text-gzip", "openmetrics", "openmetrics-gzip"]
_LIVE = re.compile(r"^(# (HELP|TYPE) )?(process_|python_)")


async def _demo_snapshot(node: SimulatedNode) -> Snapshot:
    config = parse_config([*node.exporter_flags(), "--node-name", "demo-node"], {})
    exporter = Exporter(config, collectors=demo_collectors(config, node, clock=lambda: 0.0))
    try:
        return (await exporter.poller.poll_once()).snapshot
    finally:
        await exporter.close()


def _page(exposition: Exposition, *, openmetrics: bool, gzipped: bool) -> str:
    body = exposition.page(openmetrics=openmetrics, gzipped=gzipped)
    return (gzip.decompress(body) if gzipped else body).decode()


def _without_live(page: str) -> str:
    return "".join(line + "\n" for line in page.splitlines() if not _LIVE.match(line))


def _cpu_seconds_plus(snapshot: Snapshot, seconds: float) -> Snapshot:
    """``snapshot`` with every CPU's figures ``seconds`` higher: a later poll's readings
    on the same allocations."""
    return replace(
        snapshot,
        cpu_times={
            cpu: CpuTimes(cpu, tuple((mode, value + seconds) for mode, value in t.seconds_by_mode))
            for cpu, t in snapshot.cpu_times.items()
        },
    )


def _hostile_snapshot() -> Snapshot:
    """Label values a kubelet could send that need escaping (resource and device IDs)."""
    containers = tuple(
        ContainerResources(
            f"c{index}",
            devices=(DeviceGroup(resource=f"example.com/{value}", device_ids=(value or "x",)),),
        )
        for index, value in enumerate(HOSTILE)
    )
    return join_snapshot(
        node="node",
        collected_at=1.0,
        kubelet=KubeletStatus(up=True, socket="/s", api=()),
        pods=(PodResources("ns", "pod", containers),),
        allocatable=AllocatableResources(),
        cpu_numa={},
    )


class TestVariants:
    @pytest.mark.parametrize(("openmetrics", "gzipped"), VARIANTS, ids=VARIANT_IDS)
    async def test_every_variant_parses_with_the_official_parser(
        self, sim_node: SimulatedNode, openmetrics: bool, gzipped: bool
    ) -> None:
        """The demo page, in each format and encoding, parses and holds every sample name
        the text page's lines hold (read off the lines, not by a parser)."""
        exposition = render(await _demo_snapshot(sim_node))
        page = _page(exposition, openmetrics=openmetrics, gzipped=gzipped)
        parse = parse_openmetrics if openmetrics else parse_text
        names = {s.name for f in parse(page) for s in f.samples if not _LIVE.match(s.name)}
        lines = exposition.text.decode().splitlines()
        expected = {re.split(r"[{ ]", line, maxsplit=1)[0] for line in lines if line[:1] != "#"}
        assert len(expected) > 40
        assert {n for n in expected if not _LIVE.match(n)} == names

    @pytest.mark.skipif(PROMTOOL is None, reason="promtool not found: apt-get install prometheus")
    @pytest.mark.parametrize(("openmetrics", "gzipped"), VARIANTS, ids=VARIANT_IDS)
    async def test_promtool_accepts_every_variant(
        self, sim_node: SimulatedNode, openmetrics: bool, gzipped: bool
    ) -> None:
        """`promtool check metrics` passes on each variant of the demo page."""
        page = _page(
            render(await _demo_snapshot(sim_node)), openmetrics=openmetrics, gzipped=gzipped
        )
        assert [] == promtool_problems(page, openmetrics=openmetrics)

    @pytest.mark.parametrize(("openmetrics", "gzipped"), VARIANTS, ids=VARIANT_IDS)
    def test_hostile_label_values_round_trip(self, openmetrics: bool, gzipped: bool) -> None:
        """Quotes, backslashes, newlines and UTF-8 in kubelet IDs come back as they went in."""
        page = _page(render(_hostile_snapshot()), openmetrics=openmetrics, gzipped=gzipped)
        parse = parse_openmetrics if openmetrics else parse_text
        families = {f.name: f for f in parse(page)}
        device_ids = [
            s.labels["device_id"] for s in families["podresources_container_device_info"].samples
        ]
        assert [v or "x" for v in HOSTILE] == device_ids

    def test_gzip_holds_the_plain_page(self) -> None:
        """The gzip body, live families and all, is the plain page compressed."""
        exposition = render(_hostile_snapshot())
        assert _without_live(exposition.openmetrics.decode()) == _without_live(
            gzip.decompress(exposition.openmetrics_gzip).decode()
        )


class TestCaches:
    async def test_a_changed_pod_re_renders(self, sim_node: SimulatedNode) -> None:
        """A container whose allocation changed is rendered anew, not from the cache."""
        before = await _demo_snapshot(sim_node)
        pod = before.pods[0]
        container = pod.containers[0]
        changed_container = replace(
            container, cpus_by_numa=(("7", 99),), numa_aligned=not container.numa_aligned
        )
        after = replace(
            before,
            pods=(
                replace(pod, containers=(changed_container, *pod.containers[1:])),
                *before.pods[1:],
            ),
        )
        warm = render(after, previous=render(before)).static(openmetrics=False)
        assert render(after).static(openmetrics=False) == warm
        assert b'numa_node="7",pod="' + pod.name.encode() + b'"} 99.0' in warm

    @pytest.mark.parametrize(
        "change",
        [
            pytest.param(lambda c: replace(c, numa_aligned=not c.numa_aligned), id="alignment"),
            pytest.param(
                lambda c: replace(c, devices=tuple(replace(d, numa_nodes=(1,)) for d in c.devices)),
                id="device-numa-nodes",
            ),
            pytest.param(lambda c: replace(c, cpu_ids=tuple(range(50, 58))), id="cpus"),
        ],
    )
    async def test_a_container_of_which_one_part_changed_re_renders(
        self, sim_node: SimulatedNode, change: Callable[[ContainerView], ContainerView]
    ) -> None:
        """Alignment found later (a DRA device's node read), a device's topology learnt
        after a kubelet restart, or the container made again on other CPUs is written as
        it is now, not as the warm cache last had it."""
        before = await _demo_snapshot(sim_node)
        pod = next(p for p in before.pods if p.name == "trainer-0")
        changed = tuple(change(c) if c.owner.container == "trainer" else c for c in pod.containers)
        after = replace(
            before,
            pods=tuple(replace(p, containers=changed) if p is pod else p for p in before.pods),
        )
        warm = render(after, previous=render(before)).static(openmetrics=False)
        assert render(after).static(openmetrics=False) == warm
        assert render(before).static(openmetrics=False) != warm

    async def test_an_unchanged_snapshot_re_uses_its_bytes(self, sim_node: SimulatedNode) -> None:
        """Each encoding is made once per snapshot, and kept when the next render is equal."""
        snapshot = await _demo_snapshot(sim_node)
        first = render(snapshot)
        encoded = first.static(openmetrics=True)
        again = render(snapshot, previous=first)
        assert (encoded, encoded) == (
            first.static(openmetrics=True),
            again.static(openmetrics=True),
        )
        assert encoded is again.static(openmetrics=True)

    async def test_caches_do_not_change_what_is_written(self, sim_node: SimulatedNode) -> None:
        """A render from warm caches writes what a cold one writes, in both formats."""
        snapshot = await _demo_snapshot(sim_node)
        warm = render(snapshot, previous=render(_hostile_snapshot(), previous=render(snapshot)))
        cold = render(snapshot)
        assert [cold.static(openmetrics=om) for om in (False, True)] == [
            warm.static(openmetrics=om) for om in (False, True)
        ]

    async def test_a_device_whose_samples_changed_is_rendered_anew(
        self, sim_node: SimulatedNode
    ) -> None:
        """Kept telemetry prefixes follow a device's sample labels: a renamed interface or
        a sample that appeared is written as a cold render writes it."""
        before = await _demo_snapshot(sim_node)
        resolution, reading = next(
            (resolution, found.reading)
            for resolution, found in before.hardware.items()
            if found.reading is not None and any(s.label_values for s in found.reading.samples)
        )
        renamed = [tuple(f"{v}-renamed" for v in s.label_values) for s in reading.samples]
        samples = tuple(
            replace(s, value=s.value + 1, label_values=values)
            for s, values in zip(reading.samples, renamed, strict=True)
        )
        hardware = dict(before.hardware)
        hardware[resolution] = replace(
            hardware[resolution], reading=replace(reading, samples=samples[:-1])
        )
        after = replace(before, hardware=hardware)
        warm = render(after, previous=render(before)).static(openmetrics=False)
        assert render(after).static(openmetrics=False) == warm
        assert b"-renamed" in warm

    async def test_exclusive_cpu_modes_that_changed_are_rendered_anew(
        self, sim_node: SimulatedNode
    ) -> None:
        """A container whose CPU modes changed (a mode lost to a garbage figure) gets
        prefixes for its new modes, not the kept ones of its old."""
        before = await _demo_snapshot(sim_node)
        pod = next(
            p for p in before.pods if container_cpu_seconds(p.containers[0], before.cpu_times)
        )
        container = pod.containers[0]
        # Its CPUs' first mode lost (a garbage figure on each of their lines).
        cpu_times = dict(before.cpu_times)
        for cpu in container.cpu_ids:
            cpu_times[cpu] = CpuTimes(cpu, cpu_times[cpu].seconds_by_mode[1:])
        after = replace(before, cpu_times=cpu_times)
        warm = render(after, previous=render(before)).static(openmetrics=True)
        assert render(after).static(openmetrics=True) == warm
        dropped = container_cpu_seconds(container, before.cpu_times)[0][0]
        assert dropped not in dict(container_cpu_seconds(container, after.cpu_times))
        assert f'mode="{dropped}",namespace="{pod.namespace}",pod="{pod.name}"'.encode() not in warm

    async def test_same_allocations_keep_their_families_and_write_new_cpu_seconds(
        self, sim_node: SimulatedNode
    ) -> None:
        """Polls whose kubelet data did not change re-use the allocation families whole
        and write this poll's CPU seconds; an allocation that changes after two such polls
        is rendered anew. Each page is what a cold render of its snapshot writes."""
        before = await _demo_snapshot(sim_node)
        later, latest = _cpu_seconds_plus(before, 1.0), _cpu_seconds_plus(before, 2.5)
        pod = latest.pods[0]
        moved = replace(pod.containers[0], cpus_by_numa=(("7", 99),))
        changed = replace(
            latest, pods=(replace(pod, containers=(moved, *pod.containers[1:])), *latest.pods[1:])
        )

        first = render(before)
        second = render(later, previous=first, same_allocations=True)
        third = render(latest, previous=second, same_allocations=True)
        fourth = render(changed, previous=third)

        for page, snapshot in ((second, later), (third, latest), (fourth, changed)):
            assert page.static(openmetrics=True) == render(snapshot).static(openmetrics=True)
        info = "podresources_container_exclusive_cpus"
        kept = [[f for f in page.families if f.name == info] for page in (first, third, fourth)]
        assert (kept[0][0] is kept[1][0], kept[0][0] is kept[2][0]) == (True, False)

    def test_each_variant_after_the_others_from_one_exposition(self) -> None:
        """A text scrape before an OpenMetrics one (and gzip before gzip) gets each its
        own format from the encodings one snapshot keeps, not the other's."""
        shared = render(_hostile_snapshot())
        for openmetrics, gzipped in VARIANTS:
            alone = render(_hostile_snapshot())
            assert _without_live(
                _page(shared, openmetrics=openmetrics, gzipped=gzipped)
            ) == _without_live(_page(alone, openmetrics=openmetrics, gzipped=gzipped))

    def test_scrapes_of_one_second_share_one_page(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Each variant's whole page is made once per rendering of the live families."""
        now = [100.0]
        monkeypatch.setattr(exposition_module, "_LIVE", exposition_module._Live(lambda: now[0]))
        exposition = render(_hostile_snapshot())
        for openmetrics, gzipped in VARIANTS:
            first = exposition.page(openmetrics=openmetrics, gzipped=gzipped)
            assert first is exposition.page(openmetrics=openmetrics, gzipped=gzipped)
        now[0] += exposition_module.LIVE_MAX_AGE_S
        later = exposition.page(openmetrics=True, gzipped=True)
        assert later is not first
        assert gzip.decompress(later).endswith(b"# EOF\n")


@pytest.mark.parametrize(
    "accept",
    [
        "",  # no header, as curl without -H
        "*/*",
        "text/plain",
        # Prometheus 2.x's default scrape, OpenMetrics left out
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    ],
)
def test_text_is_what_prometheus_client_answers_a_scraper_not_naming_1_0_0(accept: str) -> None:
    from prometheus_client import exposition as text_format

    assert exposition_module.TEXT_CONTENT_TYPE == text_format.choose_encoder(accept)[1]


def test_content_types_are_prometheus_clients() -> None:
    """The content types written out are prometheus_client's: text 0.0.4 and
    OpenMetrics 1.0.0."""
    from prometheus_client import exposition as text_format
    from prometheus_client.openmetrics import exposition as openmetrics_format

    assert exposition_module.TEXT_CONTENT_TYPE == text_format.CONTENT_TYPE_PLAIN_0_0_4
    assert exposition_module.OPENMETRICS_CONTENT_TYPE == openmetrics_format.CONTENT_TYPE_LATEST


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
async def test_request_latency_histogram_is_what_prometheus_client_writes(
    sim_node: SimulatedNode, openmetrics: bool
) -> None:
    """The kubelet request histogram, written by hand, is byte for byte the family
    prometheus_client's HistogramMetricFamily gives for the same buckets."""
    from prometheus_client import exposition as text_format
    from prometheus_client.metrics_core import HistogramMetricFamily
    from prometheus_client.openmetrics import exposition as openmetrics_format
    from prometheus_client.registry import Collector

    snapshot = await _demo_snapshot(sim_node)
    assert snapshot.kubelet_requests.durations, "the demo poll made kubelet calls"
    name = "podresources_kubelet_request_duration_seconds"
    family = HistogramMetricFamily(
        name, "Latency of PodResources calls to the kubelet, in seconds.", labels=["method"]
    )
    for histogram in snapshot.kubelet_requests.durations:
        buckets = [
            ("+Inf" if bound == float("inf") else repr(bound), count)
            for bound, count in histogram.buckets
        ]
        family.add_metric([histogram.method], buckets, histogram.sum_seconds)

    class One(Collector):
        def collect(self) -> list[HistogramMetricFamily]:
            return [family]

    writer = openmetrics_format if openmetrics else text_format
    theirs = writer.generate_latest(One()).decode().removesuffix("# EOF\n")
    page = render(snapshot).static(openmetrics=openmetrics).decode()
    start = page.index(f"# HELP {name} ")
    ours = page[start : page.index("# HELP ", start + 1)]
    assert theirs == ours


def _series_twice(snapshot: Snapshot) -> list[str]:
    """Series (name and labels) on the page more than once: Prometheus keeps only one."""
    page = render(snapshot).text.decode()
    series = [line.rsplit(" ", 1)[0] for line in page.splitlines() if not line.startswith("#")]
    return sorted(s for s in set(series) if series.count(s) > 1)


def _claims_page(*claims: DynamicResource) -> Snapshot:
    container = ContainerResources("c", dynamic_resources=claims)
    return join_snapshot(
        node="n",
        collected_at=1.0,
        kubelet=KubeletStatus(up=True, socket="/s", api=()),
        pods=(PodResources("ns", "p", (container,)),),
        allocatable=AllocatableResources(),
        cpu_numa={},
    )


def _node_of(
    *pods: PodResources,
    cpus: int = 16,
    cpu_numa: dict[int, int] | None = None,
    runs: tuple[CollectorRun, ...] = (),
    allocatable: AllocatableResources | None = None,
    known: bool = True,
) -> Snapshot:
    """The snapshot of a node holding ``pods`` that offers ``allocatable``, else
    ``cpus`` CPUs; ``known``: whether the kubelet answered for its inventory."""
    return join_snapshot(
        node="n",
        collected_at=1.0,
        kubelet=KubeletStatus(up=True, socket="/s", api=()),
        pods=pods,
        allocatable=allocatable or AllocatableResources(cpu_ids=tuple(range(cpus))),
        allocatable_known=known,
        cpu_numa=cpu_numa or {},
        collector_runs=runs,
    )


def test_a_claim_referenced_twice_is_one_claim() -> None:
    """The kubelet lists a claim once per reference in the container (two requests of
    one claim: twice); it is one claim, each device one series."""
    gpus = DynamicResource(
        "gpus",
        "ns",
        (ClaimDevice("gpu.nvidia.com", "a", "gpu-0"), ClaimDevice("gpu.nvidia.com", "a", "gpu-1")),
    )
    snapshot = _claims_page(gpus, gpus)
    assert _series_twice(snapshot) == []
    assert [c.dynamic_resources for c in snapshot.pods[0].containers] == [(gpus,)]


def test_two_shares_of_one_device_are_one_series() -> None:
    """KEP-5075: two requests of one claim may get shares of one device, told apart by
    share_id alone, which is no label."""
    net = DynamicResource(
        "net",
        "ns",
        (
            ClaimDevice("dra.net", "a", "eth1", share_id="aaaa"),
            ClaimDevice("dra.net", "a", "eth1", share_id="bbbb"),
        ),
    )
    assert _series_twice(_claims_page(net)) == []


def test_the_same_container_on_other_cpus_is_another_cpu_seconds_series() -> None:
    """The figure is the since-boot time of the CPUs held: db-0 made again on other CPUs
    would make one series jump (down: a false counter reset that rate() turns into days
    of CPU time; or up). The CPUs are a label, so each holding is its own series."""
    from exporter.model import CollectorRun, Readings

    times = {
        cpu: CpuTimes(cpu, (("user", 100_000.0 if cpu < 8 else 1_000.0),)) for cpu in range(16)
    }
    runs = (CollectorRun("cpu", True, 0.0, Readings(cpu_times=times)),)

    def page(*cpus: int) -> list[str]:
        pod = PodResources("ns", "db-0", (ContainerResources("db", cpu_ids=cpus),))
        text = render(_node_of(pod, runs=runs)).text.decode()
        return [
            line
            for line in text.splitlines()
            if line.startswith("podresources_container_exclusive_cpu_seconds_total{")
        ]

    name = "podresources_container_exclusive_cpu_seconds_total"
    owner = 'mode="user",namespace="ns",pod="db-0"'
    assert page(2, 3) == [f'{name}{{container="db",cpus="2-3",{owner}}} 200000.0']
    assert page(10, 11) == [f'{name}{{container="db",cpus="10-11",{owner}}} 2000.0']


def test_the_cpus_label_is_the_kernels_list_notation() -> None:
    """The cpus label writes runs of CPUs as ranges and lone CPUs alone, as the
    kernel's cpulist files do: "1-3,5,8-9,11", never "5-5" nor a range over a gap."""
    from exporter.model import CollectorRun, Readings

    times = {cpu: CpuTimes(cpu, (("user", 1.0),)) for cpu in range(16)}
    runs = (CollectorRun("cpu", True, 0.0, Readings(cpu_times=times)),)
    pod = PodResources("ns", "db-0", (ContainerResources("db", cpu_ids=(11, 1, 2, 3, 5, 8, 9)),))
    text = render(_node_of(pod, runs=runs)).text.decode()
    labels = re.findall(
        r'^podresources_container_exclusive_cpu_seconds_total\{.*cpus="([^"]*)"', text, re.M
    )
    assert ["1-3,5,8-9,11"] == labels


def test_a_pods_shared_pool_is_container_empty_and_adds_up() -> None:
    """Pod-level resource managers (beta in 1.37): the pod holds CPUs 2-5 and 4 GiB, its
    container "main" 2-3 and 2 GiB, its sidecar nothing of its own. The rest, where the
    sidecar runs, is the pod's shared pool: container "" with CPUs 4-5, 2 GiB and their
    CPU seconds, so a pod's container series add up to what the node counts for it."""
    from exporter.model import CollectorRun, MemoryBlock, Readings

    times = {cpu: CpuTimes(cpu, (("user", 10.0 * cpu),)) for cpu in range(8)}
    gib = 1 << 30
    pod = PodResources(
        "ns",
        "p",
        (
            ContainerResources(
                "main", cpu_ids=(2, 3), memory=(MemoryBlock("memory", 2 * gib, (0,)),)
            ),
            ContainerResources("sidecar"),
        ),
        cpu_ids=(2, 3, 4, 5),
        memory=(MemoryBlock("memory", 4 * gib, (0,)),),
    )
    runs = (CollectorRun("cpu", True, 0.0, Readings(cpu_times=times)),)
    snapshot = _node_of(pod, cpus=8, cpu_numa=dict.fromkeys(range(8), 0), runs=runs)
    families = {f.name: f for f in parse_text(render(snapshot).text.decode())}

    def by_container(name: str) -> dict[str, float]:
        return {s.labels["container"]: s.value for s in families[name].samples}

    assert (
        by_container("podresources_container_exclusive_cpus"),
        by_container("podresources_container_memory_bytes"),
        by_container("podresources_container_exclusive_cpu_seconds"),
        families["podresources_node_allocated_cpus"].samples[0].value,
        families["podresources_node_allocated_memory_bytes"].samples[0].value,
    ) == ({"main": 2, "": 2}, {"main": 2 * gib, "": 2 * gib}, {"main": 50.0, "": 90.0}, 4, 4 * gib)


def test_a_container_named_empty_leaves_no_pool_to_collide_with() -> None:
    """Validation forbids an empty container name, but a kubelet reply may carry one:
    no shared pool is made beside it, so no series appears twice."""
    pod = PodResources("ns", "p", (ContainerResources("", cpu_ids=(6,)),), cpu_ids=(6, 8))
    snapshot = _node_of(pod)
    assert ([""], []) == (
        [c.owner.container for c in snapshot.pods[0].containers],
        _series_twice(snapshot),
    )


def test_a_held_device_the_kubelet_no_longer_offers_is_marked() -> None:
    """GetAllocatableResources lists healthy devices only: a GPU a container holds that
    went unhealthy (or whose plugin is gone) is marked 1; offered ones, held or free,
    and DRA devices (no device-plugin inventory) have no such series."""
    held = ContainerResources(
        "c",
        devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a", "GPU-sick")),),
        dynamic_resources=(
            DynamicResource("claim", "ns", (ClaimDevice("gpu.nvidia.com", "pool", "gpu-4"),)),
        ),
    )
    snapshot = join_snapshot(
        node="n",
        collected_at=1.0,
        kubelet=KubeletStatus(up=True, socket="/s", api=()),
        pods=(PodResources("ns", "p", (held,)),),
        allocatable=AllocatableResources(
            devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a", "GPU-free")),)
        ),
        cpu_numa={},
    )
    family = next(
        f
        for f in parse_text(render(snapshot).text.decode())
        if f.name == "podresources_device_not_allocatable"
    )
    assert {(s.labels["resource"], s.labels["device_id"]): s.value for s in family.samples} == {
        ("nvidia.com/gpu", "GPU-sick"): 1.0,
    }


def test_no_inventory_marks_no_device_as_no_longer_offered() -> None:
    """A kubelet without GetAllocatableResources (old, or the method disabled) gives no
    inventory: held devices are not "no longer offered" for being absent from it."""
    held = ContainerResources("c", devices=(DeviceGroup("nvidia.com/gpu", ("GPU-a", "GPU-b")),))
    snapshot = join_snapshot(
        node="n",
        collected_at=1.0,
        kubelet=KubeletStatus(up=True, socket="/s", api=()),
        pods=(PodResources("ns", "p", (held,)),),
        allocatable=AllocatableResources(),
        allocatable_known=False,
        cpu_numa={},
    )
    text = render(snapshot).text.decode()
    assert [] == [
        s
        for f in parse_text(text)
        if f.name == "podresources_device_not_allocatable"
        for s in f.samples
    ]


def _inventory_lines(allocatable: DeviceGroup, pci: PciDevice) -> list[str]:
    """The device_info and device_numa_mismatch lines of a node whose one device
    (no telemetry) sysfs knows as ``pci``."""
    snapshot = join_snapshot(
        node="n",
        collected_at=1.0,
        kubelet=KubeletStatus(up=True, socket="/s", api=()),
        pods=(),
        allocatable=AllocatableResources(devices=(allocatable,)),
        cpu_numa={},
        collector_runs=(CollectorRun("pci", True, 0.0, Readings(pci_devices=(pci,))),),
    )
    families = ("podresources_device_info{", "podresources_device_numa_mismatch{")
    return [
        line for line in render(snapshot).text.decode().splitlines() if line.startswith(families)
    ]


def test_device_info_takes_the_pci_address_from_sysfs() -> None:
    """A VF no telemetry collector reads still gets its PCI address, as the kernel
    spells it, from sysfs in podresources_device_info, not an empty label."""
    pci = PciDevice("0000:af:00.2", "0x15b3", "0x101e", "0x020000", 1)
    lines = _inventory_lines(DeviceGroup("example.com/vf", ("0000:AF:00.2",), (1,)), pci)
    assert lines == [
        'podresources_device_info{device_id="0000:AF:00.2",model="",numa_node="1",'
        'pci_address="0000:af:00.2",resource="example.com/vf",uuid="",vendor=""} 1.0'
    ]


def test_numa_mismatch_of_a_device_on_two_nodes() -> None:
    """A device the kubelet puts on nodes 0 and 1 is no NUMA mismatch where sysfs names
    node 1, and is one where sysfs names node 2."""
    nic = "0000:af:00.0"

    def mismatches(sysfs_node: int) -> list[str]:
        pci = PciDevice(nic, "0x15b3", "0x101e", "0x020000", sysfs_node)
        lines = _inventory_lines(DeviceGroup("example.com/nic", (nic,), (0, 1)), pci)
        return [line for line in lines if line.startswith("podresources_device_numa_mismatch")]

    assert mismatches(1) == []
    assert mismatches(2) == [
        'podresources_device_numa_mismatch{device_id="0000:af:00.0",kubelet_numa_node="0,1",'
        'resource="example.com/nic",sysfs_numa_node="2"} 1.0'
    ]


# A node with many allocatable IDs of few physical devices: two RDMA shared pools (the
# same IDs in each, as the k8s-rdma-shared-dev-plugin numbers them), a time-sliced GPU's
# replicas, and a VF sysfs knows.
_GPU = "GPU-0a1b"
_VF = "0000:af:00.2"
_UTILIZATION = MetricSpec("podresources_gpu_utilization_ratio", MetricKind.GAUGE, "Busy.")
_POOLS = tuple(f"rdma/hca_shared_devices_{pool}" for pool in "ab")
_DEVICE_FAMILIES = (
    "podresources_device_info",
    "podresources_device_not_allocatable",
    "podresources_device_numa_mismatch",
    "podresources_dra_unresolved_devices",
)


def _pools(
    ids: range = range(50), *, numa_of: Callable[[str, int], int] | None = None
) -> tuple[DeviceGroup, ...]:
    """One group per ID, as the plugins send them: pool a on NUMA node 0, b on 1."""
    return tuple(
        DeviceGroup(pool, (str(n),), ((numa_of or (lambda _, node: node))(f"{pool}/{n}", i),))
        for i, pool in enumerate(_POOLS)
        for n in ids
    )


def _inventory(*groups: DeviceGroup) -> AllocatableResources:
    return AllocatableResources(
        devices=(
            DeviceGroup("nvidia.com/gpu", (f"{_GPU}::0", f"{_GPU}::1"), (0,)),
            DeviceGroup("example.com/vf", (_VF,), (1,)),
            *(groups or _pools()),
        )
    )


_HOLDER = PodResources(
    "ns",
    "p",
    (
        ContainerResources(
            "c",
            devices=(
                DeviceGroup("nvidia.com/gpu", (f"{_GPU}::0",), (0,)),
                DeviceGroup(_POOLS[0], ("7",), (0,)),
            ),
        ),
    ),
)


def _readings(
    utilization: float | None = 0.5, *, identity: bool = True, sysfs_node: int = 1
) -> tuple[CollectorRun, ...]:
    """One poll's readings: the GPU's (none where ``utilization`` is None), the VF's
    PCI function."""
    gpu = DeviceReading(
        _GPU,
        (HardwareKey(KeyKind.GPU_UUID, _GPU),),
        DeviceIdentity(_GPU, "0000:17:00.0", "H100", "nvidia") if identity else DeviceIdentity(),
        () if utilization is None else (Sample(_UTILIZATION, utilization),),
        standalone=True,
    )
    vf = PciDevice(_VF, "0x15b3", "0x101e", "0x020000", sysfs_node)
    return (
        CollectorRun("nvml", True, 0.0, Readings(devices=(gpu,))),
        CollectorRun("pci", True, 0.0, Readings(pci_devices=(vf,))),
    )


def _pooled_node(
    allocatable: AllocatableResources | None = None,
    *,
    runs: tuple[CollectorRun, ...] | None = None,
    known: bool = True,
    pods: tuple[PodResources, ...] = (_HOLDER,),
) -> Snapshot:
    return _node_of(
        *pods,
        allocatable=allocatable or _inventory(),
        known=known,
        runs=_readings() if runs is None else runs,
    )


def _unhealthy_holder() -> Snapshot:
    """The node after the held GPU replica went unhealthy: the kubelet no longer offers
    it (unhealthy devices drop out of the inventory), and it stays held."""
    offered = _inventory().devices
    return _pooled_node(
        replace(
            _inventory(),
            devices=(DeviceGroup("nvidia.com/gpu", (f"{_GPU}::1",), (0,)), *offered[1:]),
        )
    )


def _device_families(page: Exposition) -> list[FamilyText]:
    return [f for f in page.families if f.name in _DEVICE_FAMILIES]


def _parsed(page: Exposition) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Each family's samples as both official parsers read the page (checked alike),
    but the live process families, which may be rendered anew between the two."""
    by_parser = [
        {
            f.name: sorted(((s.labels, s.value) for s in f.samples), key=repr)
            for f in parse(_without_live(_page(page, openmetrics=om, gzipped=False)))
        }
        for parse, om in ((parse_text, False), (parse_openmetrics, True))
    ]
    assert by_parser[0] == by_parser[1]
    return by_parser[0]


class TestDeviceTables:
    """The per-device inventory families are kept from the last render while nothing
    they are made of changed, and written anew, as a cold render writes them, when
    anything did."""

    def test_a_poll_of_new_readings_re_uses_the_device_families(self) -> None:
        """A poll whose kubelet data did not change (its views kept, new readings) takes
        the device families and series owners as the last render made them, the very
        objects, and still writes the new figures."""
        before = _pooled_node()
        later = refresh_readings(
            before,
            collected_at=2.0,
            kubelet=before.kubelet,
            collector_runs=_readings(0.75),
        )
        assert later is not None
        first = render(before)

        warm = render(later, previous=first)

        assert all(
            a is b for a, b in zip(_device_families(warm), _device_families(first), strict=True)
        )
        assert (len(_DEVICE_FAMILIES), True) == (
            len(_device_families(warm)),
            warm.cache.series_owners is first.cache.series_owners,
        )
        assert render(later).static(openmetrics=True) == warm.static(openmetrics=True)
        assert b"podresources_gpu_utilization_ratio{" in warm.static(openmetrics=False)
        assert b"} 0.75\n" in warm.static(openmetrics=False)

    def test_a_join_of_the_same_data_re_uses_them_too(self) -> None:
        """A join made anew (equal views, other objects: another pod churned) finds the
        same devices and facts, and keeps the lines as well."""
        first = render(_pooled_node())
        warm = render(_pooled_node(runs=_readings(0.75)), previous=first)
        assert all(
            a is b for a, b in zip(_device_families(warm), _device_families(first), strict=True)
        )

    def test_devices_of_a_replaced_pod_keep_the_device_families(self) -> None:
        """The holder replaced by a pod of another name holding the same devices (churn):
        the device families, which show no owner, are kept; its telemetry series are
        written under the new owner."""
        first = render(_pooled_node())
        after = _pooled_node(pods=(replace(_HOLDER, name="p-2"),))

        warm = render(after, previous=first)

        assert all(
            a is b for a, b in zip(_device_families(warm), _device_families(first), strict=True)
        )
        assert render(after).static(openmetrics=True) == warm.static(openmetrics=True)
        assert ["p-2"] == [
            labels["pod"] for labels, _ in _parsed(warm)["podresources_gpu_utilization_ratio"]
        ]

    @pytest.mark.parametrize(
        "after",
        [
            pytest.param(lambda: _pooled_node(_inventory(*_pools(range(51)))), id="device-added"),
            pytest.param(
                lambda: _pooled_node(_inventory(*_pools(range(1, 50)))), id="device-removed"
            ),
            pytest.param(
                lambda: _pooled_node(
                    _inventory(
                        *_pools(numa_of=lambda name, node: 0 if name.endswith("b/3") else node)
                    )
                ),
                id="kubelet-numa-changed",
            ),
            pytest.param(_unhealthy_holder, id="held-device-unhealthy"),
            pytest.param(lambda: _pooled_node(runs=_readings(sysfs_node=0)), id="sysfs-numa"),
            pytest.param(lambda: _pooled_node(runs=_readings(identity=False)), id="identity"),
        ],
    )
    def test_a_changed_device_list_or_fact_re_renders(self, after: Callable[[], Snapshot]) -> None:
        """A device added or removed, its NUMA node changed (the kubelet's or sysfs's),
        a held device gone unhealthy, or the identity NVML gave lost: the page is what a
        cold render writes, and its device families are not the last page's."""
        self._assert_re_rendered(_pooled_node(), after())

    def test_an_inventory_no_longer_known_re_renders(self) -> None:
        """The same devices, but the kubelet's inventory now unknown: the held device
        missing from it is no longer marked as not offered."""
        before = _unhealthy_holder()
        self._assert_re_rendered(before, replace(before, allocatable_known=False))

    @staticmethod
    def _assert_re_rendered(before: Snapshot, after: Snapshot) -> None:
        last = render(before)

        warm = render(after, previous=last)

        assert render(after).static(openmetrics=False) == warm.static(openmetrics=False)
        was, now = _parsed(last), _parsed(warm)
        assert [n for n in _DEVICE_FAMILIES if was.get(n) != now.get(n)]

    @pytest.mark.parametrize(
        "runs",
        [pytest.param(_readings(None), id="samples-gone"), pytest.param((), id="reading-gone")],
    )
    def test_telemetry_that_comes_and_goes_is_written_as_it_is(
        self, runs: tuple[CollectorRun, ...]
    ) -> None:
        """A device whose reading had no samples, or no reading (NVML not up yet), has
        telemetry series once it has them, and none again once they are gone; each page
        is what a cold render writes."""
        with_samples, without = _pooled_node(), _pooled_node(runs=runs)

        came = render(with_samples, previous=render(without))
        gone = render(without, previous=came)

        assert (True, False) == (
            "podresources_gpu_utilization_ratio" in _parsed(came),
            "podresources_gpu_utilization_ratio" in _parsed(gone),
        )
        for page, snapshot in ((came, with_samples), (gone, without)):
            assert render(snapshot).static(openmetrics=True) == page.static(openmetrics=True)

    def test_telemetry_follows_a_replica_that_changed_hands(self) -> None:
        """The GPU's other replica given to a second pod, with the same readings: the
        GPU's figures are written for each holder, as a cold render writes them."""
        second = replace(
            _HOLDER,
            name="q",
            containers=(
                ContainerResources(
                    "c", devices=(DeviceGroup("nvidia.com/gpu", (f"{_GPU}::1",), (0,)),)
                ),
            ),
        )
        after = _pooled_node(pods=(_HOLDER, second))

        warm = render(after, previous=render(_pooled_node()))

        assert render(after).static(openmetrics=True) == warm.static(openmetrics=True)
        assert ["p", "q"] == sorted(
            labels["pod"] for labels, _ in _parsed(warm)["podresources_gpu_utilization_ratio"]
        )

    def test_the_kept_lines_follow_the_node_over_churn(self) -> None:
        """Over inventories of other IDs each time, the cache holds the prefixes of this
        render's device series only, not of every ID seen."""
        page = render(_pooled_node())
        for start in range(0, 200, 20):
            page = render(
                _pooled_node(_inventory(*_pools(range(start, start + 50)))), previous=page
            )
        tables = page.cache.device_tables
        assert tables is not None
        assert sum(f.samples for f in _device_families(page)) == len(tables.prefixes)
        shown = {labels["device_id"] for labels, _ in _parsed(page)["podresources_device_info"]}
        assert (True, False) == ({"180", "229"} <= shown, "0" in shown)
