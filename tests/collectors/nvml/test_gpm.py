"""GPM (Hopper's performance monitors) through the real pynvml and the fake library:
two samples a poll apart, the metrics between them, and every sample freed."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from fake_nvml_support import (
    FUNCTION_NOT_FOUND,
    NO_PERMISSION,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeGpu,
    FakeMig,
    FakeNvml,
    GpmPercents,
)

from exporter.collectors.base import CollectorContext
from exporter.collectors.gpu_metrics import (
    GPU_DRAM_ACTIVE,
    GPU_GRAPHICS_ENGINE_ACTIVE,
    GPU_PCIE_RECEIVE,
    GPU_PCIE_TRANSMIT,
    GPU_PIPE_ACTIVE,
    GPU_SM_ACTIVE,
    GPU_SM_OCCUPANCY,
)
from exporter.collectors.nvml import NvmlCollector, NvmlError, PynvmlSource
from exporter.model import CollectorIssue, Readings

UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
MIG_1 = "MIG-11111111-aaaa-bbbb-cccc-dddddddddddd"
MIG_2 = "MIG-22222222-aaaa-bbbb-cccc-dddddddddddd"
TIMEOUT = 10  # NVML_ERROR_TIMEOUT
GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST
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


class Clocked:
    """An NvmlCollector polled at chosen clock times, for the intervals GPM measures; by
    default measuring at every poll (--collector.nvml.gpm-interval=0), so that NVML's
    100 ms between samples is the only rule."""

    def __init__(self, gpm_interval_s: float = 0.0) -> None:
        self.now = 0.0
        context = CollectorContext(nvml_gpm_interval_s=gpm_interval_s)
        self.collector = NvmlCollector(context, clock=lambda: self.now)

    def at(self, seconds: float) -> Readings:
        self.now = seconds
        return self.collector.collect()


@pytest.fixture
def clocked(fake_nvml: FakeNvml) -> Iterator[Clocked]:
    polled = Clocked()
    yield polled
    polled.collector.close()


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

    def test_a_mig_device_alone_in_its_instance_has_the_instances_dram(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A MIG device's handle is sampled as nvml.h allows, for its compute instance's
        figures; DRAM bandwidth, which DCGM serves per GPU instance only, comes from its
        GPU instance's sample (nvmlGpmMigSampleGet), all of it the device's when no other
        compute instance shares the instance."""
        mig_load: GpmPercents = (50.0, 45.0, 20.0, 30.0, 35.0, 0.0, 10.0, 5.0)
        gpu = replace(
            GPU,
            migs=(FakeMig(0, MIG_1, gpu_instance=1, compute_instance=0, gpm=mig_load),),
        )
        fake_nvml.configure(gpu)
        collector.collect()
        readings, made = counting(fake_nvml, collector, "gpm_mig_sample")
        assert (ratios(mig_load), ratios(BUSY), (), (1,)) == (
            gpm(readings, MIG_1),
            gpm(readings, UUID),
            readings.issues,
            made,
        )

    def test_compute_instances_sharing_an_instance_have_no_dram(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Two compute instances of one GPU instance share its memory: the instance's DRAM
        bandwidth is neither's, so neither gets it, and the instance is not sampled."""
        gpu = replace(
            GPU,
            migs=(FakeMig(0, MIG_1, 2, 0, gpm=BUSY), FakeMig(1, MIG_2, 2, 1, gpm=BUSY)),
        )
        fake_nvml.configure(gpu)
        collector.collect()
        readings, made = counting(fake_nvml, collector, "gpm_mig_sample")
        compute_only = ratios(BUSY, whole_gpu=False)
        assert (compute_only, compute_only, (), (0,)) == (
            gpm(readings, MIG_1),
            gpm(readings, MIG_2),
            readings.issues,
            made,
        )

    @pytest.mark.parametrize(
        "fail", [(("gpm_mig_sample", 3),), ()], ids=["not-supported", "driver-without-it"]
    )
    def test_an_instance_that_cannot_be_sampled_is_asked_once(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, fail: tuple[tuple[str, int], ...]
    ) -> None:
        """NOT_SUPPORTED, or a driver without nvmlGpmMigSampleGet (FUNCTION_NOT_FOUND):
        no DRAM for the device, no issue, and the instance is not asked again."""
        gpu = replace(GPU, migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY),), fail=fail)
        fake_nvml.configure(gpu, gpm_mig_missing=not fail)
        polls = [counting(fake_nvml, collector, "gpm_mig_sample") for _ in range(3)]
        compute_only = ratios(BUSY, whole_gpu=False)
        asked = (1,) if fail else (0,)  # a missing function is never entered
        assert [({}, (), asked), (compute_only, (), (0,)), (compute_only, (), (0,))] == [
            (gpm(readings, MIG_1), readings.issues, made) for readings, made in polls
        ]

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

    def test_an_infinite_metric_is_left_out_as_a_nan_is(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """An infinity (a count over no time, as a NaN is nothing over none) is no ratio:
        it was served as +Inf, and an infinite PCIe rate made the GPU's byte counter
        +Inf for as long as the GPU is listed (every later interval adds to it)."""
        infinite = (97.5, "inf", 41.0, "inf", 71.0, 0.5, 22.0, 9.75)
        fake_nvml.configure(replace(GPU, gpm=infinite, gpm_pcie=("inf", 100.0)))
        collector.collect()
        readings = collector.collect()
        served = ratios(BUSY)
        del served[(GPU_SM_ACTIVE.name, ())]
        del served[(GPU_PIPE_ACTIVE.name, ("tensor",))]
        assert (served, [GPU_PCIE_RECEIVE.name], ()) == (
            gpm(readings, UUID),
            list(pcie(readings, UUID)),
            readings.issues,
        )

    @pytest.mark.parametrize(("code", "name"), [(TIMEOUT, "TIMEOUT"), (GPU_IS_LOST, "GPU_IS_LOST")])
    def test_the_first_metric_error_is_the_issue_and_the_answers_stay(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, code: int, name: str
    ) -> None:
        """Two metrics answering errors are one issue, the first asked's (graphics, before
        FP32); the metrics that answered are served, even when that error is GPU_IS_LOST,
        which ends the GPU's reading after them."""
        fake_nvml.configure(replace(GPU, gpm=(-code, 88.25, 41.0, 63.5, 71.0, 0.5, -2, 9.75)))
        collector.collect()
        readings = collector.collect()
        served = ratios(BUSY)
        del served[(GPU_GRAPHICS_ENGINE_ACTIVE.name, ())]
        del served[(GPU_PIPE_ACTIVE.name, ("fp32",))]
        assert (served, (CollectorIssue(name, f"{UUID}: gpm_metrics: NVML {name}"),)) == (
            gpm(readings, UUID),
            readings.issues,
        )

    def test_a_remade_mig_device_is_measured_afresh(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A MIG device destroyed and made again with the same GPU and compute instance IDs
        is another device with another UUID: its first poll serves nothing and reports
        nothing (never measured from the old device's sample, which is freed), the next
        serves its figures."""
        remade = tmp_path / "remade"
        mig_load: GpmPercents = (50.0, 45.0, 20.0, 30.0, 35.0, 0.0, 10.0, 5.0)
        old = FakeMig(0, MIG_1, 1, 0, gpm=BUSY, gone_flag=remade)
        new = FakeMig(1, MIG_2, 1, 0, gpm=mig_load, present_flag=remade)
        fake_nvml.configure(replace(GPU, migs=(old, new)))
        before = fake_nvml.library.gpm_samples_live()
        collector.collect()
        remade.touch()
        polls = []
        for _ in range(2):
            readings = collector.collect()
            held = fake_nvml.library.gpm_samples_live() - before
            polls.append((gpm(readings, MIG_2), readings.issues, held))
        # held: the GPU's sample, the new MIG device's and its GPU instance's
        assert [({}, (), 3), (ratios(mig_load), (), 3)] == polls


# A MIG device's own figures without DRAM bandwidth: what it has while its GPU instance
# gives it none.
COMPUTE_ONLY = ratios(BUSY, whole_gpu=False)


class TestGpuInstances:
    def test_an_instance_sample_that_fails_is_the_devices_issue_every_poll(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Another error from nvmlGpmMigSampleGet is no refusal: each poll it is an issue
        naming the MIG device (not the last one read) and the call, the instance is asked
        again, the device keeps its own figures, and no sample is left behind."""
        gpu = replace(
            GPU,
            migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY), FakeMig(1, MIG_2, 2, 0, gpm=BUSY)),
            fail=(("gpm_mig_sample", UNKNOWN),),
        )
        fake_nvml.configure(gpu)
        before = fake_nvml.library.gpm_samples_live()
        polls = [counting(fake_nvml, collector, "gpm_mig_sample") for _ in range(2)]
        failed = tuple(
            CollectorIssue("UNKNOWN", f"{mig}: gpm_mig_sample: NVML UNKNOWN")
            for mig in (MIG_1, MIG_2)
        )
        # held: the GPU's and the two MIG devices' own samples, no instance's
        assert ([({}, failed, (2,)), (COMPUTE_ONLY, failed, (2,))], 3) == (
            [(gpm(readings, MIG_1), readings.issues, made) for readings, made in polls],
            fake_nvml.library.gpm_samples_live() - before,
        )

    def test_a_dram_metric_the_instance_fails_is_an_issue(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The instance's DRAM metric answering an error (the MIG device's own metrics do
        not ask it) leaves the device without DRAM and is one issue, on the device, named
        as the instance's metrics call (gpm_mig_metrics), not its own."""
        mig_load: GpmPercents = (50.0, 45.0, 20.0, 30.0, -2, 0.0, 10.0, 5.0)
        fake_nvml.configure(replace(GPU, migs=(FakeMig(0, MIG_1, 1, 0, gpm=mig_load),)))
        collector.collect()
        readings = collector.collect()
        failed = CollectorIssue("UNKNOWN", f"{MIG_1}: gpm_mig_metrics: NVML UNKNOWN")
        assert (ratios(mig_load, whole_gpu=False), (failed,)) == (
            gpm(readings, MIG_1),
            readings.issues,
        )

    @pytest.mark.parametrize(
        ("lost_at", "held", "call"),
        # Held: the three devices' own samples; lost at the first instance's metrics
        # call, that instance's new sample too (kept for the next poll). Every instance's
        # last sample is freed, the one not asked included. The Nth call: the second
        # poll's first instance sample (the first poll took two); its fourth metrics call
        # (the GPU's, the two devices' own, then the first instance's).
        [(("gpm_mig_sample", 3), 3, "gpm_mig_sample"), (("gpm_metrics", 4), 4, "gpm_mig_metrics")],
        ids=["sample", "metrics"],
    )
    def test_a_gpu_lost_at_an_instance_ends_its_read_keeping_what_was_read(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        lost_at: tuple[str, int],
        held: int,
        call: str,
    ) -> None:
        """GPU_IS_LOST from an instance's sample or metrics is one issue, the first MIG
        device's: the other instance is not asked, both MIG devices keep the figures read
        before (without DRAM), and the instance's last sample is freed."""
        gpu = replace(
            GPU,
            migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY), FakeMig(1, MIG_2, 2, 0, gpm=BUSY)),
            lost_at=lost_at,
        )
        fake_nvml.configure(gpu)
        before = fake_nvml.library.gpm_samples_live()
        collector.collect()  # the first samples; the GPU is lost at the second poll
        readings, made = counting(fake_nvml, collector, "gpm_mig_sample")
        lost = CollectorIssue("GPU_IS_LOST", f"{MIG_1}: {call}: NVML GPU_IS_LOST")
        assert (COMPUTE_ONLY, COMPUTE_ONLY, (lost,), (1,), held) == (
            gpm(readings, MIG_1),
            gpm(readings, MIG_2),
            readings.issues,
            made,
            fake_nvml.library.gpm_samples_live() - before,
        )

    def test_a_device_without_gpm_of_its_own_is_not_asked_for_its_instance(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """The instance is asked only of a MIG device whose own GPM answers: one without
        (GPM off, a vGPU guest) is never asked for its instance either."""
        fake_nvml.configure(replace(GPU, migs=(FakeMig(0, MIG_1, 1, 0, gpm=None),)))
        polls = [counting(fake_nvml, collector, "gpm_mig_sample") for _ in range(2)]
        assert [({}, (), (0,))] * 2 == [
            (gpm(readings, MIG_1), readings.issues, made) for readings, made in polls
        ]

    def test_a_device_whose_instance_nvml_does_not_name_gets_no_dram(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A MIG device whose GPU instance ID NVML does not answer has no instance to
        sample: its own figures only, and no issue."""
        mig = FakeMig(0, MIG_1, 1, 0, gpm=BUSY)
        fake_nvml.configure(
            replace(GPU, migs=(replace(mig, fail=(*mig.fail, ("gi", NOT_SUPPORTED))),))
        )
        polls = [counting(fake_nvml, collector, "gpm_mig_sample") for _ in range(2)]
        assert [({}, (), (0,)), (COMPUTE_ONLY, (), (0,))] == [
            (gpm(readings, MIG_1), readings.issues, made) for readings, made in polls
        ]

    @pytest.mark.parametrize(
        ("figure", "failed"),
        [
            ("uuid", f"{UUID} MIG slot 1: uuid"),
            ("gi", f"{MIG_2}: gpu_instance_id"),
            ("mig_handle", f"{UUID} MIG slot 1: mig_device_handle"),
        ],
    )
    def test_a_device_is_not_alone_beside_one_nvml_failed_to_read(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, figure: str, failed: str
    ) -> None:
        """A compute instance NVML failed to list (its slot's handle, or its UUID), or to
        name the GPU instance of, may share its neighbour's instance: that poll no MIG
        device of the GPU is taken for alone in its instance, so none is given DRAM that
        may be another's."""
        shared = FakeMig(1, MIG_2, 1, 1, gpm=BUSY)
        gpu = replace(
            GPU,
            migs=(
                FakeMig(0, MIG_1, 1, 0, gpm=BUSY),
                replace(shared, fail=(*shared.fail, (figure, UNKNOWN))),
            ),
        )
        fake_nvml.configure(gpu)
        polls = [counting(fake_nvml, collector, "gpm_mig_sample") for _ in range(2)]
        issue = CollectorIssue("UNKNOWN", f"{failed}: NVML UNKNOWN")
        assert [({}, (issue,), (0,)), (COMPUTE_ONLY, (issue,), (0,))] == [
            (gpm(readings, MIG_1), readings.issues, made) for readings, made in polls
        ]

    def test_a_poll_too_soon_keeps_the_instances_older_sample(
        self, fake_nvml: FakeNvml, clocked: Clocked
    ) -> None:
        """The 100 ms rule holds for an instance's samples as for a device's: a poll too
        soon takes none and serves no DRAM; the next measures from the older sample."""
        fake_nvml.configure(replace(GPU, migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY),)))
        clocked.at(100.0)
        clocked.now = 100.05
        soon, made_soon = counting(fake_nvml, clocked.collector, "gpm_mig_sample")
        clocked.now = 100.15
        later, made_later = counting(fake_nvml, clocked.collector, "gpm_mig_sample")
        assert (({}, (0,)), (ratios(BUSY), (1,))) == (
            (gpm(soon, MIG_1), made_soon),
            (gpm(later, MIG_1), made_later),
        )


class TestUnsupported:
    def test_a_gpu_before_hopper_is_asked_once(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A GPU without GPM: no series, no issue, support asked once, never sampled,
        and its virtualization mode never asked (only of a GPU that could be sampled)."""
        fake_nvml.configure(replace(GPU, gpm=None))
        calls = ("gpm_support", "virtualization", "gpm_sample")
        polls = [counting(fake_nvml, collector, *calls) for _ in range(3)]
        assert [({}, (), (1, 0, 0)), ({}, (), (0, 0, 0)), ({}, (), (0, 0, 0))] == [
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
        ("mode", "served"), [(0, True), (1, True), (-1, True), (2, False), (3, True)]
    )
    def test_a_vgpu_guest_is_not_sampled(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, mode: int, served: bool
    ) -> None:
        """A vGPU guest (virtualization mode 2) is taken for one without GPM: most vGPU
        profiles fail every sample. Bare metal (0), passthrough (1), a vGPU host (3: the
        hypervisor's view of the whole GPU) and a driver that cannot say (NOT_SUPPORTED)
        are sampled. The mode is asked once, no issue."""
        fake_nvml.configure(replace(GPU, virtualization=mode))
        polls = [counting(fake_nvml, collector, "virtualization", "gpm_sample") for _ in range(2)]
        sampled = 1 if served else 0
        assert [
            ({}, (), (1, sampled)),
            (ratios(BUSY) if served else {}, (), (0, sampled)),
        ] == [(gpm(readings, UUID), readings.issues, made) for readings, made in polls]

    def test_a_driver_without_the_virtualization_call_is_sampled(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """nvmlDeviceGetVirtualizationMode missing (FUNCTION_NOT_FOUND) says no more than
        NOT_SUPPORTED does: no virtualization to speak of, so sampled, and no issue."""
        fake_nvml.configure(replace(GPU, fail=(("virtualization", FUNCTION_NOT_FOUND),)))
        polls = [counting(fake_nvml, collector, "virtualization") for _ in range(2)]
        assert [({}, (), (1,)), (ratios(BUSY), (), (0,))] == [
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
        before = fake_nvml.library.gpm_samples_live()
        polls = [counting(fake_nvml, collector, figure) for _ in range(3)]
        refused = CollectorIssue(
            "NO_PERMISSION", f"{UUID}: {call}: NVML NO_PERMISSION; not asked again"
        )
        assert [({}, (refused,), (1,)), ({}, (), (0,)), ({}, (), (0,))] == [
            (gpm(readings, UUID), readings.issues, made) for readings, made in polls
        ]
        assert fake_nvml.library.gpm_samples_live() == before

    @pytest.mark.parametrize("figure", ["gpm_support", "gpm_sample"])
    def test_not_supported_is_no_issue_then_not_asked(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, figure: str
    ) -> None:
        """NOT_SUPPORTED, from the support query or from a sample (a vGPU guest: nvml.h
        supports GPM only on MIG-backed vGPU profiles with all of the instance's frame
        buffer), is no fault: no issue, the device not asked again, no sample held."""
        fake_nvml.configure(replace(GPU, fail=((figure, NOT_SUPPORTED),)))
        before = fake_nvml.library.gpm_samples_live()
        polls = [counting(fake_nvml, collector, figure) for _ in range(3)]
        assert ([({}, (), (1,)), ({}, (), (0,)), ({}, (), (0,))], 0) == (
            [(gpm(readings, UUID), readings.issues, made) for readings, made in polls],
            fake_nvml.library.gpm_samples_live() - before,
        )

    def test_a_new_nvml_session_asks_and_measures_afresh(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Once NVML is shut down and initialised again (maybe another driver), support is
        asked again and the first poll serves nothing and reports nothing: the last
        session's samples were freed at shutdown and are never measured from."""
        fake_nvml.configure(GPU)
        before = fake_nvml.library.gpm_samples_live()
        for _ in range(2):
            collector.collect()
        collector.close()
        closed = fake_nvml.library.gpm_samples_live() - before
        polls = [counting(fake_nvml, collector, "gpm_support") for _ in range(2)]
        assert (0, [({}, (), (1,)), (ratios(BUSY), (), (0,))]) == (
            closed,
            [(gpm(readings, UUID), readings.issues, made) for readings, made in polls],
        )

    @pytest.mark.parametrize("figure", ["gpm_support", "virtualization"])
    def test_a_failed_support_query_is_asked_again(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path, figure: str
    ) -> None:
        """Another error from the support query, or from the virtualization mode asked
        with it, is an issue, and the query is repeated until it answers; figures
        follow from the poll after the first sample."""
        failing = tmp_path / "failing"
        failing.touch()
        fake_nvml.configure(replace(GPU, fail_while=((figure, UNKNOWN, failing),)))
        polls = [counting(fake_nvml, collector, figure) for _ in range(2)]
        failing.unlink()
        polls += [counting(fake_nvml, collector, figure) for _ in range(3)]
        failed = CollectorIssue("UNKNOWN", f"{UUID}: gpm_supported: NVML UNKNOWN")
        assert [
            ({}, (failed,), (1,)),
            ({}, (failed,), (1,)),
            ({}, (), (1,)),  # supported: the first sample
            (ratios(BUSY), (), (0,)),
            (ratios(BUSY), (), (0,)),
        ] == [(gpm(readings, UUID), readings.issues, made) for readings, made in polls]


class TestFailures:
    @pytest.mark.parametrize(
        ("figure", "measured_after"),
        # From the first poll on: a sample failing with none taken before leaves no
        # baseline, so the poll after it takes one and the next measures. A failed
        # metrics call keeps this poll's sample: the next measures.
        [("gpm_sample", [False, True]), ("gpm_metrics", [True, True])],
    )
    def test_a_failed_call_is_an_issue_and_measuring_goes_on(
        self,
        fake_nvml: FakeNvml,
        collector: NvmlCollector,
        tmp_path: Path,
        figure: str,
        measured_after: list[bool],
    ) -> None:
        """A failing sample or metrics call is reported each poll; once it answers again,
        figures follow, never measured across a poll that took no sample."""
        failing = tmp_path / "failing"
        failing.touch()
        fake_nvml.configure(replace(GPU, fail_while=((figure, UNKNOWN, failing),)))
        collector.collect()
        during = collector.collect()
        failing.unlink()
        after = [collector.collect() for _ in range(2)]
        failed = CollectorIssue("UNKNOWN", f"{UUID}: {figure}: NVML UNKNOWN")
        expected = [({}, (failed,))]
        expected += [(ratios(BUSY) if measured else {}, ()) for measured in measured_after]
        assert expected == [(gpm(readings, UUID), readings.issues) for readings in (during, *after)]

    def test_a_failed_sample_keeps_the_older_one_to_measure_from(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A sample failing after a good one is one issue, and serves no figures; the
        older sample stays, so the next poll measures the whole time since it: with
        --collector.nvml.gpm-interval at 30 s, dropping it would leave the GPU without
        figures for an interval more."""
        failing = tmp_path / "failing"
        fake_nvml.configure(replace(GPU, fail_while=(("gpm_sample", UNKNOWN, failing),)))
        collector.collect()
        failing.touch()
        during, made_during = counting(fake_nvml, collector, "gpm_metrics")
        failing.unlink()
        after, made_after = counting(fake_nvml, collector, "gpm_sample", "gpm_metrics")
        failed = CollectorIssue("UNKNOWN", f"{UUID}: gpm_sample: NVML UNKNOWN")
        assert [({}, (failed,), (0,)), (ratios(BUSY), (), (1, 1))] == [
            (gpm(during, UUID), during.issues, made_during),
            (gpm(after, UUID), after.issues, made_after),
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

    @pytest.mark.parametrize(
        ("failing", "held"),
        [("gpm_sample", 1), ("gpm_metrics", 1), ("lost", 1), ("lost_sampling", 0)],
    )
    def test_a_failed_poll_holds_one_sample_at_most(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path, failing: str, held: int
    ) -> None:
        """A failed poll holds one sample, the next poll's baseline, never two: the last
        poll's when this poll's sample fails; this poll's when the metrics call fails, or
        the GPU is lost during it (the last poll's freed); none when the GPU is lost while
        sampling (nothing is measured across a GPU's loss)."""
        flag = tmp_path / "failing"
        if failing == "lost":
            gpu = replace(GPU, lost_at=("gpm_metrics", 1))
        elif failing == "lost_sampling":
            gpu = replace(GPU, lost_at=("gpm_sample", 1))
        else:
            gpu = replace(GPU, fail_while=((failing, UNKNOWN, flag),))
        fake_nvml.configure(gpu)
        before = fake_nvml.library.gpm_samples_live()
        collector.collect()
        flag.touch()
        collector.collect()
        assert held == fake_nvml.library.gpm_samples_live() - before


class TestSamplesFreed:
    def test_no_sample_outlives_its_use(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """Each poll frees the sample it measured from: one sample a device (and a GPU
        instance) is held between polls, none once the collector closes."""
        gpu = replace(
            GPU, migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY), FakeMig(1, MIG_2, 2, 0, gpm=BUSY))
        )
        fake_nvml.configure(gpu)
        before = fake_nvml.library.gpm_samples_live()
        held = []
        for _ in range(5):
            collector.collect()
            held.append(fake_nvml.library.gpm_samples_live() - before)
        collector.close()
        assert ([5] * 5, 0) == (held, fake_nvml.library.gpm_samples_live() - before)

    def test_a_departed_devices_sample_is_freed(
        self, fake_nvml: FakeNvml, collector: NvmlCollector, tmp_path: Path
    ) -> None:
        """A MIG device destroyed between polls has its last samples (its own and its GPU
        instance's) freed at the next."""
        gone = tmp_path / "gone"
        gpu = replace(GPU, migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY, gone_flag=gone),))
        fake_nvml.configure(gpu)
        start = fake_nvml.library.gpm_samples_live()
        collector.collect()
        before = fake_nvml.library.gpm_samples_live() - start
        gone.touch()
        collector.collect()
        assert (3, 1) == (before, fake_nvml.library.gpm_samples_live() - start)

    def test_a_poll_too_soon_keeps_the_older_sample(
        self, fake_nvml: FakeNvml, clocked: Clocked
    ) -> None:
        """nvml.h wants two samples more than 100 ms apart: a poll sooner than that takes
        no sample and serves no figures; the next measures from the older sample."""
        fake_nvml.configure(GPU)
        clocked.at(100.0)  # not 0: the first sample's time must count, not its absence
        clocked.now = 100.05
        soon, made_soon = counting(fake_nvml, clocked.collector, "gpm_sample")
        clocked.now = 100.15  # 150 ms after the older sample, 100 after the skipped poll
        later, made_later = counting(fake_nvml, clocked.collector, "gpm_sample")
        assert (({}, (0,)), (ratios(BUSY), (1,))) == (
            (gpm(soon, UUID), made_soon),
            (gpm(later, UUID), made_later),
        )


class TestFakeLibrary:
    def test_gpm_refuses_what_nvml_would(self, fake_nvml: FakeNvml) -> None:
        """The fake's GPM, through pynvml, refuses what would hide an exporter bug: two
        samples out of order or of two devices (INVALID_ARGUMENT; the metrics do not
        depend on them), a sample of a device without GPM (NOT_SUPPORTED); metrics it has
        no percentage for are NOT_SUPPORTED, as are any it was not given."""
        pci_2, pci_3 = "00000000:18:00.0", "00000000:19:00.0"
        fake_nvml.configure(
            GPU,
            replace(GPU, uuid=UUID.replace("aaaaaaaa", "bbbbbbbb"), minor=1, pci=pci_2),
            replace(GPU, uuid=UUID.replace("aaaaaaaa", "cccccccc"), minor=2, pci=pci_3, gpm=None),
        )
        before = fake_nvml.library.gpm_samples_live()
        source = PynvmlSource()
        source.init()
        try:
            gpu, other, without = (source.device_handle(index) for index in range(3))
            older, elsewhere = source.gpm_sample(gpu), source.gpm_sample(other)
            newer = source.gpm_sample(gpu)
            refused = []
            for pair in ((newer, older), (older, elsewhere)):
                with pytest.raises(NvmlError) as caught:
                    source.gpm_metrics(*pair, (1,))
                refused.append(caught.value.error_name)
            with pytest.raises(NvmlError) as caught:
                source.gpm_sample(without)
            refused.append(caught.value.error_name)
            answered = source.gpm_metrics(older, newer, (1, 4)).values
            for sample in (older, elsewhere, newer):
                source.gpm_free(sample)
        finally:
            source.shutdown()
        assert (["INVALID_ARGUMENT", "INVALID_ARGUMENT", "NOT_SUPPORTED"], (97.5, None), 0) == (
            refused,
            answered,
            fake_nvml.library.gpm_samples_live() - before,
        )


MIB = 1024 * 1024


def pcie(readings: Readings, name: str) -> dict[str, float]:
    """One device's PCIe byte counters by family; none for a device not read."""
    families = (GPU_PCIE_TRANSMIT, GPU_PCIE_RECEIVE)
    return {
        s.spec.name: s.value
        for device in readings.devices
        if device.name == name
        for s in device.samples
        if s.spec in families
    }


def polls_around_a_fault(clocked: Clocked, flag: Path) -> list[Readings]:
    """Polls at 0 and 10 s, at 20 s while ``flag`` exists (a fault the fake library
    answers while it does), then at 30 and 35 s: the readings from 10 s on."""
    clocked.at(0.0)
    polls = [clocked.at(10.0)]
    flag.touch()
    polls.append(clocked.at(20.0))
    flag.unlink()
    return [*polls, clocked.at(30.0), clocked.at(35.0)]


class TestPcieTraffic:
    def test_each_intervals_rate_adds_its_bytes(
        self, fake_nvml: FakeNvml, clocked: Clocked
    ) -> None:
        """GPM's PCIe rates (MiB/s) between two polls, times the time between them, are
        added to byte counters: none at the first poll, then each interval's bytes."""
        fake_nvml.configure(replace(GPU, gpm_pcie=(1500.0, 6000.0)))
        polls = [clocked.at(seconds) for seconds in (0.0, 10.0, 25.0)]
        sent, received = 1500.0 * MIB, 6000.0 * MIB
        assert [
            {},
            {GPU_PCIE_TRANSMIT.name: 10 * sent, GPU_PCIE_RECEIVE.name: 10 * received},
            {GPU_PCIE_TRANSMIT.name: 25 * sent, GPU_PCIE_RECEIVE.name: 25 * received},
        ] == [pcie(readings, UUID) for readings in polls]

    def test_a_direction_not_answered_has_no_counter(
        self, fake_nvml: FakeNvml, collector: NvmlCollector
    ) -> None:
        """A direction NVML does not answer has no series; the other counts on; a MIG
        device has none (that it is not asked is the simulated source's test: this fake
        answers a MIG device NOT_SUPPORTED for PCIe)."""
        gpu = replace(GPU, gpm_pcie=(-1, 100.0), migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY),))
        fake_nvml.configure(gpu)
        collector.collect()
        readings = collector.collect()
        assert ([GPU_PCIE_RECEIVE.name], {}, ()) == (
            list(pcie(readings, UUID)),
            pcie(readings, MIG_1),
            readings.issues,
        )

    @pytest.mark.parametrize(
        ("figure", "seconds_counted"),
        # Polls at 10, 20 (failing), 30 and 35 s, after one at 0 s. A failed sample
        # keeps the 10 s one: 30 s adds its 20 s, 35 s its 5 s. A failed metrics call
        # keeps the 20 s sample, its 10 s unmeasured: 30 s adds its 10 s, 35 s its 5 s.
        [("gpm_sample", [10, 10, 30, 35]), ("gpm_metrics", [10, 10, 20, 25])],
    )
    def test_a_failure_keeps_the_counts_never_guessing_an_interval(
        self,
        fake_nvml: FakeNvml,
        clocked: Clocked,
        tmp_path: Path,
        figure: str,
        seconds_counted: list[int],
    ) -> None:
        """A failing sample or metrics call keeps the counts as they were, never falling
        (a restart from 0 that overtook the last scraped value would read to Prometheus
        as no reset at all). A failed sample's interval is measured by the next sample,
        from the older one; the interval a failed metrics call left unmeasured is not
        counted, never guessed, and counting goes on from the next pair of samples."""
        failing = tmp_path / "failing"
        fake_nvml.configure(
            replace(GPU, gpm_pcie=(1.0, 2.0), fail_while=((figure, UNKNOWN, failing),))
        )
        polls = polls_around_a_fault(clocked, failing)
        assert [
            {GPU_PCIE_TRANSMIT.name: seconds * MIB, GPU_PCIE_RECEIVE.name: 2 * seconds * MIB}
            for seconds in seconds_counted
        ] == [pcie(readings, UUID) for readings in polls]

    @pytest.mark.parametrize(
        ("away", "seconds_counted"),
        # Polls as polls_around_a_fault makes them; None: no counts served.
        # Lost off the bus for a poll, the GPU is still listed: its counts stay, never
        # falling, and go on from the next pair of samples (30 and 35 s). No longer
        # listed (its handle fails), its counts go with it: back, it counts from 0.
        [("lost", [10, None, 10, 15]), ("unlisted", [10, None, None, 5])],
    )
    def test_a_gpu_away_for_a_poll(
        self,
        fake_nvml: FakeNvml,
        clocked: Clocked,
        tmp_path: Path,
        away: str,
        seconds_counted: list[int | None],
    ) -> None:
        """The intervals around a poll the GPU was away are never counted; its counts
        are kept while NVML lists it, and start again from 0 (a reset Prometheus sees
        after the series' gap) once it did not. (Its name keeps failing in the unlisted
        case, so it is never cached and its handle is asked each poll.)"""
        flag = tmp_path / "away"
        if away == "lost":
            gpu = replace(GPU, gpm_pcie=(1.0, 2.0), lost_flag=flag)
        else:
            unnamed = tmp_path / "unnamed"
            unnamed.touch()
            fails = (("name", UNKNOWN, unnamed), ("handle", UNKNOWN, flag))
            gpu = replace(GPU, gpm_pcie=(1.0, 2.0), fail_while=fails)
        fake_nvml.configure(gpu)
        polls = polls_around_a_fault(clocked, flag)
        assert [
            {}
            if seconds is None
            else {GPU_PCIE_TRANSMIT.name: seconds * MIB, GPU_PCIE_RECEIVE.name: 2 * seconds * MIB}
            for seconds in seconds_counted
        ] == [pcie(readings, UUID) for readings in polls]

    def test_a_new_nvml_session_counts_from_zero(
        self, fake_nvml: FakeNvml, clocked: Clocked
    ) -> None:
        """Closing NVML drops the counts with the samples: the next session starts anew."""
        fake_nvml.configure(replace(GPU, gpm_pcie=(1.0, 1.0)))
        clocked.at(0.0)
        clocked.at(10.0)
        clocked.collector.close()
        polls = [clocked.at(seconds) for seconds in (20.0, 25.0)]
        five = {GPU_PCIE_TRANSMIT.name: 5.0 * MIB, GPU_PCIE_RECEIVE.name: 5.0 * MIB}
        assert [{}, five] == [pcie(readings, UUID) for readings in polls]

    def test_a_poll_too_soon_keeps_the_counts_and_the_next_adds_the_whole_interval(
        self, fake_nvml: FakeNvml, clocked: Clocked
    ) -> None:
        """A poll within 100 ms of the GPU's sample takes none: its counts are served
        unchanged, and the next poll adds the whole time since the kept sample."""
        fake_nvml.configure(replace(GPU, gpm_pcie=(1.0, 2.0)))
        clocked.at(0.0)
        polls = [clocked.at(seconds) for seconds in (10.0, 10.05, 20.0)]
        first = {GPU_PCIE_TRANSMIT.name: 10.0 * MIB, GPU_PCIE_RECEIVE.name: 20.0 * MIB}
        both = {GPU_PCIE_TRANSMIT.name: 20.0 * MIB, GPU_PCIE_RECEIVE.name: 40.0 * MIB}
        assert [first, first, both] == [pcie(readings, UUID) for readings in polls]


class TestInterval:
    """--collector.nvml.gpm-interval: a measurement costs NVIDIA's driver 0.9-1.8 ms of
    CPU a GPU (docs/benchmarks.md, an H200), so one sample and one metrics call are made
    an interval, averaging over all of it, and the polls between serve that measurement."""

    @pytest.fixture
    def every_30s(self, fake_nvml: FakeNvml) -> Iterator[Clocked]:
        polled = Clocked(gpm_interval_s=30.0)
        yield polled
        polled.collector.close()

    @staticmethod
    def polls(
        fake_nvml: FakeNvml,
        clocked: Clocked,
        times: tuple[float, ...],
        name: str = UUID,
        calls: tuple[str, ...] = ("gpm_sample", "gpm_metrics"),
    ) -> list[tuple[tuple[int, ...], dict[tuple[str, tuple[str, ...]], float], int]]:
        """For each poll at ``times``: how many of ``calls`` it made (by default the
        samples and metrics calls), the GPM figures it served for ``name``, and its
        issues' count."""
        seen = []
        for seconds in times:
            clocked.now = seconds
            readings, made = counting(fake_nvml, clocked.collector, *calls)
            seen.append((made, gpm(readings, name), len(readings.issues)))
        return seen

    def test_measured_once_an_interval_and_served_between(
        self, fake_nvml: FakeNvml, every_30s: Clocked
    ) -> None:
        """Polls every 10 s measure at every third; a poll due up to half a second
        early (polls start milliseconds off) measures, as at 29.6 s, one 0.6 s early does
        not. Nothing is served before the first measurement, one interval after the first
        sample."""
        fake_nvml.configure(GPU)
        seen = self.polls(fake_nvml, every_30s, (0.0, 10.0, 29.4, 29.6, 40.0, 59.0, 60.0))
        busy = ratios(BUSY)
        assert [
            ((1, 0), {}, 0),
            ((0, 0), {}, 0),
            ((0, 0), {}, 0),
            ((1, 1), busy, 0),
            ((0, 0), busy, 0),
            ((0, 0), busy, 0),
            ((1, 1), busy, 0),
        ] == seen

    def test_pcie_bytes_are_added_once_a_measurement(
        self, fake_nvml: FakeNvml, every_30s: Clocked
    ) -> None:
        """The whole interval's bytes at its measurement; the polls between serve the
        counts unchanged, never adding a rate twice."""
        fake_nvml.configure(replace(GPU, gpm_pcie=(1.0, 2.0)))
        polls = [every_30s.at(seconds) for seconds in (0.0, 10.0, 30.0, 40.0, 50.0, 60.0)]
        counted = [
            {GPU_PCIE_TRANSMIT.name: seconds * MIB, GPU_PCIE_RECEIVE.name: 2 * seconds * MIB}
            for seconds in (30.0, 30.0, 30.0, 60.0)
        ]
        assert [{}, {}, *counted] == [pcie(readings, UUID) for readings in polls]

    def test_a_metric_error_is_one_issue_and_the_answers_are_served_between(
        self, fake_nvml: FakeNvml, every_30s: Clocked
    ) -> None:
        """A metric answering an error is reported at the measurement, not again by
        each poll that serves it; the metrics that answered are served between."""
        fake_nvml.configure(replace(GPU, gpm=(-TIMEOUT, 88.25, 41.0, 63.5, 71.0, 0.5, 22.0, 9.75)))
        served = ratios(BUSY)
        del served[(GPU_GRAPHICS_ENGINE_ACTIVE.name, ())]
        seen = self.polls(fake_nvml, every_30s, (0.0, 30.0, 40.0, 50.0))
        assert [((1, 0), {}, 0), ((1, 1), served, 1), ((0, 0), served, 0), ((0, 0), served, 0)] == (
            seen
        )

    def test_a_failed_metrics_call_serves_nothing_until_the_next_measurement(
        self, fake_nvml: FakeNvml, every_30s: Clocked, tmp_path: Path
    ) -> None:
        """A metrics call that fails is one issue; the polls until the next measurement
        serve nothing rather than an older measurement as if it were this interval's.
        The sample it failed to measure to is kept: the next measurement is from it."""
        failing = tmp_path / "failing"
        fake_nvml.configure(replace(GPU, fail_while=(("gpm_metrics", UNKNOWN, failing),)))
        seen = self.polls(fake_nvml, every_30s, (0.0, 30.0))
        failing.touch()
        seen += self.polls(fake_nvml, every_30s, (60.0,))
        failing.unlink()
        seen += self.polls(fake_nvml, every_30s, (70.0, 90.0))
        busy = ratios(BUSY)
        assert [
            ((1, 0), {}, 0),
            ((1, 1), busy, 0),
            ((1, 1), {}, 1),
            ((0, 0), {}, 0),
            ((1, 1), busy, 0),
        ] == seen

    def test_a_mig_devices_instance_dram_is_served_between_too(
        self, fake_nvml: FakeNvml, every_30s: Clocked
    ) -> None:
        """A MIG device's own metrics and its GPU instance's DRAM follow the interval
        alike: one sample of each a measurement, both served between. (Counted: the
        fake answers the same figures whenever it is measured, so only the calls tell a
        device measured at every poll from one served again.)"""
        fake_nvml.configure(replace(GPU, migs=(FakeMig(0, MIG_1, 1, 0, gpm=BUSY),)))
        every_30s.at(0.0)
        calls = ("gpm_sample", "gpm_mig_sample", "gpm_metrics")
        seen = self.polls(fake_nvml, every_30s, (30.0, 40.0), name=MIG_1, calls=calls)
        # At 30 s: the GPU's and the device's samples, the instance's, three metrics calls.
        assert [((2, 1, 3), ratios(BUSY), 0), ((0, 0, 0), ratios(BUSY), 0)] == seen

    def test_a_gpu_unlisted_for_a_poll_is_measured_afresh(
        self, fake_nvml: FakeNvml, every_30s: Clocked, tmp_path: Path
    ) -> None:
        """A GPU NVML did not list for a poll loses its kept sample and measurement (its
        sample freed): back, it is sampled anew and served nothing until measured, never
        the measurement from before it went."""
        away = tmp_path / "away"
        unnamed = tmp_path / "unnamed"
        unnamed.touch()  # never cached, so its handle is asked each poll
        fails = (("name", UNKNOWN, unnamed), ("handle", UNKNOWN, away))
        fake_nvml.configure(replace(GPU, fail_while=fails))
        live = fake_nvml.library.gpm_samples_live()
        seen = self.polls(fake_nvml, every_30s, (0.0, 30.0))
        away.touch()
        every_30s.at(40.0)
        held_while_away = fake_nvml.library.gpm_samples_live() - live
        away.unlink()
        seen += self.polls(fake_nvml, every_30s, (50.0, 80.0))
        busy = ratios(BUSY)
        assert ([((1, 0), {}, 1), ((1, 1), busy, 1), ((1, 0), {}, 1), ((1, 1), busy, 1)], 0) == (
            seen,
            held_while_away,
        )
