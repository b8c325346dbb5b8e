"""The simulated node's GPU processes: cgroup files and pod-log tree read back by the collector."""

from __future__ import annotations

import shutil
from pathlib import Path

from exporter.collectors.base import CollectorContext
from exporter.collectors.gpu_processes import GpuProcessesCollector, parse_cgroup
from exporter.collectors.runner import CollectorRunner
from exporter.model import ProcessOrigin
from exporter.sim.fixtures import processes
from exporter.sim.gpus import SimulatedNvmlSource
from exporter.sim.hardware import demo_hardware


class TestDemoProcesses:
    def test_every_layout_reads_back(self) -> None:
        """Each demo container's cgroup file, whatever its layout, gives its UID and ID."""
        hardware = demo_hardware()
        layouts = set()
        for process in hardware.gpu_processes:
            container = process.container
            expected = (
                ProcessOrigin()
                if container is None
                else ProcessOrigin(container.uid, container.container_id)
            )
            assert expected == parse_cgroup(processes.cgroup_text(container))
            layouts.add(container.layout if container else "host")
        assert len(layouts) == 6  # five pod layouts and the host

    def test_collector_names_every_process(self, tmp_path: Path) -> None:
        """Through the simulated NVML, every demo process gets the owner the scenario gave it."""
        hardware = demo_hardware()
        processes.write(tmp_path / "proc", tmp_path / "log" / "pods", hardware)
        context = CollectorContext(procfs=tmp_path / "proc", pod_logs=tmp_path / "log" / "pods")
        source = SimulatedNvmlSource(hardware, clock=lambda: 0.0)
        readings = GpuProcessesCollector(context, source=source).collect()
        found = {
            p.pid: (p.origin.namespace, p.origin.pod, p.origin.container)
            for device in readings.gpu_processes or ()
            for p in device.processes
        }
        expected = {
            p.pid: (
                (p.container.namespace, p.container.pod, p.container.container)
                if p.container
                else ("", "", "")
            )
            for p in hardware.gpu_processes
        }
        assert ((), expected) == (readings.issues, found)


class TestPollsGoOn:
    async def test_degraded_reads_are_counted_not_failed(self, tmp_path: Path) -> None:
        """An exited PID, an unknown cgroup and no pod-log tree: the run succeeds, with
        fewer figures and each error counted in podresources_collector_errors_total."""
        hardware = demo_hardware()
        processes.write(tmp_path / "proc", tmp_path / "log" / "pods", hardware)
        exited, odd = hardware.gpu_processes[0].pid, hardware.gpu_processes[1].pid
        (tmp_path / "proc" / str(exited) / "cgroup").unlink()
        (tmp_path / "proc" / str(odd) / "cgroup").write_text("0::/kubepods.slice/odd\n")
        shutil.rmtree(tmp_path / "log" / "pods")
        context = CollectorContext(procfs=tmp_path / "proc", pod_logs=tmp_path / "log" / "pods")
        source = SimulatedNvmlSource(hardware, clock=lambda: 0.0)
        runner = CollectorRunner([GpuProcessesCollector(context, source=source)], timeout_s=5.0)
        try:
            (run,) = await runner.run_all()
        finally:
            runner.close()
        listed = {p.pid for d in run.readings.gpu_processes or () for p in d.processes}
        counts = dict(run.error_counts)
        assert (True, False, True) == (run.success, exited in listed, odd in listed)
        assert (1, 1, 1) == (
            counts["process_exited"],
            counts["cgroup_unknown"],
            counts["pod_logs_missing"],
        )
