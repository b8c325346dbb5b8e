"""GPM (Hopper's performance monitors) through the real pynvml and the fake library:
two samples a poll apart, the metrics between them, and every sample freed."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from fake_nvml_support import NO_PERMISSION, UNKNOWN, FakeGpu, FakeMig, FakeNvml, GpmPercents

from exporter.collectors.base import CollectorContext
from exporter.collectors.gpu_metrics import (
    GPU_DRAM_ACTIVE,
    GPU_GRAPHICS_ENGINE_ACTIVE,
    GPU_PIPE_ACTIVE,
    GPU_SM_ACTIVE,
    GPU_SM_OCCUPANCY,
)
from exporter.collectors.nvml import NvmlCollector
from exporter.model import CollectorIssue, Readings

UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
MIG_1 = "MIG-11111111-aaaa-bbbb-cccc-dddddddddddd"
MIG_2 = "MIG-22222222-aaaa-bbbb-cccc-dddddddddddd"
# graphics, SM active, occupancy, tensor, DRAM, FP64, FP32, FP16 (percent)
BUSY: GpmPercents = (97.5, 88.25, 41.0, 63.5, 71.0, 0.5, 22.0, 9.75)
GPM_FAMILIES = {
    GPU_GRAPHICS_ENGINE_ACTIVE.name,
    GPU_SM_ACTIVE.name,
    GPU_SM_OCCUPANCY.name,
    GPU_PIPE_ACTIVE.name,
    GPU_DRAM_ACTIVE.name,
}
GPU = FakeGpu(UUID, nvlinks=0, gpm=BUSY)


def gpm(readings: Readings, name: str) -> dict[tuple[str, tuple[str, ...]], float]:
    """One device's GPM figures: (family, labels) -> value."""
    device = next(d for d in readings.devices if d.name == name)
    return {
        (s.spec.name, s.label_values): s.value
        for s in device.samples
        if s.spec.name in GPM_FAMILIES
    }


def ratios(
    percents: GpmPercents, *, whole_gpu: bool = True
) -> dict[tuple[str, tuple[str, ...]], float]:
    graphics, sm, occupancy, tensor, dram, fp64, fp32, fp16 = (float(p) / 100 for p in percents)
    expected = {
        (GPU_GRAPHICS_ENGINE_ACTIVE.name, ()): graphics,
        (GPU_SM_ACTIVE.name, ()): sm,
        (GPU_SM_OCCUPANCY.name, ()): occupancy,
        (GPU_PIPE_ACTIVE.name, ("tensor",)): tensor,
        (GPU_PIPE_ACTIVE.name, ("fp64",)): fp64,
        (GPU_PIPE_ACTIVE.name, ("fp32",)): fp32,
        (GPU_PIPE_ACTIVE.name, ("fp16",)): fp16,
    }
    if whole_gpu:
        expected[(GPU_DRAM_ACTIVE.name, ())] = dram
    return expected


def counting(
    fake_nvml: FakeNvml, collector: NvmlCollector, *calls: str
) -> tuple[Readings, tuple[int, ...]]:
    before = [fake_nvml.library.calls(call) for call in calls]
    readings = collector.collect()
    return readings, tuple(
        fake_nvml.library.calls(c) - b for c, b in zip(calls, before, strict=True)
    )


class TestMetrics:
    def test_the_metrics_between_two_polls_as_ratios(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The first poll takes a sample and serves nothing of GPM; the next serves each
        metric between the two, a percentage as a ratio, and no issue."""
        fake_nvml.configure(GPU)
        first = collector.collect()
        second = collector.collect()
        assert ({}, ratios(BUSY), (), ()) == (
            gpm(first, UUID),
            gpm(second, UUID),
            first.issues,
            second.issues,
        )

    def test_every_poll_measures_from_the_last(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """One sample and one metrics call a poll, each poll's from the poll before (the
        fake answers INVALID_ARGUMENT for samples out of order or of another device)."""
        fake_nvml.configure(GPU)
        collector.collect()
        polls = [counting(fake_nvml, collector, "gpm_sample", "gpm_metrics") for _ in range(3)]
        assert [(ratios(BUSY), (), (1, 1))] * 3 == [
            (gpm(readings, UUID), readings.issues, made) for readings, made in polls
        ]

    def test_a_mig_device_has_its_compute_instance_figures_but_dram(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A MIG device's handle is sampled as nvml.h allows; DRAM bandwidth, which DCGM
        serves per GPU instance only, is not asked of it."""
        mig_load: GpmPercents = (50.0, 45.0, 20.0, 30.0, 35.0, 0.0, 10.0, 5.0)
        gpu = replace(
            GPU,
            migs=(FakeMig(0, MIG_1, gpu_instance=1, compute_instance=0, gpm=mig_load),),
        )
        fake_nvml.configure(gpu)
        collector.collect()
        readings = collector.collect()
        assert (ratios(mig_load, whole_gpu=False), ratios(BUSY), ()) == (
            gpm(readings, MIG_1),
            gpm(readings, UUID),
            readings.issues,
        )

    def test_a_metric_not_answered_is_left_out(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A metric the GPU does not support, or that measured nothing (NaN), has no
        sample and no issue; another error is an issue, and the other metrics stay."""
        fake_nvml.configure(replace(GPU, gpm=(97.5, -1, "nan", -2, 71.0, 0.5, 22.0, 9.75)))
        collector.collect()
        readings = collector.collect()
        served = ratios(BUSY)
        for gone in (
            (GPU_SM_ACTIVE.name, ()),
            (GPU_SM_OCCUPANCY.name, ()),
            (
                GPU_PIPE_ACTIVE.name,
                ("tensor",),
            ),
        ):
            del served[gone]
        assert (served, (CollectorIssue("UNKNOWN", f"{UUID}: gpm_metrics: NVML UNKNOWN"),)) == (
            gpm(readings, UUID),
            readings.issues,
        )


class TestUnsupported:
    def test_a_gpu_before_hopper_is_asked_once(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU without GPM: no series, no issue, support asked once, never sampled."""
        fake_nvml.configure(replace(GPU, gpm=None))
        polls = [counting(fake_nvml, collector, "gpm_support", "gpm_sample") for _ in range(3)]
        assert [({}, (), (1, 0)), ({}, (), (0, 0)), ({}, (), (0, 0))] == [
            (gpm(readings, UUID), readings.issues, made) for readings, made in polls
        ]

    def test_a_driver_before_gpm_is_no_issue(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A driver before R520 has no nvmlGpmQueryDeviceSupport: nothing to report."""
        fake_nvml.configure(GPU, gpm_missing=True)
        polls = [counting(fake_nvml, collector, "gpm_sample") for _ in range(2)]
        assert [({}, (), (0,))] * 2 == [
            (gpm(readings, UUID), readings.issues, made) for readings, made in polls
        ]

    @pytest.mark.parametrize(
        ("figure", "call"), [("gpm_support", "gpm_supported"), ("gpm_sample", "gpm_sample")]
    )
    def test_a_refusal_is_one_issue_then_not_asked(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, figure: str, call: str
    ) -> None:
        """NO_PERMISSION is the exporter's privilege, which does not change: one issue,
        then the device is not asked again."""
        fake_nvml.configure(replace(GPU, fail=((figure, NO_PERMISSION),)))
        polls = [counting(fake_nvml, collector, figure) for _ in range(3)]
        refused = CollectorIssue(
            "NO_PERMISSION", f"{UUID}: {call}: NVML NO_PERMISSION; not asked again"
        )
        assert [({}, (refused,), (1,)), ({}, (), (0,)), ({}, (), (0,))] == [
            (gpm(readings, UUID), readings.issues, made) for readings, made in polls
        ]
        assert fake_nvml.library.gpm_samples_live() == 0

    def test_a_failed_support_query_is_asked_again(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """Another error from the support query is an issue, and the query is repeated
        until it answers; figures follow from the poll after the first sample."""
        failing = tmp_path / "failing"
        failing.touch()
        fake_nvml.configure(replace(GPU, fail_while=(("gpm_support", UNKNOWN, failing),)))
        polls = [counting(fake_nvml, collector, "gpm_support") for _ in range(2)]
        failing.unlink()
        polls += [counting(fake_nvml, collector, "gpm_support") for _ in range(3)]
        failed = CollectorIssue("UNKNOWN", f"{UUID}: gpm_supported: NVML UNKNOWN")
        assert [
            ({}, (failed,), (1,)),
            ({}, (failed,), (1,)),
            ({}, (), (1,)),  # supported: the first sample
            (ratios(BUSY), (), (0,)),
            (ratios(BUSY), (), (0,)),
        ] == [(gpm(readings, UUID), readings.issues, made) for readings, made in polls]


class TestFailures:
    def test_a_failed_sample_is_an_issue_and_measuring_starts_again(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A sample that fails is reported each poll; once it answers again, the poll
        after serves figures (never measured across the failed poll)."""
        failing = tmp_path / "failing"
        failing.touch()
        fake_nvml.configure(replace(GPU, fail_while=(("gpm_sample", UNKNOWN, failing),)))
        collector.collect()
        during = collector.collect()
        failing.unlink()
        after = [collector.collect() for _ in range(2)]
        failed = CollectorIssue("UNKNOWN", f"{UUID}: gpm_sample: NVML UNKNOWN")
        assert [({}, (failed,)), ({}, ()), (ratios(BUSY), ())] == [
            (gpm(readings, UUID), readings.issues) for readings in (during, *after)
        ]

    def test_a_failed_metrics_call_loses_the_poll_not_the_next(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """The metrics call failing is an issue; this poll's sample is the next poll's
        baseline, so the poll after it serves figures again."""
        failing = tmp_path / "failing"
        failing.touch()
        fake_nvml.configure(replace(GPU, fail_while=(("gpm_metrics", UNKNOWN, failing),)))
        collector.collect()
        during = collector.collect()
        failing.unlink()
        after = collector.collect()
        failed = CollectorIssue("UNKNOWN", f"{UUID}: gpm_metrics: NVML UNKNOWN")
        assert [({}, (failed,)), (ratios(BUSY), ())] == [
            (gpm(readings, UUID), readings.issues) for readings in (during, after)
        ]

    def test_a_gpu_lost_while_measuring_keeps_what_was_read(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """GPU_IS_LOST from the metrics call is the GPU's end for this poll: reported, its
        other figures kept, its samples freed."""
        fake_nvml.configure(replace(GPU, lost_at=("gpm_metrics", 1)))
        collector.collect()
        readings = collector.collect()
        lost = CollectorIssue("GPU_IS_LOST", f"{UUID}: gpm_metrics: NVML GPU_IS_LOST")
        device = next(d for d in readings.devices if d.name == UUID)
        assert ({}, (lost,), True) == (gpm(readings, UUID), readings.issues, bool(device.samples))


class TestSamplesFreed:
    def test_no_sample_outlives_its_use(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Each poll frees the sample it measured from: one sample a device is held
        between polls, none once the collector closes."""
        gpu = replace(
            GPU, migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY), FakeMig(1, MIG_2, 2, 0, gpm=BUSY))
        )
        fake_nvml.configure(gpu)
        held = []
        for _ in range(5):
            collector.collect()
            held.append(fake_nvml.library.gpm_samples_live())
        collector.close()
        assert ([3] * 5, 0) == (held, fake_nvml.library.gpm_samples_live())

    def test_a_departed_devices_sample_is_freed(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A MIG device destroyed between polls has its last sample freed at the next."""
        gone = tmp_path / "gone"
        gpu = replace(GPU, migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY, gone_flag=gone),))
        fake_nvml.configure(gpu)
        collector.collect()
        before = fake_nvml.library.gpm_samples_live()
        gone.touch()
        collector.collect()
        assert (2, 1) == (before, fake_nvml.library.gpm_samples_live())

    def test_a_poll_too_soon_keeps_the_older_sample(self, fake_nvml: FakeNvml) -> None:
        """nvml.h wants two samples more than 100 ms apart: a poll sooner than that takes
        no sample and serves no figures; the next measures from the older sample."""
        now = [0.0]
        collector = NvmlCollector(CollectorContext(), clock=lambda: now[0])
        fake_nvml.configure(GPU)
        try:
            collector.collect()
            now[0] = 0.05
            soon, made_soon = counting(fake_nvml, collector, "gpm_sample")
            now[0] = 0.3
            later, made_later = counting(fake_nvml, collector, "gpm_sample")
        finally:
            collector.close()
        assert (({}, (0,)), (ratios(BUSY), (1,))) == (
            (gpm(soon, UUID), made_soon),
            (gpm(later, UUID), made_later),
        )
