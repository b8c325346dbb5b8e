"""Which processes run on each GPU and MIG device, and whose they are. Off by default.

Per device NVML lists the running compute and graphics processes with their memory
(the newest list version the driver has; _v2 on R535, whose _v3 records pynvml
misreads), and per-process SM utilization samples
since the previous poll's newest sample (asked only of a device that runs a process:
the driver's answer is costly even when empty). Each PID is then placed, node-locally and
without the API server:

- ``<procfs>/<pid>/cgroup`` (cgroup v1 or v2; systemd or cgroupfs driver;
  containerd, CRI-O or cri-dockerd naming) gives the pod UID and container ID; a
  cgroup that is no pod's is a host process;
- the kubelet's pod-log directory ``<pod-logs>/<namespace>_<pod>_<uid>/<container>/``
  gives namespace and pod, and the container where the pod has one; for pods with
  several, the kubelet's links beside it, ``<pod-logs>/../containers/
  <pod>_<namespace>_<container>-<container ID>.log``, say which container has the ID.

So the collector needs the host's PID namespace (``hostPID: true``: NVML names PIDs in
the caller's namespace, so a host /proc mounted alone would not match them) and
/var/log/pods; see
``manifests/components/gpu-processes``. Devices are reported under their ``gpu_uuid``
or ``mig_uuid`` key; ``exporter.processes`` attributes the processes to holders.

Partial failure: a PID that exits between NVML's list and the cgroup read, a cgroup
path of a shape we do not know, a missing pod-log tree, a UID or container no pod-log
entry names -- each loses that process's attribution (or the process, when it has
exited) and counts one issue; the poll goes on.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from exporter.collectors.base import (
    Collector,
    CollectorContext,
    Registration,
    issue,
)
from exporter.collectors.nvml import (
    FUNCTION_NOT_FOUND,
    NOT_FOUND,
    NOT_SUPPORTED,
    NvmlError,
    NvmlHandle,
    NvmlProcess,
    NvmlProcessSample,
    NvmlSession,
    NvmlSource,
)
from exporter.model import (
    CollectorIssue,
    DeviceProcesses,
    GpuProcess,
    HardwareKey,
    KeyKind,
    ProcessOrigin,
    Readings,
)

__all__ = [
    "REGISTRATION",
    "GpuProcessesCollector",
    "PodLogIndex",
    "UnknownCgroupError",
    "name_origin",
    "parse_cgroup",
    "parse_container_log_name",
    "parse_pod_log_dir_name",
    "read_pod_logs",
]

# Error labels counted in podresources_collector_errors_total{collector="gpu_processes"}.
PROCESS_EXITED = "process_exited"
CGROUP_UNKNOWN = "cgroup_unknown"
CGROUP_UNREADABLE = "cgroup_unreadable"
POD_LOGS_MISSING = "pod_logs_missing"
POD_UNKNOWN = "pod_unknown"
CONTAINER_UNKNOWN = "container_unknown"

# --- /proc/<pid>/cgroup --------------------------------------------------------------

# The kubelet's --cgroup-root under the systemd driver prefixes each slice of a pod's
# path with its components ("-" inside one escaped as "_"): kind sets "/kubelet", so
# "kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort-pod<uid>.slice".
_ROOT = r"(?:[A-Za-z0-9_]+-)*"
# A pod's cgroup: cgroupfs "pod<uid>", systemd "[<root>-]kubepods[-<qos>]-pod<uid with
# _>.slice". Static pods' UIDs are 32-hex config hashes.
_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
# Then the container: cgroupfs "<id>"; systemd "cri-containerd-<id>.scope",
# "crio-<id>.scope", "docker-<id>.scope" (cri-dockerd). A container may make cgroups of
# its own below that (systemd in a pod, Slurm's job steps, docker-in-docker): a process
# in one is still the container's.
_POD_CONTAINER = re.compile(
    rf"(?:^|/)(?:{_ROOT}kubepods(?:-[a-z]+)?-)?pod(?P<uid>{_UID})(?:\.slice)?"
    r"/(?:(?:cri-containerd|crio|docker)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?(?:/|$)"
)
_KUBEPODS = re.compile(rf"(?:^|/){_ROOT}kubepods\b")


class UnknownCgroupError(ValueError):
    """A cgroup under kubepods whose pod or container we cannot read from its path."""


def parse_cgroup(text: str) -> ProcessOrigin:
    """Pod UID and container ID from ``/proc/<pid>/cgroup`` text; pod_uid None: a host
    process. Raises ``UnknownCgroupError`` for a kubepods path of an unknown shape."""
    paths: list[str] = []
    for line in text.splitlines():
        # v1: "4:memory:/kubepods/...", v2: "0::/kubepods.slice/..." (paths may hold ':').
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths.append(parts[2].strip())
    for path in paths:
        # A reader in its own cgroup namespace sees "/../../kubepods...": search, not match.
        match = _POD_CONTAINER.search(path)
        if match is not None:
            return ProcessOrigin(pod_uid=match["uid"].replace("_", "-"), container_id=match["id"])
    pod_paths = [p for p in paths if _KUBEPODS.search(p)]
    if pod_paths:
        raise UnknownCgroupError(pod_paths[0])
    return ProcessOrigin()


# --- the kubelet's pod-log tree ------------------------------------------------------

_POD_LOG_DIR = re.compile(r"^(?P<namespace>[a-z0-9-.]+)_(?P<pod>[a-z0-9-.]+)_(?P<uid>[0-9a-f-]+)$")
_CONTAINER_LOG = re.compile(
    r"^(?P<pod>[a-z0-9-.]+)_(?P<namespace>[a-z0-9-.]+)_(?P<container>[a-z0-9-]+)"
    r"-(?P<id>[0-9a-f]{64})\.log$"
)


def parse_pod_log_dir_name(name: str) -> tuple[str, str, str] | None:
    """``<namespace>_<pod>_<uid>`` -> (namespace, pod, uid); names cannot hold '_'."""
    match = _POD_LOG_DIR.match(name)
    return None if match is None else (match["namespace"], match["pod"], match["uid"])


def parse_container_log_name(name: str) -> tuple[str, str, str, str] | None:
    """``<pod>_<namespace>_<container>-<id>.log`` -> (namespace, pod, container, id)."""
    match = _CONTAINER_LOG.match(name)
    if match is None:
        return None
    return match["namespace"], match["pod"], match["container"], match["id"]


@dataclass(frozen=True, slots=True)
class PodLogIndex:
    """What the pod-log tree says: pods by UID, container names by container ID."""

    pods: Mapping[str, tuple[str, str, tuple[str, ...]]] = field(default_factory=dict)
    containers: Mapping[str, str] = field(default_factory=dict)


def read_pod_logs(root: Path) -> PodLogIndex:
    """Index ``root`` (``/var/log/pods``) and its sibling ``containers`` links.

    Raises ``FileNotFoundError`` when ``root`` is missing; the links are optional.
    """
    pods: dict[str, tuple[str, str, tuple[str, ...]]] = {}
    for entry in root.iterdir():
        parsed = parse_pod_log_dir_name(entry.name)
        if parsed is None:
            continue
        namespace, pod, uid = parsed
        try:
            containers = tuple(sorted(c.name for c in entry.iterdir() if c.is_dir()))
        except OSError:  # the pod went away while we looked
            continue
        pods[uid] = (namespace, pod, containers)
    by_id: dict[str, str] = {}
    try:
        links = list((root.parent / "containers").iterdir())
    except OSError:
        links = []
    for link in links:
        found = parse_container_log_name(link.name)
        if found is not None:
            by_id[found[3]] = found[2]
    return PodLogIndex(pods, by_id)


def name_origin(
    origin: ProcessOrigin, index: PodLogIndex
) -> tuple[ProcessOrigin, CollectorIssue | None]:
    """``origin`` with namespace, pod and container filled in where the index says."""
    if origin.pod_uid is None:
        return origin, None
    pod = index.pods.get(origin.pod_uid)
    if pod is None:
        return origin, issue(POD_UNKNOWN, f"no pod-log directory for pod UID {origin.pod_uid}")
    namespace, name, containers = pod
    container = index.containers.get(origin.container_id, "")
    if not container and len(containers) == 1:
        container = containers[0]
    named = ProcessOrigin(origin.pod_uid, origin.container_id, namespace, name, container)
    if not container:
        detail = f"container {origin.container_id[:12]} of pod {namespace}/{name} not named"
        return named, issue(CONTAINER_UNKNOWN, detail)
    return named, None


# --- the collector ---------------------------------------------------------------------


class _Exited(Exception):
    """The process ended after NVML listed it."""


def _read_command(procfs: Path, pid: int) -> str:
    """``/proc/<pid>/comm``, "" where it cannot be read (it is only a hint). The kernel
    keeps 15 bytes of the name (TASK_COMM_LEN): "nvidia-cuda-mps-server" reads
    "nvidia-cuda-mps", which attribution knows. Not cmdline: reading another process's
    argv takes its mmap lock, which a process stuck in the driver may hold."""
    try:
        return (procfs / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def _read_origin(procfs: Path, pid: int) -> ProcessOrigin:
    path = procfs / str(pid) / "cgroup"
    try:
        text = path.read_text()
    except (FileNotFoundError, ProcessLookupError) as error:
        raise _Exited(str(pid)) from error
    return parse_cgroup(text)


@dataclass(frozen=True, slots=True)
class _Listed:
    """One device's processes as NVML answered, before PIDs are placed."""

    key: HardwareKey
    processes: tuple[NvmlProcess, ...]
    sm_ratio: Mapping[int, float] | None  # None: the device gives no samples


def _mean_sm_ratio(samples: tuple[NvmlProcessSample, ...]) -> dict[int, float]:
    """Mean SM utilization per PID over the samples (one per NVML sampling period)."""
    by_pid: dict[int, list[int]] = defaultdict(list)
    for sample in samples:
        by_pid[sample.pid].append(sample.sm_percent)
    return {pid: sum(v) / len(v) / 100 for pid, v in by_pid.items()}


def _merge_lists(*lists: tuple[NvmlProcess, ...]) -> tuple[NvmlProcess, ...]:
    """A process in both the compute and graphics list is one process."""
    merged: dict[int, NvmlProcess] = {}
    for found in lists:
        for process in found:
            known = merged.get(process.pid)
            if known is None or (known.used_memory_bytes or 0) < (process.used_memory_bytes or 0):
                merged[process.pid] = process
    return tuple(merged[pid] for pid in sorted(merged))


class GpuProcessesCollector(Collector):
    """Processes on NVIDIA GPUs and MIG devices, placed in pods through /proc."""

    name = "gpu_processes"
    known_errors = (
        PROCESS_EXITED,
        CGROUP_UNKNOWN,
        CGROUP_UNREADABLE,
        POD_LOGS_MISSING,
        POD_UNKNOWN,
        CONTAINER_UNKNOWN,
    )

    def __init__(
        self,
        context: CollectorContext,
        *,
        source: NvmlSource | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(context)
        self._session = NvmlSession(source, clock=clock)
        self._source = self._session.source
        self._wall_clock = wall_clock  # the clock NVML stamps samples with
        # Per device UUID: the newest sample timestamp seen, so each poll asks NVML
        # for the samples since the previous one.
        self._last_sample_us: dict[str, int] = {}
        # Per device UUID: whether it gives per-process samples, as its last answer said
        # (False: NOT_SUPPORTED); and the devices that ran a process at the last poll.
        self._gives_samples: dict[str, bool] = {}
        self._busy: set[str] = set()
        # Per device UUID kept above: the index of the GPU it was listed under, so that a
        # GPU that fails keeps its own devices' state, not every device's.
        self._gpu_of: dict[str, int] = {}
        self._issues: list[CollectorIssue] = []

    def collect(self) -> Readings:
        with self._session.lock:
            self._issues = []
            count = self._session.device_count()
            listed: list[_Listed] = []
            failed: set[int] = set()  # GPUs with a failure this poll
            for index in range(count):
                before = len(self._issues)
                found = self._list_gpu(index)
                if len(self._issues) > before:
                    failed.add(index)
                for entry in found:
                    self._gpu_of[entry.key.value] = index
                listed.extend(found)
            self._forget_devices_not_in(listed, failed)
            return Readings(gpu_processes=self._place(listed), issues=tuple(self._issues))

    def close(self) -> None:
        self._session.close()

    def _forget_devices_not_in(self, listed: list[_Listed], failed: set[int]) -> None:
        """Drop the state of devices this poll did not list: they are gone (each MIG
        reconfiguration names its MIG devices anew). The devices of a GPU that failed
        somewhere this poll keep theirs, for the device that failed; not the others: a
        GPU failing every poll (fallen off the bus) would keep every MIG device made
        and destroyed meanwhile for good."""
        kept = {entry.key.value for entry in listed}
        if failed:
            kept.update(uuid for uuid, index in self._gpu_of.items() if index in failed)
        self._busy &= kept
        for by_device in (self._last_sample_us, self._gives_samples, self._gpu_of):
            for uuid in by_device.keys() - kept:
                del by_device[uuid]

    def _count(self, error: NvmlError, call: str) -> None:
        self._issues.append(issue(error.error_name, f"{call}: NVML {error.error_name}"))

    def _list_gpu(self, index: int) -> list[_Listed]:
        source = self._source
        try:
            handle = self._session.device_handle(index)
            if handle is None:
                return []  # refused before: reported once
            uuid = source.uuid(handle)
            try:
                mig = source.mig_enabled(handle)
            except NvmlError as error:
                if error.error_name != NOT_SUPPORTED:
                    raise
                mig = False
            if not mig:
                found = self._list_device(HardwareKey(KeyKind.GPU_UUID, uuid), handle)
                return [] if found is None else [found]
            # On a MIG GPU each MIG device lists its own processes; the parent lists them
            # all again, so it is not asked.
            slots = source.max_mig_device_count(handle)
        except NvmlError as error:
            self._count(error, f"GPU {index}")
            return []
        listed: list[_Listed] = []
        for slot in range(slots):
            # One MIG device NVML cannot name costs its own processes, not its siblings'.
            try:
                mig_handle = source.mig_device_handle(handle, slot)
                key = HardwareKey(KeyKind.MIG_UUID, source.uuid(mig_handle))
            except NvmlError as error:
                if error.error_name not in (NOT_FOUND, NOT_SUPPORTED):  # else an empty slot
                    self._count(error, f"GPU {index} MIG slot {slot}")
                continue
            found = self._list_device(key, mig_handle)
            if found is not None:
                listed.append(found)
        return listed

    def _list_device(self, key: HardwareKey, handle: NvmlHandle) -> _Listed | None:
        """The device's processes; None when NVML cannot list them (counted)."""
        source = self._source
        lists: list[tuple[NvmlProcess, ...]] = []
        for read in (source.compute_processes, source.graphics_processes, source.mps_processes):
            try:
                lists.append(read(handle))
            except NvmlError as error:
                # FUNCTION_NOT_FOUND: a driver without that list (MPS before r470).
                if error.error_name in (NOT_SUPPORTED, FUNCTION_NOT_FOUND):
                    continue
                # Half a list would make the missing half's holders look idle.
                self._count(error, f"{read.__name__} {key.value}")
                return None
        if not lists:
            return None  # neither list is supported: no figures, not a fault
        processes = _merge_lists(*lists)
        was_busy = key.value in self._busy
        if processes:
            self._busy.add(key.value)
        else:
            self._busy.discard(key.value)
            if not was_busy:
                # Nothing to give samples to, and nothing left to step past. Not asked: an
                # H100's driver takes 2-3 ms of CPU to answer, even with nothing to report
                # (measured, driver 580), per device and poll.
                return _Listed(key, (), {} if self._samples_given(key) else None)
        # Asked also at the first idle poll after a busy one, so that the next busy
        # poll's samples start after it: a PID seen again (a new CUDA context of the
        # same process) must not be averaged with samples from before the idle stretch.
        return _Listed(key, processes, self._sm_ratio(key, handle))

    def _samples_given(self, key: HardwareKey) -> bool:
        """Whether the device gives per-process samples, as it last answered; a MIG
        device never asked does not (nvml.h: not supported on MIG-enabled GPUs)."""
        return self._gives_samples.get(key.value, key.kind is not KeyKind.MIG_UUID)

    def _sm_ratio(self, key: HardwareKey, handle: NvmlHandle) -> Mapping[int, float] | None:
        """Mean SM utilization per PID of the samples since the last poll's newest;
        None where the device gives none."""
        since = self._last_sample_us.get(key.value, 0)
        # NVML stamps samples with the wall clock, in unix microseconds (an H200 on driver
        # 580: within 0.2 s of time()). A newest sample seen in the future means NTP
        # stepped the clock back: asked for samples after it, NVML would give none until
        # the clock caught up (an hour for an hour's step). Then all it holds are asked.
        if since > self._wall_clock() * 1e6:
            since = 0
        try:
            samples = self._source.process_utilization(handle, since)
        except NvmlError as error:
            if error.error_name == NOT_SUPPORTED:
                self._gives_samples[key.value] = False
            else:
                self._count(error, f"process_utilization {key.value}")
            return None
        self._gives_samples[key.value] = True
        # Samples stamped after now (read after NVML answered, so none just taken is
        # among them) were taken before the clock stepped back: counted already, and
        # never the newest seen (which would hide the later ones again).
        now_us = self._wall_clock() * 1e6
        samples = tuple(s for s in samples if s.timestamp_us <= now_us)
        if samples:
            self._last_sample_us[key.value] = max(since, *(s.timestamp_us for s in samples))
        return _mean_sm_ratio(tuple(s for s in samples if s.timestamp_us > since))

    def _place(self, listed: list[_Listed]) -> tuple[DeviceProcesses, ...]:
        """Each listed PID with its pod and container; exited PIDs drop out."""
        procfs = self.context.procfs
        origins: dict[int, ProcessOrigin | None] = {}
        for pid in sorted({p.pid for entry in listed for p in entry.processes}):
            try:
                origins[pid] = _read_origin(procfs, pid)
            except _Exited:
                origins[pid] = None
                # Routine (a short CUDA process): counted, and one detail for all PIDs,
                # so that the runner logs it once, not once a process.
                detail = (
                    f"{procfs / '<pid>' / 'cgroup'}: gone, the process exited after NVML listed it"
                )
                self._issues.append(issue(PROCESS_EXITED, detail))
            except UnknownCgroupError as error:
                origins[pid] = ProcessOrigin(pod_uid="")
                detail = f"{procfs / str(pid) / 'cgroup'}: no pod or container in {error}"
                self._issues.append(issue(CGROUP_UNKNOWN, detail))
            except OSError as error:
                origins[pid] = ProcessOrigin(pod_uid="")
                detail = f"{procfs / str(pid) / 'cgroup'}: {error.strerror or error}"
                self._issues.append(issue(CGROUP_UNREADABLE, detail))
        origins = self._name(origins)
        commands = {pid: _read_command(procfs, pid) for pid, o in origins.items() if o}
        devices = []
        for entry in listed:
            processes = []
            for process in entry.processes:
                origin = origins.get(process.pid)
                if origin is None:
                    continue  # exited: nothing of it is worth showing
                ratio = None if entry.sm_ratio is None else entry.sm_ratio.get(process.pid, 0.0)
                processes.append(
                    GpuProcess(
                        process.pid,
                        origin,
                        process.used_memory_bytes,
                        ratio,
                        commands.get(process.pid, ""),
                    )
                )
            devices.append(DeviceProcesses(entry.key, tuple(processes), entry.sm_ratio is not None))
        return tuple(devices)

    def _name(self, origins: dict[int, ProcessOrigin | None]) -> dict[int, ProcessOrigin | None]:
        """Namespace, pod and container from the pod-log tree, read once a poll."""
        if not any(o is not None and o.pod_uid for o in origins.values()):
            return origins
        root = self.context.pod_logs
        try:
            index = read_pod_logs(root)
        except OSError as error:
            detail = f"pod-log directory {root}: {error.strerror or error}"
            self._issues.append(issue(POD_LOGS_MISSING, detail))
            return origins
        named: dict[int, ProcessOrigin | None] = {}
        for pid, origin in origins.items():
            if origin is None or not origin.pod_uid:
                named[pid] = origin
                continue
            named[pid], problem = name_origin(origin, index)
            if problem is not None:
                self._issues.append(problem)
        return named


REGISTRATION = Registration(
    "gpu_processes",
    "processes on each NVIDIA GPU and MIG device and the pod they belong to; needs the "
    "host's PID namespace (hostPID: true) and --path.pod-logs",
    GpuProcessesCollector,
    enabled_by_default=False,
)
