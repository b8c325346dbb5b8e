"""GpuProcessesCollector through the real pynvml bindings, against the fake libnvidia-ml.so.1,
with fixture /proc/<pid>/cgroup files and a fixture pod-log tree."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_nvml_support import (
    GIB,
    NO_PERMISSION,
    NOT_FOUND,
    NOT_SUPPORTED,
    UNKNOWN,
    FakeGpu,
    FakeMig,
    FakeNvml,
    FakeProcess,
    FakeSample,
)
from manualclock import ManualClock

from exporter.collectors.base import CollectorContext
from exporter.collectors.gpu_processes import GpuProcessesCollector
from exporter.collectors.nvml import NOT_SUPPORTED as NOT_SUPPORTED_NAME
from exporter.collectors.nvml import NvmlError, NvmlHandle, NvmlProcess
from exporter.exposition import render
from exporter.join import join_snapshot
from exporter.model import (
    AllocatableResources,
    CollectorRun,
    ContainerResources,
    DeviceGroup,
    DeviceProcesses,
    GpuProcess,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    PodResources,
    ProcessOrigin,
    Readings,
)

UUID = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
MIG_UUID = "MIG-11111111-aaaa-bbbb-cccc-dddddddddddd"
UID = "5e2d3c1a-8b7f-4c6e-9a1d-2f3b4c5d6e7f"
CID = "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d"
POD_CGROUP = (
    "0::/kubepods.slice/kubepods-besteffort.slice/"
    f"kubepods-besteffort-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
)
HOST_CGROUP = "0::/user.slice/user-1000.slice/session-3.scope\n"
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15

NAMED = ProcessOrigin(UID, CID, "team-a", "trainer-0", "trainer")
GPU_KEY = HardwareKey(KeyKind.GPU_UUID, UUID)


@pytest.fixture
def node(tmp_path: Path) -> Path:
    """A host root: proc/ with PID 100 in team-a/trainer-0's container, PID 200 on the
    host, and the kubelet's log/pods tree for that pod."""
    write_cgroup(tmp_path, 100, POD_CGROUP)
    write_cgroup(tmp_path, 200, HOST_CGROUP)
    log = tmp_path / "log" / "pods" / f"team-a_trainer-0_{UID}" / "trainer" / "0.log"
    log.parent.mkdir(parents=True)
    log.touch()
    return tmp_path


def write_cgroup(root: Path, pid: int, text: str) -> None:
    path = root / "proc" / str(pid) / "cgroup"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def collector(fake_nvml: FakeNvml, node: Path) -> Iterator[GpuProcessesCollector]:
    context = CollectorContext(procfs=node / "proc", pod_logs=node / "log" / "pods")
    found = GpuProcessesCollector(context)
    yield found
    found.close()


TWO_PROCESSES = FakeGpu(
    UUID,
    processes=(FakeProcess(100, 4 * GIB), FakeProcess(200, None, graphics=True)),
    samples=(FakeSample(100, 1_000, 40), FakeSample(100, 2_000, 60)),
)


def _two_processes(*, first_sm: float) -> Readings:
    """TWO_PROCESSES as collected: the named one's SM utilization ``first_sm``, the other
    idle, its memory unknown to NVML."""
    return Readings(
        gpu_processes=(
            DeviceProcesses(
                GPU_KEY,
                (
                    GpuProcess(100, NAMED, 4 * GIB, first_sm),
                    GpuProcess(200, ProcessOrigin(), None, 0.0),
                ),
                utilization_supported=True,
            ),
        )
    )


def _processes(readings: Readings) -> tuple[GpuProcess, ...]:
    """The processes of the one device the readings list."""
    assert readings.gpu_processes is not None
    (device,) = readings.gpu_processes
    return device.processes


class TestListing:
    def test_processes_with_owner_memory_and_utilization(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """Compute and graphics processes, placed; SM utilization the mean of the samples;
        a listed process without samples is idle (0), memory NVML cannot tell is None."""
        fake_nvml.configure(TWO_PROCESSES)
        expected = _two_processes(first_sm=0.5)
        assert expected == collector.collect()

    def test_next_poll_asks_for_newer_samples_only(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """The second poll passes the newest timestamp seen: old samples are not counted again."""
        fake_nvml.configure(TWO_PROCESSES)
        collector.collect()
        second = collector.collect().gpu_processes
        assert second is not None
        assert [0.0, 0.0] == [p.sm_utilization_ratio for p in second[0].processes]

    def test_no_newer_sample_answered_as_success_is_none(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """A driver that answers SUCCESS and no count, rather than NOT_FOUND, when it holds
        no newer sample (pynvml raises even for that): no samples, the processes idle,
        and no issue."""
        fake_nvml.configure(TWO_PROCESSES, samples_none_success=True)
        collector.collect()
        second = collector.collect()
        expected = _two_processes(first_sm=0.0)
        assert expected == second

    def test_utilization_not_supported(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """NOT_SUPPORTED samples: no utilization figure (None, not 0), and no error counted."""
        fake_nvml.configure(
            FakeGpu(UUID, processes=(FakeProcess(100, GIB),), fail=(("proc_util", NOT_SUPPORTED),))
        )
        expected = Readings(
            gpu_processes=(DeviceProcesses(GPU_KEY, (GpuProcess(100, NAMED, GIB, None),), False),)
        )
        assert expected == collector.collect()

    def test_idle_device_is_not_asked_for_samples(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """A device without processes is not asked for per-process samples (an H100's
        driver takes 2-3 ms of CPU to say it has none); it lists none, with support
        as NVML last answered it."""
        fake_nvml.configure(FakeGpu(UUID))
        before = fake_nvml.library.calls("proc_util")
        readings = collector.collect()
        assert (before, Readings(gpu_processes=(DeviceProcesses(GPU_KEY, (), True),))) == (
            fake_nvml.library.calls("proc_util"),
            readings,
        )

    def test_device_going_idle_is_asked_once_more(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, tmp_path: Path
    ) -> None:
        """The first idle poll after a busy one still asks for samples, to step past
        those of the busy stretch; the polls after it do not."""
        running = tmp_path / "running"
        running.touch()
        fake_nvml.configure(FakeGpu(UUID, processes=(FakeProcess(100, GIB, alive_flag=running),)))
        calls = fake_nvml.library.calls
        counts = [calls("proc_util")]
        collector.collect()
        counts.append(calls("proc_util"))
        running.unlink()
        collector.collect()
        counts.append(calls("proc_util"))
        idle = collector.collect()
        counts.append(calls("proc_util"))

        steps = [later - earlier for earlier, later in itertools.pairwise(counts)]
        # One call a question: with no sample to give, NVML answers the size query so.
        assert ([1, 1, 0], Readings(gpu_processes=(DeviceProcesses(GPU_KEY, (), True),))) == (
            steps,
            idle,
        )

    def test_samples_from_before_an_idle_stretch_are_not_counted_again(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, tmp_path: Path
    ) -> None:
        """A PID busy, then gone for a poll, then back (a new CUDA context): its ratio is
        of the samples since the idle poll, not of the busy stretch's late ones."""
        running, late, again = tmp_path / "running", tmp_path / "late", tmp_path / "again"
        running.touch()
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(100, GIB, alive_flag=running),),
                samples=(
                    FakeSample(100, 1_000, 100),
                    FakeSample(100, 3_000, 100, present_flag=late),
                    FakeSample(100, 5_000, 10, present_flag=again),
                ),
            )
        )
        collector.collect()  # busy: the sample at 1,000
        running.unlink()
        late.touch()  # the busy stretch's last sample, seen after that poll
        collector.collect()  # idle
        running.touch()
        again.touch()
        back = collector.collect().gpu_processes

        assert back is not None
        assert [0.1] == [p.sm_utilization_ratio for p in back[0].processes]

    def test_samples_after_the_wall_clock_stepped_back_are_counted(
        self, fake_nvml: FakeNvml, node: Path, tmp_path: Path
    ) -> None:
        """NVML stamps samples with the wall clock (unix microseconds; an H200 on driver
        580 answered within 0.2 s of time()). After NTP steps it back an hour, the
        samples are stamped an hour before the newest one seen: asked for samples after
        that one, NVML gives none, and the process reads idle for the hour. The samples
        NVML still holds from before the step were counted already, and are not again."""
        before_us = 1_800_000_000 * 1_000_000  # unix microseconds
        after_us = before_us - 3600 * 1_000_000 + 5_000_000  # stepped back, 5 s on
        stepped, later = tmp_path / "stepped", tmp_path / "later"
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(100, GIB),),
                samples=(
                    FakeSample(100, before_us, 40),  # still in NVML's buffer
                    FakeSample(100, after_us, 80, present_flag=stepped),
                    FakeSample(100, after_us + 10_000_000, 20, present_flag=later),
                ),
            )
        )
        wall = ManualClock(before_us / 1e6 + 1)
        context = CollectorContext(procfs=node / "proc", pod_logs=node / "log" / "pods")
        collector = GpuProcessesCollector(context, wall_clock=wall)
        try:
            ratios = [[p.sm_utilization_ratio for p in _processes(collector.collect())]]
            wall.now = after_us / 1e6 + 1  # NTP stepped the clock back an hour
            stepped.touch()
            ratios.append([p.sm_utilization_ratio for p in _processes(collector.collect())])
            wall.now += 10
            later.touch()
            ratios.append([p.sm_utilization_ratio for p in _processes(collector.collect())])
        finally:
            collector.close()
        assert [[0.4], [0.8], [0.2]] == ratios

    def test_a_clock_stepped_back_just_behind_the_newest_sample_is_a_step_too(
        self, fake_nvml: FakeNvml, node: Path, tmp_path: Path
    ) -> None:
        """Any step that leaves the clock behind the newest sample seen hides the samples
        taken since from a question for those after it, however short: here the clock
        reads half a second before that sample, and the one taken after the step counts."""
        before_us = 1_800_000_000 * 1_000_000  # unix microseconds
        stepped = tmp_path / "stepped"
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(100, GIB),),
                samples=(
                    FakeSample(100, before_us, 40),
                    FakeSample(100, before_us - 750_000, 80, present_flag=stepped),
                ),
            )
        )
        wall = ManualClock(before_us / 1e6 + 1)
        context = CollectorContext(procfs=node / "proc", pod_logs=node / "log" / "pods")
        collector = GpuProcessesCollector(context, wall_clock=wall)
        try:
            ratios = [[p.sm_utilization_ratio for p in _processes(collector.collect())]]
            wall.now = before_us / 1e6 - 0.5  # stepped back a second and a half
            stepped.touch()
            ratios.append([p.sm_utilization_ratio for p in _processes(collector.collect())])
        finally:
            collector.close()
        assert [[0.4], [0.8]] == ratios

    def test_samples_are_taken_on_the_wall_clock_by_default(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """NVML stamps samples with time() in unix microseconds, so that is the clock a
        collector made with its defaults compares them with: a sample stamped a minute
        ago is counted, not taken for one from the future (on the monotonic clock, the
        seconds since boot, every real stamp would look decades ahead)."""
        stamped_us = int((time.time() - 60) * 1_000_000)
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(100, GIB),),
                samples=(FakeSample(100, stamped_us, 30),),
            )
        )
        assert [0.3] == [p.sm_utilization_ratio for p in _processes(collector.collect())]

    def test_idle_mig_device_gives_no_samples(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """A MIG device never asked is taken at nvml.h's word: no per-process samples
        on MIG-enabled GPUs."""
        fake_nvml.configure(FakeGpu(UUID, migs=(FakeMig(0, MIG_UUID, 1, 0),)))
        expected = Readings(
            gpu_processes=(DeviceProcesses(HardwareKey(KeyKind.MIG_UUID, MIG_UUID), (), False),)
        )
        assert expected == collector.collect()

    def test_falls_back_to_v2_lists(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """A driver without the _v3 process lists is asked for _v2, without an error."""
        fake_nvml.configure(
            FakeGpu(
                UUID, processes=(FakeProcess(100, GIB),), fail=(("procs_v3", FUNCTION_NOT_FOUND),)
            )
        )
        readings = collector.collect()
        assert ((), [100]) == (
            readings.issues,
            [p.pid for d in readings.gpu_processes or () for p in d.processes],
        )

    def test_r535_driver_lists_every_process_right(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, node: Path
    ) -> None:
        """An R535 driver fills 32-byte records from the _v3 lists (CUDA 12.2's nvml.h)
        where pynvml reads 24: the _v2 lists are asked instead, so every process after
        the first keeps its PID and memory."""
        write_cgroup(node, 300, HOST_CGROUP)
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(
                    FakeProcess(100, GIB),
                    FakeProcess(200, 2 * GIB),
                    FakeProcess(300, 3 * GIB),
                ),
                fail=(("proc_util", NOT_SUPPORTED),),
            ),
            driver_version="535.104.05",
        )
        readings = collector.collect()
        assert readings.gpu_processes is not None
        assert ((), [(100, GIB), (200, 2 * GIB), (300, 3 * GIB)]) == (
            readings.issues,
            [(p.pid, p.memory_used_bytes) for p in readings.gpu_processes[0].processes],
        )

    def test_mps_clients_and_server(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, node: Path
    ) -> None:
        """MPS clients come from their own list; the server by its comm, which the kernel
        cuts to 15 bytes."""
        (node / "proc" / "200" / "comm").write_text("nvidia-cuda-mps\n")
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(200, 512 * 1024 * 1024), FakeProcess(100, GIB, mps=True)),
                fail=(("proc_util", NOT_SUPPORTED),),
            )
        )
        readings = collector.collect()
        assert readings.gpu_processes is not None
        assert [(100, "", GIB), (200, "nvidia-cuda-mps", 512 * 1024 * 1024)] == [
            (p.pid, p.command, p.memory_used_bytes) for p in readings.gpu_processes[0].processes
        ]

    def test_mps_server_known_by_its_comm_is_not_foreign(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, node: Path
    ) -> None:
        """Known by the kernel's 15-byte comm, the host's MPS server is no foreign
        process on the held GPU."""
        (node / "proc" / "200" / "comm").write_text("nvidia-cuda-mps\n")
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(200, GIB), FakeProcess(100, GIB, mps=True)),
                fail=(("proc_util", NOT_SUPPORTED),),
            )
        )
        foreign = [line for line in _exposition(collector.collect()) if "foreign" in line]
        assert [
            f'podresources_gpu_foreign_processes{{device_id="{UUID}",kind="other_pod",'
            'resource="nvidia.com/gpu"} 0.0',
            f'podresources_gpu_foreign_processes{{device_id="{UUID}",kind="host",'
            'resource="nvidia.com/gpu"} 0.0',
        ] == foreign

    def test_a_real_mps_server_is_known_by_the_kernels_comm(
        self, fake_nvml: FakeNvml, fake_nvml_library: object, tmp_path: Path
    ) -> None:
        """A real process whose program is nvidia-cuda-mps-server, read from this host's
        /proc: the 15 bytes the kernel keeps in comm, a name attribution takes for the
        MPS server (it hand-wrote a 22-character comm the kernel never gives)."""
        program = tmp_path / "nvidia-cuda-mps-server"
        shutil.copy(shutil.which("sleep") or "/bin/sleep", program)
        server = subprocess.Popen([str(program), "60"])
        _wait_for_exec(server.pid, program)
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(server.pid, GIB),),
                fail=(("proc_util", NOT_SUPPORTED),),
            )
        )
        context = CollectorContext(procfs=Path("/proc"), pod_logs=tmp_path / "pods")
        collector = GpuProcessesCollector(context)
        try:
            comm = Path(f"/proc/{server.pid}/comm").read_text().strip()
            readings = collector.collect()
        finally:
            collector.close()
            server.kill()
            server.wait()
        assert readings.gpu_processes is not None
        # tests/test_processes.py: that name is the MPS server to attribution.
        assert ("nvidia-cuda-mps", ["nvidia-cuda-mps"]) == (
            comm,
            [p.command for p in readings.gpu_processes[0].processes],
        )

    def test_mig_devices_list_their_own(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """On a MIG GPU each MIG device reports its processes under its MIG UUID."""
        fake_nvml.configure(
            FakeGpu(
                UUID,
                fail=(("util", NOT_SUPPORTED),),
                migs=(FakeMig(0, MIG_UUID, 1, 0, processes=(FakeProcess(100, 3 * GIB),)),),
            )
        )
        key = HardwareKey(KeyKind.MIG_UUID, MIG_UUID)
        expected = Readings(
            gpu_processes=(DeviceProcesses(key, (GpuProcess(100, NAMED, 3 * GIB, None),), False),)
        )
        assert expected == collector.collect()


class TestDegrading:
    def test_a_mig_device_nvml_cannot_name_costs_only_its_own_processes(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """One MIG device whose UUID NVML cannot give: its siblings keep their lists
        (one error used to drop every MIG device of the GPU), and the issue names it."""
        other = "MIG-22222222-aaaa-bbbb-cccc-dddddddddddd"
        fake_nvml.configure(
            FakeGpu(
                UUID,
                fail=(("util", NOT_SUPPORTED),),
                migs=(
                    FakeMig(0, MIG_UUID, 1, 0, processes=(FakeProcess(100, GIB),)),
                    FakeMig(
                        1,
                        other,
                        2,
                        0,
                        processes=(FakeProcess(200, GIB),),
                        fail=(("uuid", UNKNOWN),),
                    ),
                ),
            )
        )
        readings = collector.collect()
        assert readings.gpu_processes is not None
        assert [MIG_UUID] == [d.key.value for d in readings.gpu_processes]
        assert [("UNKNOWN", "GPU 0 MIG slot 1: NVML UNKNOWN")] == [
            (i.error, i.detail) for i in readings.issues
        ]

    def test_process_exited_before_its_cgroup_was_read(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """A PID gone from /proc is dropped and counted; the others stay."""
        fake_nvml.configure(FakeGpu(UUID, processes=(FakeProcess(100, GIB), FakeProcess(300, GIB))))
        readings = collector.collect()
        assert readings.gpu_processes is not None
        assert [100] == [p.pid for p in readings.gpu_processes[0].processes]
        assert ["process_exited"] == [i.error for i in readings.issues]

    def test_exited_processes_share_one_detail(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """Processes exiting between NVML's list and their cgroup's read are routine (a
        short CUDA job): each is counted, under one detail naming no PID, so the runner
        logs the first and not a line per process."""
        gone = tuple(FakeProcess(pid, GIB) for pid in (300, 301, 302))
        fake_nvml.configure(FakeGpu(UUID, processes=gone))
        details = [(i.error, i.detail) for i in collector.collect().issues]
        assert 3 == len(details)
        assert 1 == len(set(details)), details
        assert "<pid>" in details[0][1]

    def test_unknown_cgroup_shape(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, node: Path
    ) -> None:
        """A kubepods path we cannot read: the process stays, as a pod's we cannot name."""
        write_cgroup(node, 300, "0::/kubepods.slice/kubepods-pod1234.slice/weird\n")
        fake_nvml.configure(FakeGpu(UUID, processes=(FakeProcess(300, GIB),), samples=()))
        readings = collector.collect()
        assert readings.gpu_processes is not None
        assert ProcessOrigin(pod_uid="") == readings.gpu_processes[0].processes[0].origin
        assert ["cgroup_unknown"] == [i.error for i in readings.issues]

    def test_pod_log_tree_missing(
        self, fake_nvml: FakeNvml, fake_nvml_library: object, node: Path
    ) -> None:
        """No pod-log tree: processes keep their UID and container ID, unnamed; counted once."""
        context = CollectorContext(procfs=node / "proc", pod_logs=node / "missing")
        collector = GpuProcessesCollector(context)
        fake_nvml.configure(FakeGpu(UUID, processes=(FakeProcess(100, GIB),)))
        try:
            readings = collector.collect()
        finally:
            collector.close()
        assert readings.gpu_processes is not None
        assert ProcessOrigin(UID, CID) == readings.gpu_processes[0].processes[0].origin
        assert ["pod_logs_missing"] == [i.error for i in readings.issues]

    def test_failed_list_loses_the_device(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """One list failing: no figures for the device rather than half of them; counted."""
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(100, GIB), FakeProcess(200, GIB, graphics=True)),
                fail=(("procs_v3", 999),),
            )
        )
        readings = collector.collect()
        assert ((), ["UNKNOWN"]) == (readings.gpu_processes, [i.error for i in readings.issues])

    def test_state_of_devices_gone_is_dropped(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, tmp_path: Path
    ) -> None:
        """A MIG reconfiguration names new MIG devices: what was kept per device (busy,
        samples given, the newest sample) goes with the old ones, once a poll listed
        every device; a poll that failed somewhere keeps it, for the device that failed."""
        other = "MIG-22222222-aaaa-bbbb-cccc-dddddddddddd"
        unlisted, gone = tmp_path / "unlisted", tmp_path / "gone"
        old = FakeMig(
            0,
            MIG_UUID,
            1,
            0,
            processes=(FakeProcess(100, GIB),),
            fail_while=(("procs", UNKNOWN, unlisted), ("uuid", NOT_FOUND, gone)),
        )
        new = FakeMig(1, other, 2, 0, processes=(FakeProcess(100, GIB),))
        fake_nvml.configure(FakeGpu(UUID, fail=(("util", NOT_SUPPORTED),), migs=(old, new)))

        def poll() -> tuple[list[str], list[set[str]]]:
            issues = [i.error for i in collector.collect().issues]
            kept = [collector._busy, set(collector._gives_samples), set(collector._last_sample_us)]
            return issues, kept

        both = {MIG_UUID, other}
        assert ([], [both, both, set()]) == poll()
        unlisted.touch()
        assert (["UNKNOWN"], [both, both, set()]) == poll()
        unlisted.unlink()
        gone.touch()
        assert ([], [{other}, {other}, set()]) == poll()

    @pytest.mark.parametrize("lost", [1, 0])
    def test_state_of_devices_gone_is_dropped_while_another_gpu_keeps_failing(
        self, node: Path, lost: int
    ) -> None:
        """A GPU that fails every poll (fallen off the bus) keeps its own devices' state,
        not every device's: MIG devices made and destroyed on a healthy GPU meanwhile
        (dynamic MIG makes one a claim) take their state with them, for months. Whether
        the lost GPU is listed before the healthy one or after."""
        source = _ChurningMigs()
        source.lost = lost
        context = CollectorContext(procfs=node / "proc", pod_logs=node / "log" / "pods")
        collector = GpuProcessesCollector(context, source=source)

        def kept() -> tuple[int, ...]:
            held = (
                collector._busy,
                collector._gives_samples,
                collector._last_sample_us,
                collector._gpu_of,  # and which GPU each device was listed under
            )
            return tuple(len(by_device) for by_device in held)

        sizes = []
        try:
            for generation in range(200):
                source.generation = generation
                readings = collector.collect()
                assert ["GPU_IS_LOST"] == [i.error for i in readings.issues]
                sizes.append(kept())
        finally:
            collector.close()
        assert [(1, 1, 0, 1)] * len(sizes) == sizes

    def test_a_gpu_put_in_mig_mode_forgets_its_whole_gpu_state(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, tmp_path: Path
    ) -> None:
        """MIG enabled (nvidia-smi -mig 1, a reset): the whole GPU is no longer a device
        of its own, its MIG devices are; what was kept for it, its newest sample too,
        goes once a poll lists every device."""
        mig_off = tmp_path / "mig-off"
        mig_off.touch()
        fake_nvml.configure(
            replace(
                TWO_PROCESSES,
                migs=(FakeMig(0, MIG_UUID, 1, 0, processes=(FakeProcess(100, GIB),)),),
                mig_off_flag=mig_off,
            )
        )

        def kept() -> list[set[str]]:
            return [
                set(collector._busy),
                set(collector._gives_samples),
                set(collector._last_sample_us),
            ]

        collector.collect()
        assert [{UUID}, {UUID}, {UUID}] == kept()
        mig_off.unlink()
        assert () == collector.collect().issues
        # The MIG device was asked for samples once: NOT_SUPPORTED, kept as such.
        assert [{MIG_UUID}, {MIG_UUID}, set()] == kept()

    def test_lost_gpu(self, fake_nvml: FakeNvml, collector: GpuProcessesCollector) -> None:
        """GPU_IS_LOST on the list: that device has no figures, counted; the poll goes on."""
        fake_nvml.configure(
            FakeGpu(UUID, processes=(FakeProcess(100, GIB),), fail=(("procs", GPU_IS_LOST),))
        )
        readings = collector.collect()
        assert ((), ["GPU_IS_LOST"]) == (readings.gpu_processes, [i.error for i in readings.issues])


def _wait_for_exec(pid: int, program: Path) -> None:
    """Until the kernel has set up ``program`` in ``pid``: Popen may return (vfork) before
    exec has renamed the task and laid out its arguments."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    deadline = time.monotonic() + 10
    while not cmdline.read_bytes().startswith(bytes(program) + b"\0"):
        assert time.monotonic() < deadline, f"{program} did not start"
        time.sleep(0.01)


def _exposition(readings: Readings) -> list[str]:
    """The process series of /metrics for one poll with team-a/trainer-0 holding the GPU."""
    pod = PodResources(
        "team-a",
        "trainer-0",
        (ContainerResources("trainer", devices=(DeviceGroup("nvidia.com/gpu", (UUID,)),)),),
    )
    snapshot = join_snapshot(
        node="n",
        collected_at=1.0,
        kubelet=KubeletStatus(up=True, socket="s", api=()),
        pods=(pod,),
        allocatable=AllocatableResources(devices=(DeviceGroup("nvidia.com/gpu", (UUID,)),)),
        cpu_numa={},
        collector_runs=(CollectorRun("gpu_processes", True, 0.0, readings),),
    )
    text = render(snapshot).text.decode()
    return [
        line
        for line in text.splitlines()
        if line.startswith(("podresources_gpu_process_", "podresources_gpu_foreign"))
    ]


class TestSeries:
    def test_ended_process_disappears_at_next_poll(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, node: Path
    ) -> None:
        """The host process's series are there while NVML lists it, gone the poll after."""
        alive = node / "pid-200-alive"
        alive.touch()
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(100, GIB), FakeProcess(200, 2 * GIB, alive_flag=alive)),
                samples=(FakeSample(100, 1_000, 40), FakeSample(200, 1_000, 20)),
            )
        )
        labels = f'device_id="{UUID}",namespace="",pod="",resource="nvidia.com/gpu"'
        holder = (
            f'container="trainer",device_id="{UUID}",namespace="team-a",pod="trainer-0",'
            'resource="nvidia.com/gpu"'
        )
        foreign = f'device_id="{UUID}",kind="host",resource="nvidia.com/gpu"'
        first = _exposition(collector.collect())
        assert [
            f"podresources_gpu_process_memory_used_bytes{{{holder}}} 1.073741824e+09",
            f'podresources_gpu_process_memory_used_bytes{{container="",{labels}}} 2.147483648e+09',
            f"podresources_gpu_process_sm_utilization_ratio{{{holder}}} 0.4",
            f'podresources_gpu_process_sm_utilization_ratio{{container="",{labels}}} 0.2',
            f'podresources_gpu_foreign_processes{{device_id="{UUID}",kind="other_pod",'
            'resource="nvidia.com/gpu"} 0.0',
            f"podresources_gpu_foreign_processes{{{foreign}}} 1.0",
        ] == first
        os.unlink(alive)
        second = _exposition(collector.collect())
        assert [
            f"podresources_gpu_process_memory_used_bytes{{{holder}}} 1.073741824e+09",
            f"podresources_gpu_process_sm_utilization_ratio{{{holder}}} 0.0",
            f'podresources_gpu_foreign_processes{{device_id="{UUID}",kind="other_pod",'
            'resource="nvidia.com/gpu"} 0.0',
            f"podresources_gpu_foreign_processes{{{foreign}}} 0.0",
        ] == second


class TestListsAndPlacing:
    def test_a_process_in_two_lists_is_one_with_its_larger_memory(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """A process with a compute and a graphics context is listed by both: it is one
        process, with the larger of the two memory figures."""
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(100, 2 * GIB), FakeProcess(100, GIB, graphics=True)),
                fail=(("proc_util", NOT_SUPPORTED),),
            )
        )
        readings = collector.collect()
        assert readings.gpu_processes is not None
        assert [(100, 2 * GIB)] == [
            (p.pid, p.memory_used_bytes) for p in readings.gpu_processes[0].processes
        ]

    def test_a_gpu_without_mig_support_is_listed_whole(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """A GPU that answers NOT_SUPPORTED for its MIG mode (no MIG on that model) is
        listed as a whole GPU, with no issue."""
        fake_nvml.configure(
            FakeGpu(
                UUID,
                processes=(FakeProcess(100, GIB),),
                fail=(("mig_mode", NOT_SUPPORTED), ("proc_util", NOT_SUPPORTED)),
            )
        )
        expected = Readings(
            gpu_processes=(DeviceProcesses(GPU_KEY, (GpuProcess(100, NAMED, GIB, None),), False),)
        )
        assert expected == collector.collect()

    @pytest.mark.parametrize("code", [NOT_SUPPORTED, FUNCTION_NOT_FOUND])
    def test_a_device_with_no_process_list_is_not_reported(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, code: int
    ) -> None:
        """A device (or driver) that lists no processes at all gives no figures for it,
        and it is no fault: no device, no issue."""
        fake_nvml.configure(
            FakeGpu(UUID, processes=(FakeProcess(100, GIB),), fail=(("procs", code),))
        )
        assert Readings(gpu_processes=()) == collector.collect()

    def test_host_processes_need_no_pod_log_tree(
        self, fake_nvml: FakeNvml, fake_nvml_library: object, node: Path
    ) -> None:
        """With only host processes on the GPUs the pod-log tree is not read: its absence
        is no issue."""
        context = CollectorContext(procfs=node / "proc", pod_logs=node / "missing")
        collector = GpuProcessesCollector(context)
        fake_nvml.configure(
            FakeGpu(UUID, processes=(FakeProcess(200, GIB),), fail=(("proc_util", NOT_SUPPORTED),))
        )
        try:
            readings = collector.collect()
        finally:
            collector.close()
        assert () == readings.issues

    def test_a_pod_the_log_tree_does_not_know_is_counted(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector, node: Path
    ) -> None:
        """A pod's process whose UID has no pod-log directory keeps its UID, unnamed, and
        counts one pod_unknown issue."""
        other = "0f0f0f0f-1111-2222-3333-444444444444"
        write_cgroup(node, 300, POD_CGROUP.replace(UID.replace("-", "_"), other.replace("-", "_")))
        fake_nvml.configure(FakeGpu(UUID, processes=(FakeProcess(300, GIB),), samples=()))
        readings = collector.collect()
        assert readings.gpu_processes is not None
        assert ProcessOrigin(other, CID) == readings.gpu_processes[0].processes[0].origin
        assert ["pod_unknown"] == [i.error for i in readings.issues]

    @pytest.mark.parametrize(
        ("error", "label", "kept"),
        [
            # The process exited between open() and read() of its cgroup file: the kernel
            # answers ESRCH, as it answers ENOENT before the open.
            (ProcessLookupError(3, "No such process"), "process_exited", False),
            (OSError(5, "Input/output error"), "cgroup_unreadable", True),
        ],
    )
    def test_a_cgroup_read_that_fails(
        self,
        fake_nvml: FakeNvml,
        collector: GpuProcessesCollector,
        node: Path,
        monkeypatch: pytest.MonkeyPatch,
        error: OSError,
        label: str,
        kept: bool,
    ) -> None:
        """A PID whose cgroup read fails with ESRCH has exited: dropped. Any other failure
        keeps the process as a pod's we cannot name (never the host's)."""
        cgroup = node / "proc" / "300" / "cgroup"
        write_cgroup(node, 300, POD_CGROUP)
        real = Path.read_text

        def read_text(path: Path, *args: Any, **kwargs: Any) -> str:
            if path == cgroup:
                raise error
            return real(path, *args, **kwargs)

        monkeypatch.setattr(Path, "read_text", read_text)
        fake_nvml.configure(
            FakeGpu(UUID, processes=(FakeProcess(100, GIB), FakeProcess(300, GIB)), samples=())
        )
        readings = collector.collect()
        assert readings.gpu_processes is not None
        placed = {p.pid: p.origin for p in readings.gpu_processes[0].processes}
        expected = {100: NAMED, **({300: ProcessOrigin(pod_uid="")} if kept else {})}
        assert (expected, [label]) == (placed, [i.error for i in readings.issues])

    def test_a_gpu_nvml_cannot_open_is_counted(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """A GPU whose handle NVML will not give loses its own processes, as one issue
        naming it; the next GPU is listed."""
        other = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
        fake_nvml.configure(
            FakeGpu(UUID, processes=(FakeProcess(100, GIB),), fail=(("handle", UNKNOWN),)),
            FakeGpu(other, minor=1, processes=(FakeProcess(200, GIB),), samples=()),
        )
        readings = collector.collect()
        assert readings.gpu_processes is not None
        assert ([other], [("UNKNOWN", "GPU 0: NVML UNKNOWN")]) == (
            [d.key.value for d in readings.gpu_processes],
            [(i.error, i.detail) for i in readings.issues],
        )

    def test_a_gpu_whose_handle_is_refused_is_one_issue_until_nvml_restarts(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """NO_PERMISSION for a GPU's handle (this process may not open its device node,
        which does not change while it runs) is one issue, then not asked again until
        NVML is initialised afresh: the error count does not grow every poll."""
        other = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
        fake_nvml.configure(
            FakeGpu(UUID, processes=(FakeProcess(100, GIB),), fail=(("handle", NO_PERMISSION),)),
            FakeGpu(other, minor=1, processes=(FakeProcess(200, GIB),), samples=()),
        )
        refused = [("NO_PERMISSION", "GPU 0: NVML NO_PERMISSION")]
        polls = [collector.collect()]
        before = fake_nvml.library.calls("handle")
        polls.append(collector.collect())
        asked = fake_nvml.library.calls("handle") - before
        collector.close()
        polls.append(collector.collect())
        assert ([refused, [], refused], 1) == (
            [[(i.error, i.detail) for i in readings.issues] for readings in polls],
            asked,  # GPU 1's only
        )
        assert [[other]] * 3 == [
            [d.key.value for d in readings.gpu_processes or ()] for readings in polls
        ]

    def test_a_mig_slot_answering_not_supported_is_empty(
        self, fake_nvml: FakeNvml, collector: GpuProcessesCollector
    ) -> None:
        """A MIG slot NVML answers NOT_SUPPORTED for (as NOT_FOUND) holds no device: it
        is passed over without an issue; its siblings are listed."""
        other = "MIG-22222222-aaaa-bbbb-cccc-dddddddddddd"
        fake_nvml.configure(
            FakeGpu(
                UUID,
                fail=(("util", NOT_SUPPORTED),),
                migs=(
                    FakeMig(0, MIG_UUID, 1, 0, processes=(FakeProcess(100, GIB),)),
                    FakeMig(1, other, 2, 0, fail=(("uuid", NOT_SUPPORTED),)),
                ),
            )
        )
        readings = collector.collect()
        assert readings.gpu_processes is not None
        assert ([MIG_UUID], ()) == (
            [d.key.value for d in readings.gpu_processes],
            readings.issues,
        )


class _ChurningMigs:
    """Just what GpuProcessesCollector asks of NVML: GPU 0 has MIG on, one MIG device
    running PID 100 and named anew each ``generation`` (made for a claim and destroyed
    with it); GPU 1 fell off the bus and answers GPU_IS_LOST every poll. ``lost``: the
    index of the lost GPU (the healthy one is the other)."""

    generation = 0
    lost = 1

    def init(self) -> None: ...

    def shutdown(self) -> None: ...

    def device_count(self) -> int:
        return 2

    def device_handle(self, index: int) -> NvmlHandle:
        if index == self.lost:
            raise NvmlError("GPU_IS_LOST", code=GPU_IS_LOST)
        return NvmlHandle("gpu-0")

    def uuid(self, handle: NvmlHandle) -> str:
        return UUID if handle == "gpu-0" else f"MIG-{self.generation:08x}-aaaa-bbbb-cccc-dddd"

    def mig_enabled(self, handle: NvmlHandle) -> bool:
        return True

    def max_mig_device_count(self, handle: NvmlHandle) -> int:
        return 1

    def mig_device_handle(self, handle: NvmlHandle, index: int) -> NvmlHandle:
        return NvmlHandle("mig")

    def compute_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        return (NvmlProcess(100, GIB),)

    def graphics_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        return ()

    def mps_processes(self, handle: NvmlHandle) -> tuple[NvmlProcess, ...]:
        return ()

    def process_utilization(self, handle: NvmlHandle, since_us: int) -> tuple[Any, ...]:
        raise NvmlError(NOT_SUPPORTED_NAME)  # nvml.h: not on MIG devices
