"""Rules of the writer, the page and its caches that the rest of the suite left unpinned
(found by mutating exporter/metricwriter.py, exposition.py, store.py,
process_metrics.py and selfmetrics.py): a container's lines written anew when any part
of its allocation changes, gzip bodies compressed, live families at most a second old,
rows with the wrong number of values refused, and more.
"""

from __future__ import annotations

import gc
import gzip
import importlib
import pkgutil
import platform
import re
from dataclasses import replace

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text
from test_exposition import _demo_snapshot
from test_metricwriter import PROMTOOL, parse_openmetrics, promtool_problems

import exporter.collectors
import exporter.store
from exporter import exposition as exposition_module
from exporter.exposition import render
from exporter.join import join_snapshot
from exporter.metricwriter import (
    OPENMETRICS_EOF,
    PrefixCache,
    Rows,
    join_families,
    sample_line,
    write_family,
)
from exporter.model import (
    DEVICE_LABELS,
    AllocatableResources,
    ClaimDevice,
    ContainerResources,
    DeviceGroup,
    DynamicResource,
    GpuDeviceProcesses,
    GpuProcessUse,
    KubeletStatus,
    MemoryBlock,
    MetricKind,
    MetricSpec,
    Owner,
    PodResources,
    Sample,
    Snapshot,
)
from exporter.selfmetrics import live_rows
from exporter.sim.node import SimulatedNode

VARIANTS = [(om, gz) for om in (False, True) for gz in (False, True)]
VARIANT_IDS = ["text", "text-gzip", "openmetrics", "openmetrics-gzip"]


def _node(*containers: ContainerResources, **allocatable: object) -> Snapshot:
    return join_snapshot(
        node="n",
        collected_at=1.0,
        kubelet=KubeletStatus(up=True, socket="/s", api=()),
        pods=(PodResources("ns", "p", containers),),
        allocatable=AllocatableResources(**allocatable),  # type: ignore[arg-type]
        cpu_numa={},
    )


def _sample_lines(page: bytes) -> list[str]:
    return [line for line in page.decode().splitlines() if not line.startswith("#")]


@pytest.fixture
def frozen_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The live families' clock, stopped at 100 s until a test moves it."""
    now = [100.0]
    monkeypatch.setattr(exposition_module, "_LIVE", exposition_module._Live(lambda: now[0]))
    return now


class TestWriter:
    def test_names_and_label_names_starting_with_a_digit_are_refused(self) -> None:
        """A legacy name starts with a letter or underscore; '1x' is no name either
        parser reads."""
        with pytest.raises(ValueError, match="legacy character set"):
            write_family(Rows("1test", "gauge", "A digit.", (), []), cache={})
        with pytest.raises(ValueError, match="legacy character set"):
            write_family(Rows("test_ok", "gauge", "A digit.", ("0a",), []), cache={})

    def test_a_row_with_more_or_fewer_values_than_label_names_is_refused(self) -> None:
        """A row's values go with the family's label names one for one: a missing
        value is an error, not a series without that label."""
        for values in (("x",), ("x", "y", "z")):
            rows = Rows("test_pairs", "gauge", "Pairs.", ("a", "b"), [(values, 1)])
            with pytest.raises(ValueError, match=r"shorter|longer"):
                write_family(rows, cache={})

    @pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
    def test_control_characters_other_than_newline_are_written_as_they_are(
        self, openmetrics: bool
    ) -> None:
        """Only backslash, quote and newline have escapes in either format: a tab, CR,
        NUL, NEL or line separator is written raw, and read back as it was."""
        values = ["tab\there", "cr\rhere", "nul\x00here", "nel\x85here", "ls\u2028here"]
        rows = Rows("test_control", "gauge", "Control characters.", ("a",), [])
        for index, value in enumerate(values):
            rows.add((value,), index)
        page = join_families([write_family(rows, cache={})], openmetrics=openmetrics)
        parse = parse_openmetrics if openmetrics else parse_text
        parsed = parse(page + (OPENMETRICS_EOF if openmetrics else ""))
        assert values == [s.labels["a"] for f in parsed for s in f.samples]
        if PROMTOOL is not None and not openmetrics:
            assert [] == promtool_problems(page, openmetrics=False)

    def test_sample_line_takes_its_prefix_from_previous_and_keeps_it(self) -> None:
        """The histogram's lines: a prefix found in ``previous`` is used as it is (not
        made again), and every prefix used is put in ``cache``."""
        key = ("test_seconds_count", (("method", "List"),))
        previous: PrefixCache = {key: "kept_prefix"}
        cache: PrefixCache = {}
        line = sample_line(*key, 3, cache=cache, previous=previous)
        cold: PrefixCache = {}
        assert ("kept_prefix 3.0\n", {key: "kept_prefix"}) == (line, cache)
        assert 'test_seconds_count{method="List"} 3.0\n' == sample_line(
            *key, 3, cache=cold, previous={}
        )
        assert {key: 'test_seconds_count{method="List"}'} == cold

    def test_a_family_counts_its_sample_lines(self) -> None:
        rows = Rows("test_counted", "counter", "Counted.", ("a",), [(("x",), 1), (("y",), 2)])
        written = write_family(rows, cache={})
        assert written.samples == 2 == len(written.body.splitlines())


class TestPage:
    def test_series_is_the_number_of_sample_lines(self) -> None:
        snapshot = _node(ContainerResources("c", devices=(DeviceGroup("r/x", ("a", "b")),)))
        exposition = render(snapshot)
        assert exposition.series == len(_sample_lines(exposition.static(openmetrics=False)))

    @pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
    def test_gzip_is_the_plain_page_compressed(
        self, frozen_clock: list[float], openmetrics: bool
    ) -> None:
        """Within one live second, the gzip body decompresses to the very plain body
        (a text page gets no '# EOF'), and compresses it."""
        snapshot = _node(
            *(
                ContainerResources(f"c{i}", devices=(DeviceGroup("r/x", (f"d{i}",)),))
                for i in range(50)
            )
        )
        exposition = render(snapshot)
        plain = exposition.page(openmetrics=openmetrics, gzipped=False)
        zipped = exposition.page(openmetrics=openmetrics, gzipped=True)
        assert plain == gzip.decompress(zipped)
        assert len(zipped) < len(plain) / 3

    def test_live_families_are_at_most_a_second_old(self, frozen_clock: list[float]) -> None:
        """The process families are rendered again once a second has passed."""
        exposition = render(_node())
        first = exposition.page(openmetrics=False, gzipped=False)
        frozen_clock[0] += 1.0
        assert first is not exposition.page(openmetrics=False, gzipped=False)

    def test_the_first_live_render_is_made_whatever_the_clock_reads(self) -> None:
        """A clock that starts at 0 (monotonic clocks may) still gets the families."""
        live = exposition_module._Live(lambda: 0.0)
        assert "# HELP python_info " in live.text(openmetrics=False)

    def test_an_equal_page_serves_the_same_bytes(self, frozen_clock: list[float]) -> None:
        """A re-render that changes nothing hands scrapers the bytes already made."""
        snapshot = _node(ContainerResources("c", devices=(DeviceGroup("r/x", ("a",)),)))
        first = render(snapshot)
        pages = [first.page(openmetrics=om, gzipped=gz) for om, gz in VARIANTS]
        again = render(snapshot, previous=first)
        assert all(
            page is again.page(openmetrics=om, gzipped=gz)
            for page, (om, gz) in zip(pages, VARIANTS, strict=True)
        )

    def test_same_allocations_without_a_previous_page_change_nothing(self) -> None:
        """``previous`` only saves work: without one, same_allocations is moot."""
        snapshot = _node(ContainerResources("c", devices=(DeviceGroup("r/x", ("a",)),)))
        assert render(snapshot, same_allocations=True).families == render(snapshot).families

    def test_memory_blocks_of_one_type_and_node_add_up(self) -> None:
        gib = 1 << 30
        blocks = (MemoryBlock("memory", gib, (0,)), MemoryBlock("memory", 2 * gib, (0,)))
        page = render(_node(ContainerResources("c", memory=blocks))).text.decode()
        (family,) = (f for f in parse_text(page) if f.name == "podresources_container_memory_bytes")
        assert [3 * gib] == [s.value for s in family.samples]

    def test_no_timestamp_sample_before_the_kubelet_first_answers(self) -> None:
        """Before the first answer there is no data to date: the family is there,
        without a sample (a 0 would read as data from 1970)."""
        name = "podresources_snapshot_timestamp_seconds"
        before = render(replace(_node(), collected_at=None)).text.decode()
        after = render(replace(_node(), collected_at=1700000000.5)).text.decode()
        assert ([], [1700000000.5]) == tuple(
            [s.value for f in parse_text(page) if f.name == name for s in f.samples]
            for page in (before, after)
        )

    def test_build_info_names_the_exporter_and_python_versions(self) -> None:
        from exporter import __version__

        page = render(_node()).text.decode()
        (family,) = (f for f in parse_text(page) if f.name == "podresources_exporter_build_info")
        assert [{"version": __version__, "python_version": platform.python_version()}] == [
            s.labels for s in family.samples
        ]


def _container(**changes: object) -> ContainerResources:
    base = ContainerResources(
        "c",
        devices=(DeviceGroup("example.com/a", ("dev-0",)),),
        memory=(MemoryBlock("memory", 1 << 30, (0,)),),
        dynamic_resources=(
            DynamicResource("claim", "ns", (ClaimDevice("gpu.example.com", "pool", "gpu-0"),)),
        ),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


class TestCachesFollowEveryPart:
    @pytest.mark.parametrize(
        "after",
        [
            pytest.param(
                _container(devices=(DeviceGroup("example.com/b", ("dev-0",)),)),
                id="device-resource",
            ),
            pytest.param(_container(memory=(MemoryBlock("memory", 2 << 30, (0,)),)), id="memory"),
            pytest.param(
                _container(
                    dynamic_resources=(
                        DynamicResource(
                            "claim", "ns", (ClaimDevice("gpu.example.com", "pool", "gpu-1"),)
                        ),
                    )
                ),
                id="claim-device",
            ),
        ],
    )
    def test_a_container_whose_allocation_changed_is_written_anew(
        self, after: ContainerResources
    ) -> None:
        """Each part of a container's allocation is part of what its kept lines are
        found by: a warm render writes what a cold one does."""
        before = render(_node(_container()))
        snapshot = _node(after)
        assert render(snapshot).static(openmetrics=False) == render(
            snapshot, previous=before
        ).static(openmetrics=False)

    def test_node_samples_whose_label_values_changed_are_written_anew(self) -> None:
        """Same family, same count of samples, other label values (an interface
        renamed): the kept prefixes are not used for them."""
        spec = MetricSpec("test_net_bytes_total", MetricKind.COUNTER, "Bytes.", ("interface",))
        before = replace(_node(), node_samples=(Sample(spec, 1.0, ("eth0",)),))
        after = replace(_node(), node_samples=(Sample(spec, 2.0, ("eth1",)),))
        warm = render(after, previous=render(before)).static(openmetrics=False)
        assert render(after).static(openmetrics=False) == warm
        assert b'test_net_bytes_total{interface="eth1"} 2.0\n' in warm


class TestWarmRendersReUse:
    async def test_the_prefixes_kept_for_cpu_seconds_and_telemetry(
        self, sim_node: SimulatedNode
    ) -> None:
        """A render from an unchanged snapshot takes every prefix the last one kept,
        the very strings, and keeps them for the next."""
        snapshot = await _demo_snapshot(sim_node)
        first = render(snapshot)
        second = render(snapshot, previous=first)
        for part in ("cpu_prefixes", "telemetry"):
            kept, used = getattr(first.cache, part), getattr(second.cache, part)
            assert (part, True, True) == (
                part,
                bool(kept) and kept.keys() == used.keys(),
                all(used[key] is kept[key] for key in kept),
            )

    def test_container_lines_across_fresh_joins_and_same_allocations(self) -> None:
        """A container equal to one the last render wrote (a fresh join of the same
        reply) gets its kept lines, also after a render that kept the allocation
        families whole."""
        containers = [
            ContainerResources(f"c{i}", devices=(DeviceGroup("r/x", (f"d{i}",)),)) for i in range(3)
        ]
        first = render(_node(*containers))
        second = render(_node(*containers), previous=first, same_allocations=True)
        third = render(_node(*containers), previous=second)
        kept = first.cache.containers
        assert len(kept) == 3
        assert all(third.cache.containers[key] is lines for key, lines in kept.items())
        # And the allocation families joined from those lines are the ones first made.
        names = {name for name, _ in exposition_module._CONTAINER_FAMILIES}
        made, reused = ([f for f in page.families if f.name in names] for page in (first, third))
        assert len(made) == len(names)
        assert all(a is b for a, b in zip(made, reused, strict=True))


def _gpu_page(*uses: GpuProcessUse) -> str:
    device = GpuDeviceProcesses(
        resource="nvidia.com/gpu",
        device_id="GPU-0",
        views=(("nvidia.com/gpu", "GPU-0"),),
        holders=(),
        processes=(),
        uses=uses,
        foreign=(),
        utilization_supported=True,
    )
    return render(replace(_node(), gpu_processes=(device,))).text.decode()


class TestGpuProcessFamilies:
    def test_zero_figures_are_series(self) -> None:
        """A container whose processes use no memory and no SM yet has series of 0,
        not none (None is what marks a figure unknown)."""
        owner = Owner("ns", "p", "c")
        page = _gpu_page(GpuProcessUse(owner, "nvidia.com/gpu", "GPU-0", 0, 0.0))
        values = {
            f.name: [s.value for s in f.samples]
            for f in parse_text(page)
            if f.name.startswith("podresources_gpu_process_")
        }
        assert {
            "podresources_gpu_process_memory_used_bytes": [0.0],
            "podresources_gpu_process_sm_utilization_ratio": [0.0],
        } == values

    def test_the_collector_on_with_no_devices_shows_its_families_empty(self) -> None:
        """On, with nothing to show: the families are there (HELP and TYPE), empty;
        off (None), they are absent."""
        on = render(replace(_node(), gpu_processes=())).text.decode()
        off = render(_node()).text.decode()
        name = "# TYPE podresources_gpu_foreign_processes gauge"
        assert (name in on, name in off) == (True, False)


def test_no_gc_families_outside_cpython(monkeypatch: pytest.MonkeyPatch) -> None:
    """As prometheus_client's GC_COLLECTOR: gc.get_stats() figures mean something in
    CPython only (PyPy has the function too)."""
    assert hasattr(gc, "get_stats")
    monkeypatch.setattr(platform, "python_implementation", lambda: "PyPy")
    assert [] == [r.name for r in live_rows() if r.name.startswith("python_gc_")]


def _telemetry_specs() -> dict[str, set[MetricSpec]]:
    """Every family the collector modules declare or import, by name."""
    found: dict[str, set[MetricSpec]] = {}
    for module_info in pkgutil.iter_modules(exporter.collectors.__path__):
        module = importlib.import_module(f"exporter.collectors.{module_info.name}")
        for value in vars(module).values():
            if isinstance(value, MetricSpec):
                found.setdefault(value.name, set()).add(value)
    return found


def test_every_telemetry_family_is_named_as_the_writer_requires() -> None:
    """Telemetry families reach the page through label prefixes, past write_family's
    name check: each is checked here instead. Legacy names under podresources_, its own
    labels apart from the owner and device labels put before them, counters (and only
    counters) ending in _total, one family to a name."""
    legacy = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
    specs = _telemetry_specs()
    wrong = [
        name
        for name, declared in specs.items()
        for spec in declared
        if not (
            len(declared) == 1
            and legacy.fullmatch(name)
            and name.startswith("podresources_")
            and all(legacy.fullmatch(label) and not label.startswith("__") for label in spec.labels)
            and not set(spec.labels) & set(DEVICE_LABELS)
            and len(set(spec.labels)) == len(spec.labels)
            and (spec.kind == MetricKind.COUNTER) == name.endswith("_total")
        )
    ]
    assert ([], True) == (wrong, len(specs) >= 30)
