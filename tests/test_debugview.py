"""/debug/allocations views: encoded once with the age spliced in, hostile text made safe."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from exporter.collectors.gpu_metrics import (
    GPU_DRAM_ACTIVE,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_PIPE_ACTIVE,
    GPU_POWER,
    GPU_SM_ACTIVE,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
)
from exporter.collectors.netdev import NET_RECEIVE_BYTES
from exporter.collectors.pci import PCIE_LINK_WIDTH
from exporter.debugview import (
    MAX_CELL_CHARS,
    Filters,
    encode_json,
    encode_text,
    render_json,
    render_text,
)
from exporter.join import join_snapshot
from exporter.model import (
    AllocatableResources,
    ClaimDevice,
    CollectorRun,
    ContainerResources,
    DeviceGroup,
    DeviceIdentity,
    DeviceReading,
    DraDevice,
    DraState,
    DynamicResource,
    HardwareKey,
    KeyKind,
    KubeletStatus,
    PodResources,
    Readings,
    Sample,
    Snapshot,
)

COLLECTED_AT = 1_700_000_000.0


def snapshot(
    *device_ids: str, name: str = "trainer-0", collected_at: float = COLLECTED_AT
) -> Snapshot:
    pod = PodResources(
        namespace="ml",
        name="trainer-0",
        containers=(
            ContainerResources(
                name="main",
                devices=(DeviceGroup(resource="example.com/dev", device_ids=device_ids),),
            ),
        ),
    )
    return join_snapshot(
        node="node-1",
        collected_at=collected_at,
        kubelet=KubeletStatus(up=True, socket="/s", api=(), last_error=None),
        pods=(pod,),
        allocatable=AllocatableResources(),
        cpu_numa={},
        collector_runs=(),
    )


class TestEncodedJson:
    @pytest.mark.parametrize("filters", [Filters(), Filters(pod="trainer-0"), Filters(pod="x")])
    def test_same_as_rendering_per_request(self, filters: Filters) -> None:
        """Encoded once and spliced, the body is what rendering at that moment would give."""
        view = snapshot("dev-0", "dev-1")
        now = COLLECTED_AT + 12.3456
        encoded = encode_json(view, filters=filters)
        assert render_json(view, filters=filters, now=now) == json.loads(
            b"".join(encoded.parts(now - COLLECTED_AT))
        )

    def test_age_moves_with_the_clock(self) -> None:
        """One encoding answers later requests with their own age."""
        encoded = encode_json(snapshot("dev-0"), filters=Filters())
        ages = [json.loads(b"".join(encoded.parts(s)))["age_seconds"] for s in (1, 60)]
        assert [1.0, 60.0] == ages

    def test_hostile_ids_cannot_move_the_age(self) -> None:
        """A device ID spelling the placeholder or the key stays data; the age lands once."""
        hostile = ('"age_seconds": "\x00age\x00"', "\x00age\x00", "\\", '"\n')
        view = snapshot(*hostile)
        body = json.loads(b"".join(encode_json(view, filters=Filters()).parts(2)))
        devices = body["pods"][0]["containers"][0]["devices"]
        assert (2.0, sorted(hostile)) == (
            body["age_seconds"],
            sorted(d["device_id"] for d in devices),
        )

    def test_no_kubelet_data_has_no_age(self) -> None:
        """Before the kubelet ever answered there is no age to splice: null."""
        view = snapshot("dev-0", collected_at=0.0)
        body = json.loads(b"".join(encode_json(view, filters=Filters()).parts(0.0)))
        assert (None, None) == (body["age_seconds"], body["collected_at"])

    @pytest.mark.parametrize(
        ("collected_at", "up", "expected"),
        [
            (COLLECTED_AT, True, "ok"),
            (COLLECTED_AT, False, "stale: kubelet down"),
            (0.0, False, "no kubelet data yet"),
        ],
    )
    def test_status_says_whether_the_pods_are_current(
        self, collected_at: float, up: bool, expected: str
    ) -> None:
        """``jq .status`` is "ok" only while the kubelet answers: the last good pods
        served while it is down are stale, said in the word on-call reads first."""
        view = snapshot("dev-0", collected_at=collected_at)
        view = replace(view, kubelet=replace(view.kubelet, up=up, last_error="List: gone"))
        assert expected == render_json(view, filters=Filters(), now=COLLECTED_AT + 5)["status"]


class TestSharedPool:
    def test_the_pool_is_asked_for_by_the_name_the_table_shows(self) -> None:
        """A pod's shared pool (container "") is "(pod pool)" in the table, and
        ?container=(pod pool) selects it: the row on-call sees can be filtered to."""
        pod = PodResources("ns", "p", (ContainerResources("main", cpu_ids=(2,)),), cpu_ids=(2, 3))
        view = join_snapshot(
            node="n",
            collected_at=COLLECTED_AT,
            kubelet=KubeletStatus(up=True, socket="/s", api=()),
            pods=(pod,),
            allocatable=AllocatableResources(cpu_ids=(2, 3)),
            cpu_numa={},
        )
        for asked in ("(pod pool)", ""):  # the table's name, or the raw one JSON shows
            filters = Filters.from_query({"container": asked})
            body = render_json(view, filters=filters, now=COLLECTED_AT)
            text = render_text(view, filters=filters, now=COLLECTED_AT)
            assert ([""], [[3]]) == (
                [c["name"] for c in body["pods"][0]["containers"]],
                [c["cpu_ids"] for c in body["pods"][0]["containers"]],
            )
            assert "(pod pool)" in text.splitlines()[2]


class TestEncodedText:
    def test_same_as_rendering_per_request(self) -> None:
        """For ordinary names the encoded table is the rendered one."""
        view = snapshot("dev-0", "dev-1")
        now = COLLECTED_AT + 3.21
        assert render_text(view, filters=Filters(), now=now).encode() == b"".join(
            encode_text(view, filters=Filters()).parts(now - COLLECTED_AT)
        )

    def test_newline_in_an_id_cannot_inject_a_row(self) -> None:
        """Control characters are escaped: one device, one line, whatever its ID holds."""
        view = snapshot("dev-0\nml  fake-pod  main  x  y", "tab\there\x1b[31m", "back\\slash")
        text = render_text(view, filters=Filters(), now=COLLECTED_AT)
        lines = text.splitlines()
        assert 2 + 3 == len(lines)  # header line, column heads, three devices
        assert all(char.isprintable() for line in lines for char in line)
        assert (True, True, True) == (
            "dev-0\\nml  fake-pod  main  x  y" in lines[2],
            "tab\\there\\x1b[31m" in lines[3],
            "back\\\\slash" in lines[4],
        )

    def test_long_cells_are_cut(self) -> None:
        """A 5,000-character ID is cut to the cap, so one ID cannot widen every row."""
        view = snapshot("d" * 5000, "short")
        lines = render_text(view, filters=Filters(), now=COLLECTED_AT).splitlines()
        assert max(len(line) for line in lines) < 8 * (MAX_CELL_CHARS + 2)
        assert ("d" * 31 + "…" + "d" * 32) in lines[2] + lines[3]

    def test_a_cut_cell_is_as_wide_as_the_cap(self) -> None:
        """An ID one character over the cap is cut to exactly the cap, ellipsis included,
        its middle left out; one at the cap is left whole."""
        over, at = "h" * 32 + "o" + "t" * 32, "a" * MAX_CELL_CHARS
        text = render_text(snapshot(over, at), filters=Filters(), now=COLLECTED_AT)
        cells = {cell for line in text.splitlines()[2:] for cell in line.split()}
        assert {"h" * 31 + "…" + "t" * 32, at} <= cells

    def test_the_header_says_the_kubelet_is_down_and_why(self) -> None:
        """The table's first line, the one on-call reads, says the pods below are the last
        good ones of a kubelet that is down, and its error."""
        view = snapshot("dev-0")
        view = replace(view, kubelet=replace(view.kubelet, up=False, last_error="List: gone"))
        text = render_text(view, filters=Filters(), now=COLLECTED_AT + 5)
        assert text.splitlines()[0] == "# node node-1, data age 5.0s, kubelet DOWN (List: gone)"

    def test_utf8_names_stay_readable(self) -> None:
        """Printable non-ASCII text is shown as it is, not escaped."""
        view = replace(snapshot("gpu-ü-0"), node="nœud-1")
        text = render_text(view, filters=Filters(), now=COLLECTED_AT)
        assert ("gpu-ü-0" in text, text.startswith("# node nœud-1,")) == (True, True)


class TestDeviceFilter:
    @pytest.mark.parametrize(
        ("asked", "found"),
        [("GPU-a::1", True), ("GPU-a", True), ("GPU-a::2", False), ("GPU-b", False)],
    )
    def test_a_replica_is_found_by_its_id_or_its_physical_device(
        self, asked: str, found: bool
    ) -> None:
        """Telemetry names a replica's GPU ("GPU-a"): ?device= with that name finds the
        holder, as ?device= with the replica's own ID does."""
        body = render_json(snapshot("GPU-a::1"), filters=Filters(device=asked), now=COLLECTED_AT)
        assert bool(body["pods"]) is found


class TestClaimDevices:
    def test_resource_and_device_filters_find_a_claims_device(self) -> None:
        """?resource= (a DRA device's driver) and ?device= (its name) keep the container
        holding it through a claim, as they do a device plugin's."""
        claim = DynamicResource("gpus", "ml", (ClaimDevice("gpu.example.com", "node-1", "gpu-0"),))
        pod = PodResources(
            "ml", "trainer-0", (ContainerResources("main", dynamic_resources=(claim,)),)
        )
        view = join_snapshot(
            node="n",
            collected_at=COLLECTED_AT,
            kubelet=KubeletStatus(up=True, socket="/s", api=()),
            pods=(pod,),
            allocatable=AllocatableResources(),
            cpu_numa={},
        )
        for filters in (
            Filters(resource="gpu.example.com"),
            Filters(device="gpu-0"),
            Filters(resource="other.example.com"),
        ):
            body = render_json(view, filters=filters, now=COLLECTED_AT)
            text = render_text(view, filters=filters, now=COLLECTED_AT)
            found = (len(body["pods"]), "gpu-0" in text)
            assert found == ((0, False) if filters.resource == "other.example.com" else (1, True))


def test_two_claim_devices_of_one_name_in_two_pools_each_show_their_own_hardware() -> None:
    """A DRA device name is unique within its pool only: /debug/allocations looks a
    claim device's hardware up with its pool (without it, both devices showed the
    hardware of the last one)."""
    driver = "gpu.example.com"
    pod = PodResources(
        namespace="ml",
        name="trainer-0",
        containers=(
            ContainerResources(
                name="main",
                dynamic_resources=(
                    DynamicResource(
                        claim_name="gpus",
                        claim_namespace="ml",
                        devices=(
                            ClaimDevice(driver=driver, pool="pool-a", device="gpu-0"),
                            ClaimDevice(driver=driver, pool="pool-b", device="gpu-0"),
                        ),
                    ),
                ),
            ),
        ),
    )
    dra = DraState(
        devices=tuple(
            DraDevice(
                driver=driver,
                pool=pool,
                device="gpu-0",
                keys=(HardwareKey(KeyKind.PCI, address),),
                source="checkpoint",
            )
            for pool, address in (("pool-a", "0000:3b:00.0"), ("pool-b", "0000:86:00.0"))
        )
    )
    snapshot = join_snapshot(
        node="node-1",
        collected_at=1_700_000_000.0,
        kubelet=KubeletStatus(up=True, socket="/s", api=(), last_error=None),
        pods=(pod,),
        allocatable=AllocatableResources(),
        cpu_numa={},
        dra=dra,
    )
    body = render_json(snapshot, filters=Filters(), now=1_700_000_001.0)
    (claim,) = body["pods"][0]["containers"][0]["dynamic_resources"]
    assert [(d["pool"], d["hardware"]["keys"]) for d in claim["devices"]] == [
        ("pool-a", ["pci:0000:3b:00.0"]),
        ("pool-b", ["pci:0000:86:00.0"]),
    ]


def gpu_readings() -> tuple[DeviceReading, DeviceReading]:
    """A busy GPU with every figure the table shows, and an idle MIG device with two."""
    gpu = DeviceReading(
        "GPU-a",
        (HardwareKey(KeyKind.GPU_UUID, "GPU-a"),),
        DeviceIdentity(uuid="GPU-a"),
        (
            Sample(GPU_UTILIZATION, 0.93),
            Sample(GPU_SM_ACTIVE, 0.84),
            Sample(GPU_PIPE_ACTIVE, 0.556, ("tensor",)),
            Sample(GPU_PIPE_ACTIVE, 0.1, ("fp32",)),
            Sample(GPU_DRAM_ACTIVE, 0.62),
            Sample(GPU_MEMORY_USED, 60 * 1024**3),
            Sample(GPU_MEMORY_TOTAL, 80 * 1024**3),
            Sample(GPU_TEMPERATURE, 71.0),
            Sample(GPU_POWER, 612.4),
        ),
    )
    mig = DeviceReading(
        "MIG-b",
        (HardwareKey(KeyKind.MIG_UUID, "MIG-b"),),
        DeviceIdentity(uuid="MIG-b"),
        (Sample(GPU_SM_ACTIVE, 0.0), Sample(GPU_MEMORY_USED, 0.0)),
    )
    return gpu, mig


def gpu_snapshot() -> Snapshot:
    """Two pods sharing a time-sliced GPU, a third holding a MIG device and a NIC."""
    gpu, mig = gpu_readings()
    nic = DeviceReading(
        "0000:4b:00.2",
        (HardwareKey(KeyKind.PCI, "0000:4b:00.2"),),
        DeviceIdentity(pci_address="0000:4b:00.2"),
        (Sample(NET_RECEIVE_BYTES, 1.0, ("eth1",)),),
    )

    def pod(namespace: str, name: str, *groups: DeviceGroup) -> PodResources:
        return PodResources(namespace, name, (ContainerResources("main", devices=groups),))

    return join_snapshot(
        node="node-1",
        collected_at=COLLECTED_AT,
        kubelet=KubeletStatus(up=True, socket="/s", api=(), last_error=None),
        pods=(
            pod("nb", "alice", DeviceGroup("nvidia.com/gpu.shared", ("GPU-a::0",))),
            pod("nb", "bob", DeviceGroup("nvidia.com/gpu.shared", ("GPU-a::1",))),
            pod(
                "ml",
                "server",
                DeviceGroup("nvidia.com/mig-1g.10gb", ("MIG-b",)),
                DeviceGroup("example.com/vf", ("0000:4b:00.2",)),
            ),
        ),
        allocatable=AllocatableResources(),
        cpu_numa={},
        collector_runs=(
            CollectorRun("nvml", True, 0.0, Readings(devices=(gpu, mig))),
            CollectorRun("netdev", True, 0.0, Readings(devices=(nic,))),
        ),
    )


class TestGpusHeld:
    def test_a_line_per_gpu_and_holder_with_its_figures(self) -> None:
        """One line per GPU the shown containers hold and holder (a time-sliced GPU's
        figures on each of its holders' lines), its activity as percentages, memory in
        GiB; "-" for a figure the device has none of (a MIG device has no utilization);
        a NIC is no GPU."""
        text = render_text(gpu_snapshot(), filters=Filters(), now=COLLECTED_AT)
        table = text.split("# GPUs held\n", 1)[1].splitlines()
        assert [
            [
                "DEVICE",
                "UTIL",
                "SM",
                "TENSOR",
                "DRAM",
                "MEMORY_GIB",
                "TEMP_C",
                "POWER_W",
                "HOLDER",
            ],
            ["GPU-a", "93%", "84%", "56%", "62%", "60.0/80.0", "71", "612", "nb/alice/main"],
            ["GPU-a", "93%", "84%", "56%", "62%", "60.0/80.0", "71", "612", "nb/bob/main"],
            ["MIG-b", "-", "0%", "-", "-", "-", "-", "-", "ml/server/main"],
        ] == [line.split() for line in table]

    def test_filters_keep_the_shown_holders_only(self) -> None:
        """Filtered to one pod, the table lists that pod's GPUs and that pod as holder; a
        view whose containers hold no GPU has no table."""
        alice = render_text(gpu_snapshot(), filters=Filters(pod="alice"), now=COLLECTED_AT)
        nothing = render_text(snapshot("dev-0"), filters=Filters(), now=COLLECTED_AT)
        assert (["GPU-a", "93%"], "nb/alice/main", False) == (
            alice.split("# GPUs held\n", 1)[1].splitlines()[1].split()[:2],
            alice.split("# GPUs held\n", 1)[1].splitlines()[1].split()[-1],
            "# GPUs held" in nothing,
        )


def held_table(
    *pods: PodResources, filters: Filters | None = None, dra: DraState | None = None
) -> list[list[str]]:
    """The '# GPUs held' rows (cells split on spaces) of pods holding gpu_snapshot's
    devices and a GPU reachable through a DRA claim; [] without the section."""
    gpu_c = DeviceReading(
        "GPU-c",
        (HardwareKey(KeyKind.GPU_UUID, "GPU-c"),),
        DeviceIdentity(uuid="GPU-c"),
        # The PCI function's link width too: a GPU's reading holds other families.
        (Sample(GPU_MEMORY_TOTAL, 80 * 1024**3), Sample(PCIE_LINK_WIDTH, 16.0)),
    )
    view = join_snapshot(
        node="node-1",
        collected_at=COLLECTED_AT,
        kubelet=KubeletStatus(up=True, socket="/s", api=(), last_error=None),
        pods=pods,
        allocatable=AllocatableResources(),
        cpu_numa={},
        dra=dra or DraState(),
        collector_runs=(
            CollectorRun("nvml", True, 0.0, Readings(devices=(*gpu_readings(), gpu_c))),
        ),
    )
    text = render_text(view, filters=filters or Filters(), now=COLLECTED_AT)
    if "# GPUs held\n" not in text:
        return []
    return [line.split() for line in text.split("# GPUs held\n", 1)[1].splitlines()[1:]]


class TestGpusHeldMore:
    def test_one_holder_of_two_replicas_is_named_once_and_devices_by_name(self) -> None:
        """A container holding two replicas of one time-sliced GPU is one holder; the
        devices are listed by name whatever order the pods hold them in, a GPU whose
        reading has other families (its PCI function's) included, and memory without a
        used figure is '-'."""
        pod = PodResources(
            "ml",
            "a",
            (
                ContainerResources(
                    "main",
                    devices=(
                        DeviceGroup("nvidia.com/mig-1g.10gb", ("MIG-b",)),
                        DeviceGroup("nvidia.com/gpu", ("GPU-c",)),
                        DeviceGroup("nvidia.com/gpu.shared", ("GPU-a::0", "GPU-a::1")),
                    ),
                ),
            ),
        )
        assert [
            ["GPU-a", "93%", "84%", "56%", "62%", "60.0/80.0", "71", "612", "ml/a/main"],
            ["GPU-c", "-", "-", "-", "-", "-", "-", "-", "ml/a/main"],
            ["MIG-b", "-", "0%", "-", "-", "-", "-", "-", "ml/a/main"],
        ] == held_table(pod)

    def test_container_and_resource_filters_keep_their_containers_gpus_only(self) -> None:
        """?container= and ?resource= keep only the containers they match: another
        container's GPU is not listed, nor its holder; a filter nothing matches leaves
        no section."""
        pod = PodResources(
            "ml",
            "a",
            (
                ContainerResources("main", devices=(DeviceGroup("nvidia.com/gpu", ("GPU-c",)),)),
                ContainerResources(
                    "side", devices=(DeviceGroup("nvidia.com/mig-1g.10gb", ("MIG-b",)),)
                ),
            ),
        )
        assert (
            [["GPU-c", "-", "-", "-", "-", "-", "-", "-", "ml/a/main"]],
            [["MIG-b", "-", "0%", "-", "-", "-", "-", "-", "ml/a/side"]],
            [],
        ) == (
            held_table(pod, filters=Filters(container="main")),
            held_table(pod, filters=Filters(resource="nvidia.com/mig-1g.10gb")),
            held_table(pod, filters=Filters(container="other")),
        )

    def test_a_gpu_held_through_a_claim_is_listed(self) -> None:
        """A GPU a DRA claim gives the container is held as a device plugin's is."""
        claim = DynamicResource("gpus", "ml", (ClaimDevice("gpu.nvidia.com", "node-1", "gpu-0"),))
        pod = PodResources("ml", "a", (ContainerResources("main", dynamic_resources=(claim,)),))
        dra = DraState(
            devices=(
                DraDevice(
                    driver="gpu.nvidia.com",
                    pool="node-1",
                    device="gpu-0",
                    keys=(HardwareKey(KeyKind.GPU_UUID, "GPU-c"),),
                    source="checkpoint",
                ),
            )
        )
        assert [["GPU-c", "-", "-", "-", "-", "-", "-", "-", "ml/a/main"]] == held_table(
            pod, dra=dra
        )

    def test_every_holder_of_a_shared_gpu_is_named_whole(self) -> None:
        """Each holder has a line of its own, so however many pods share a GPU, none is
        cut off at the cell cap (one cell listing them all would be)."""
        names = [f"notebook-of-a-long-user-name-{n}" for n in range(4)]
        pods = [
            PodResources(
                "notebooks",
                name,
                (
                    ContainerResources(
                        "main", devices=(DeviceGroup("nvidia.com/gpu.shared", (f"GPU-a::{n}",)),)
                    ),
                ),
            )
            for n, name in enumerate(names)
        ]
        assert [f"notebooks/{name}/main" for name in names] == [
            row[-1] for row in held_table(*pods)
        ]

    def test_holders_of_one_workload_stay_apart_past_the_cell_cap(self) -> None:
        """Replicas of one Deployment sharing a GPU differ only at the end of their names
        (the pod's hash and suffix, then the container): a holder past the cap keeps its
        end, so each line still names its own pod and container."""
        namespace = "team-recommendations-inference-prod"
        names = [f"llama-3-70b-instruct-vllm-6f9d8c7b5-{s}" for s in ("x2k4q", "p9r7z")]
        pods = [
            PodResources(
                namespace,
                name,
                (
                    ContainerResources(
                        "vllm", devices=(DeviceGroup("nvidia.com/gpu.shared", (f"GPU-a::{n}",)),)
                    ),
                ),
            )
            for n, name in enumerate(names)
        ]
        holders = [row[-1] for row in held_table(*pods)]
        assert (
            [MAX_CELL_CHARS] * 2,
            [True, True],
            [True, True],
        ) == (
            [len(h) for h in holders],
            [h.startswith(namespace[:20]) for h in holders],
            [h.endswith(f"{n[-16:]}/vllm") for h, n in zip(holders, names, strict=True)],
        )
