"""The loop: every interval, ask the kubelet and the collectors, join, publish.

One poll is one ``gather``: ``List``, ``GetAllocatableResources`` and the collectors
(in turn, on one worker thread: ``exporter.collectors.runner``) at once, so a slow
collector never delays kubelet data and the worst case is the larger of the two
timeouts, not their sum (plus the runner's ``HANDOVER_S`` for each further collector
that hangs in the same poll). Converting replies, the join and the allocation diff
run off the event loop, so scrapes are not held up behind them. The poll does not
render the /metrics page: the first scrape of a snapshot does (``SnapshotStore``).

Most polls change nothing the kubelet says: replies with the same content (in whatever
order: the kubelet answers in Go map order) come back from the client as the very
objects of the last poll, and then join and diff are skipped; the last snapshot's
views are kept and only this poll's readings are looked up beside them
(``refresh_readings``); the snapshot's allocations number stays, so its render re-uses
the last page's allocation families whole.

One poll makes at most one ``List`` and one ``GetAllocatableResources`` call, whatever
the scrape load: HTTP handlers only read what was published last. When the kubelet
fails, the last good kubelet data keeps being served with its original timestamp (so
its age shows) and ``podresources_kubelet_up`` drops to 0. The CPU-to-NUMA map and the
DRA drivers' state are likewise kept from the last poll that read them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import structlog

from exporter.collectors.dra import CHECKPOINT_SOURCE
from exporter.collectors.runner import CollectorRunner
from exporter.join import (
    AllocationChange,
    JoinCache,
    diff_allocations,
    holder_count,
    join_snapshot,
    refresh_readings,
)
from exporter.kubelet.client import METHOD_V1ALPHA1_LIST, KubeletClient
from exporter.kubelet.errors import KubeletError, MethodUnavailable
from exporter.kubelet.stats import KubeletRequestStats
from exporter.memory import trim
from exporter.model import (
    AllocatableResources,
    CollectorRun,
    DraState,
    KubeletStatus,
    PodResources,
    Snapshot,
)
from exporter.outage import OutageLog, RepeatedFailure
from exporter.store import Published, SnapshotStore

__all__ = ["Poller"]

log = structlog.get_logger(__name__)

GET_PROBE_INTERVAL_S = 300.0
# From this poll interval up, the kubelet channel is closed after each poll's calls.
# While a channel is open gRPC's threads cost 0.6-1.6 ms of CPU a second; opening one
# again costs the next poll 1.5-3.5 ms (two machines, docs/benchmarks.md). Measured per
# poll and the idle time after it (250 pods): a wash at 3 s, 43.1 -> 29.9 ms at 10 s.
RELEASE_CHANNEL_MIN_INTERVAL_S = 5.0
# Once a small reply replaces kubelet data that came in a reply of LARGE_REPLY_BYTES or
# more, the heap is trimmed (glibc malloc_trim) on TRIM_POLLS polls: that one (the model
# and caches are freed within it), then the polls after the next scrape has rendered a
# newer page (the large data's page is freed then, however late the scrape). glibc keeps
# most of the freed memory resident otherwise, 17-140 MiB after a 15 MiB reply, varying
# run to run. Not before: while later replies fail (refused as too large, or the kubelet
# gone) the large data is still served as the last good. A trim costs ~2.5 ms, so it is
# not done every poll.
LARGE_REPLY_BYTES = 512 * 1024
TRIM_POLLS = 6
# Polls in a row that must find DRA claims prepared this boot and none in List before
# dra_claims_not_listed is logged: the last claim's pod may leave List a poll before
# the kubelet unprepares its claim and the driver drops it from its checkpoint.
UNLISTED_CLAIMS_POLLS = 3


@dataclass(frozen=True, slots=True)
class _KubeletData:
    pods: tuple[PodResources, ...]
    allocatable: AllocatableResources
    collected_at: float | None  # None until the kubelet first answers
    # The monotonic clock at collected_at: ages are measured on it, as a step of the
    # wall clock (NTP, a corrected RTC) must not make data stale or fresh.
    collected_monotonic: float | None
    # False where the kubelet has given no inventory (GetAllocatableResources missing or
    # disabled, or failing before it ever answered): the empty one stands in, and no
    # device may be called "no longer offered" for its absence from it.
    allocatable_known: bool = True


# One object each, so that a kubelet without an inventory (or without data yet) reads as
# unchanged from poll to poll: the join is skipped on identity.
_NO_INVENTORY = AllocatableResources()
_NO_DATA = _KubeletData((), _NO_INVENTORY, None, None, False)


def log_allocation_changes(
    changes: Iterable[AllocationChange], logger: structlog.typing.FilteringBoundLogger = log
) -> None:
    """One ``allocation_changed`` event for each container whose devices or CPUs changed."""
    for change in changes:
        logger.info(
            "allocation_changed",
            namespace=change.owner.namespace,
            pod=change.owner.pod,
            container=change.owner.container,
            devices_added=list(change.devices_added),
            devices_removed=list(change.devices_removed),
            cpus_added=list(change.cpus_added),
            cpus_removed=list(change.cpus_removed),
        )


class Poller:
    def __init__(
        self,
        *,
        client: KubeletClient,
        runner: CollectorRunner,
        store: SnapshotStore,
        node: str,
        interval_s: float,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._runner = runner
        self._store = store
        self._node = node
        self._interval_s = interval_s
        self._clock = clock
        self._monotonic = monotonic
        self._last_good: _KubeletData | None = None
        self._answered = False  # a List answer has been published since the start
        self._last_error: str | None = None
        self._poll_failure = RepeatedFailure("poll")
        self._cpu_numa: Mapping[int, int] = {}
        self._dra = DraState()
        self._failed_collectors: dict[str, str] = {}
        self._get_probed_at: float | None = None
        # The published snapshot and what it was joined from: (pods, allocatable, CPU map,
        # DRA state). Set once published: a poll that fails after its join publishes
        # nothing, and its inputs must not pass for the published snapshot's.
        self._published_from: tuple[Published, tuple[object, ...]] | None = None
        self._allocations = 0  # the published snapshots' allocations number
        self._join_cache = JoinCache()  # re-used for pods the kubelet reports unchanged
        self._outage = OutageLog("kubelet")
        self._large_data_held = False  # the last good kubelet data came in a large reply
        self._trims_due = 0  # polls left that trim the heap after large data was let go
        self._let_go_at = 0  # the allocations number of the first snapshot without it
        self._unlisted_polls = 0  # polls in a row with prepared DRA claims List leaves out
        self._unlisted_logged = False  # said so; again only after List named a claim

    async def run(self) -> None:
        """Poll every interval until cancelled; a poll that fails is logged, never fatal."""
        while True:
            started = time.monotonic()
            await self.poll_reporting_failure()
            elapsed = time.monotonic() - started
            await asyncio.sleep(max(0.0, self._interval_s - elapsed))

    async def poll_reporting_failure(self) -> None:
        """One poll; one that raises (a bug) is logged as ``poll_failed``, never fatal:
        the last snapshot stays published. The traceback comes with the first failure;
        while later polls fail with the same error, each logs one line naming it (as
        ``render_failed`` does), and the first poll that works again says so."""
        try:
            await self.poll_once()
        except Exception as error:
            self._poll_failure.failed(error)
            return
        self._poll_failure.succeeded()

    async def poll_once(self) -> Published:
        started = time.perf_counter()
        (kubelet_data, kubelet_status), runs = await asyncio.gather(
            self._poll_kubelet(), self._runner.run_all()
        )
        readings_at = time.time()  # when the collectors finished, not after the join
        if self._interval_s >= RELEASE_CHANNEL_MIN_INTERVAL_S:
            await self._client.release_channel()
        self._keep_node_state(runs)
        self._note_unlisted_claims(kubelet_data.pods, listed=kubelet_status.up)
        # The request stats are copied here, on the loop, where the client records them;
        # the join and the allocation diff are CPU-bound and run off the loop.
        # Keyed on the data, not on this poll's List: a first answer whose poll failed
        # is published later from the last good data, with the kubelet perhaps gone.
        first_answer = kubelet_data.collected_at is not None and not self._answered
        snapshot, changes, joined_from = await asyncio.to_thread(
            self._join,
            kubelet_data,
            kubelet_status,
            runs,
            started,
            readings_at,
            self._client.stats(),
            first_answer,
        )
        self._note_judged_failures(snapshot.collectors)
        log_allocation_changes(changes)
        if first_answer:
            self._answered = True
            log.info(
                "allocations_loaded",
                pods=len(snapshot.pods),
                holders=holder_count(snapshot),
                # v1alpha1 (kubelets before 1.20) gives device IDs only
                api="v1alpha1" if self._client.list_method == METHOD_V1ALPHA1_LIST else "v1",
            )
        published = Published(snapshot, allocations=self._allocations)
        self._store.current = published
        self._published_from = (published, joined_from)
        await self._trim_after_large_data(replaced=kubelet_status.up)
        return published

    async def _trim_after_large_data(self, *, replaced: bool) -> None:
        """Trim the heap on the polls after large kubelet data was let go; ``replaced``:
        this poll's replies became the last good data."""
        if self._client.take_largest_reply_bytes() >= LARGE_REPLY_BYTES:
            self._large_data_held = True
            self._trims_due = 0  # not while large replies keep coming
        elif replaced and self._large_data_held:
            self._large_data_held = False
            self._trims_due = TRIM_POLLS
            self._let_go_at = self._allocations
        if not self._trims_due:
            return
        # The page rendered from the large data is let go only when a scrape renders a
        # newer one: after the first trim (the model and caches), the rest wait for it.
        if self._trims_due < TRIM_POLLS and self._store.holds_page_before(self._let_go_at):
            return
        self._trims_due -= 1
        await asyncio.to_thread(trim)

    def _keep_node_state(self, runs: tuple[CollectorRun, ...]) -> None:
        """The CPU-to-NUMA map and DRA state from runs that read them, else the last."""
        for run in runs:
            if not run.success or run.unavailable is not None:
                continue
            if run.name == "topology":
                cpu_numa = dict(run.readings.cpu_numa)
                if cpu_numa != self._cpu_numa:  # the same object while unchanged
                    self._cpu_numa = cpu_numa
            elif run.name == "dra" and run.readings.dra not in (None, self._dra):
                self._dra = run.readings.dra

    def _note_unlisted_claims(self, pods: tuple[PodResources, ...], *, listed: bool) -> None:
        """Log once when a driver's checkpoint holds claims of this boot but no container
        in List names a DRA claim: kubelets before 1.34 leave dynamic_resources out unless
        the KubeletPodResourcesDynamicResources gate is on, and those devices would show
        as nobody's without a word. The checkpoint alone is boot-checked; it is tried
        first, so nodes without one never look through the pods."""
        if not listed:
            return  # no List this poll: nothing to compare
        prepared = sum(1 for d in self._dra.devices if d.source == CHECKPOINT_SOURCE)
        if not prepared:
            self._unlisted_polls = 0
            return
        if any(c.dynamic_resources for p in pods for c in p.containers):
            self._unlisted_polls = 0
            self._unlisted_logged = False  # List shows claims: a later lapse is news
            return
        self._unlisted_polls += 1
        if self._unlisted_polls >= UNLISTED_CLAIMS_POLLS and not self._unlisted_logged:
            self._unlisted_logged = True
            log.warning("dra_claims_not_listed", prepared_devices=prepared, listed_pods=len(pods))

    def _note_judged_failures(self, runs: tuple[CollectorRun, ...]) -> None:
        # The runner logs what it saw; a source judged missing only by the join (NVML
        # absent on a node with NVIDIA devices) is logged here, once per change.
        for run in runs:
            judged = run.error if run.unavailable is not None and not run.success else None
            if judged == self._failed_collectors.get(run.name):
                continue
            if judged is None:
                self._failed_collectors.pop(run.name, None)
            else:
                self._failed_collectors[run.name] = judged
                log.warning("collector_source_missing", collector=run.name, error=judged)

    def _join(
        self,
        kubelet_data: _KubeletData,
        kubelet_status: KubeletStatus,
        runs: tuple[CollectorRun, ...],
        started: float,
        readings_at: float,
        request_stats: KubeletRequestStats,
        first_answer: bool,
    ) -> tuple[Snapshot, tuple[AllocationChange, ...], tuple[object, ...]]:
        """Join (or, when nothing the join reads changed, only refresh the readings of
        the last snapshot), and tell what changed hands (nothing at the kubelet's
        ``first_answer``) and what it was joined from."""
        previous = self._store.current
        joined_from = (
            kubelet_data.pods,
            kubelet_data.allocatable,
            kubelet_data.allocatable_known,
            self._cpu_numa,
            self._dra,
        )
        # Identity, not equality: the client hands back the same objects for replies
        # of the same content, and the CPU map and DRA state are kept while unchanged.
        last = self._published_from
        # None: a join (the inputs changed, or refresh_readings saw a DRA NUMA node move)
        refreshed = None
        if (
            previous is not None
            and last is not None
            and last[0] is previous
            and all(a is b for a, b in zip(joined_from, last[1], strict=True))
        ):
            refreshed = refresh_readings(
                previous.snapshot,
                collected_at=kubelet_data.collected_at,
                kubelet=kubelet_status,
                collector_runs=runs,
            )
        if refreshed is not None:
            snapshot = refreshed
        else:
            self._allocations += 1
            snapshot = join_snapshot(
                node=self._node,
                collected_at=kubelet_data.collected_at,
                kubelet=kubelet_status,
                pods=kubelet_data.pods,
                allocatable=kubelet_data.allocatable,
                allocatable_known=kubelet_data.allocatable_known,
                cpu_numa=self._cpu_numa,
                dra=self._dra,
                collector_runs=runs,
                cache=self._join_cache,
            )
        snapshot = replace(
            snapshot,
            poll_duration_seconds=time.perf_counter() - started,
            poll_interval_seconds=self._interval_s,
            kubelet_requests=request_stats,
            readings_at=readings_at,
            collected_monotonic=kubelet_data.collected_monotonic,
        )
        if refreshed is not None:
            return snapshot, (), joined_from
        if first_answer or previous is None:
            # The kubelet's first answer (at start, or once it first came up): what it
            # holds is loaded, not changed hands (poll_once logs allocations_loaded).
            return snapshot, (), joined_from
        changes = diff_allocations(previous.snapshot, snapshot)
        return snapshot, changes, joined_from

    async def _probe_get(self) -> None:
        # Get serves only /debug look-ups, so its availability is probed rarely: at the
        # first poll and every GET_PROBE_INTERVAL_S (a kubelet upgrade may add it).
        now = time.monotonic()
        if self._get_probed_at is not None and now - self._get_probed_at < GET_PROBE_INTERVAL_S:
            return
        self._get_probed_at = now
        try:
            await self._client.probe_get()
        except KubeletError as error:
            log.debug("get_probe_failed", error=str(error))

    async def _poll_kubelet(self) -> tuple[_KubeletData, KubeletStatus]:
        pods_result, allocatable_result, _ = await asyncio.gather(
            self._client.list_pods(),
            self._client.get_allocatable(),
            self._probe_get(),
            return_exceptions=True,
        )
        now, now_monotonic = self._clock(), self._monotonic()
        previous = self._last_good
        error: KubeletError | None = None
        if isinstance(pods_result, BaseException):
            if not isinstance(pods_result, KubeletError):
                raise pods_result
            error = pods_result
        allocatable_known = True
        if isinstance(allocatable_result, MethodUnavailable):
            allocatable = _NO_INVENTORY  # an old or restricted kubelet: no inventory
            allocatable_known = False
        elif isinstance(allocatable_result, BaseException):
            if not isinstance(allocatable_result, KubeletError):
                raise allocatable_result
            allocatable = previous.allocatable if previous else _NO_INVENTORY
            allocatable_known = previous.allocatable_known if previous else False
            error = error or allocatable_result
        else:
            allocatable = allocatable_result

        if isinstance(pods_result, BaseException):
            # Until a List has answered, no inventory either: allocatable counts beside
            # no pods would say every device and CPU of the node is free.
            data = previous or _NO_DATA
        else:
            data = _KubeletData(pods_result, allocatable, now, now_monotonic, allocatable_known)
            self._last_good = data
        listed = not isinstance(pods_result, BaseException)
        self._note_error(error, served_from=data.collected_monotonic, up=listed)
        status = KubeletStatus(
            up=listed,
            socket=self._client.socket_path,
            api=tuple(sorted(self._client.api_status().items())),
            last_error=self._last_error,
        )
        return data, status

    def _note_error(
        self, error: KubeletError | None, *, served_from: float | None, up: bool
    ) -> None:
        """``served_from``: the monotonic clock when the data served was collected."""
        socket = self._client.socket_path
        if error is None:
            if self._client.take_went_away():
                self._get_probed_at = None  # a kubelet back may be an upgraded one
            self._outage.succeeded(socket=socket)
            self._last_error = None
            return
        age = None if served_from is None else round(self._monotonic() - served_from, 1)
        # Keyed on up too: List failing beside a failing GetAllocatableResources (or
        # answering again) flips kubelet_up and /readyz, and says so in the log.
        self._outage.failed(
            kind=type(error).__name__,
            error=str(error),
            key=up,
            socket=socket,
            kubelet_up=up,
            serving_snapshot_age_seconds=age,
        )
        self._last_error = str(error)
