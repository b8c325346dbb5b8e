"""The dra collector reads DRA drivers' node-local files into one DraState.

The fixture tree tests/fixtures/dra/ is written in the drivers' own formats; its
README says which upstream file each format was read from.
"""

from __future__ import annotations

import gc
import json
import os
import re
import shutil
import socket
import textwrap
import time
import types
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from exporter.collectors import dra as dra_module
from exporter.collectors.base import CollectorContext, CollectorUnavailable
from exporter.collectors.dra import (
    CHECKPOINT_SOURCE,
    MAX_METADATA_BYTES,
    METADATA_SOURCE,
    DraCollector,
    StaleCheckpointError,
    parse_cdi_spec,
    parse_device_metadata,
    parse_nvidia_checkpoint,
)
from exporter.model import DraDevice, DraState, HardwareKey, KeyKind, Readings

FIXTURES = Path(__file__).parent.parent / "fixtures" / "dra"
BOOT_ID = "b7e2d1c4-93a8-4f0e-8d6b-2a1c9e7f5b30"
NVIDIA_CLAIM_UID = "3f9a1c52-7b1e-4d2a-9c8e-1f2a3b4c5d6e"
AMD_CLAIM_UID = "5a7c3e91-0d2b-4f6a-8e1c-9b8a7f6e5d4c"
GPU_4 = "GPU-4e1f0a9b-5e1f-4c2a-9d3b-000000000104"
GPU_5 = "GPU-4e1f0a9b-5e1f-4c2a-9d3b-000000000105"
MIG = "MIG-0b5d7e21-5e1f-4c2a-9d3b-000000000501"
SRIOV = "sriovnetwork.k8snetworkplumbingwg.io"

# The driver names a claim only while it prepares it (PrepareStarted): the
# PrepareCompleted entry that replaces it has no name or namespace
# (device_state.go@v0.4.0:323-327), so its devices name no claim.
CHECKPOINT_DEVICES = (
    DraDevice(
        "gpu.nvidia.com",
        "node-a",
        "gpu-4",
        (HardwareKey(KeyKind.GPU_UUID, GPU_4),),
        CHECKPOINT_SOURCE,
    ),
    DraDevice(
        "gpu.nvidia.com",
        "node-a",
        "gpu-5-mig-1g10gb-19-3",
        (
            HardwareKey(KeyKind.MIG_UUID, MIG),
            HardwareKey(KeyKind.MIG_PATH, f"{GPU_5}/5/0"),
            HardwareKey(KeyKind.NVIDIA_MINOR_GI, "5/5"),
        ),
        CHECKPOINT_SOURCE,
    ),
)
METADATA_DEVICES = (
    DraDevice(
        SRIOV,
        "node-a",
        "0000-4b-00-5",
        (HardwareKey(KeyKind.PCI, "0000:4b:00.5"),),
        METADATA_SOURCE,
        claim_namespace="net",
        claim_name="dpdk-claim",
    ),
)
CDI_DEVICES = (
    (
        f"k8s.gpu.amd.com/gpu={AMD_CLAIM_UID}-gpu-3-130",
        (HardwareKey(KeyKind.DRM_CARD, "3"), HardwareKey(KeyKind.DRM_RENDER, "130")),
    ),
    (
        f"k8s.gpu.nvidia.com/claim={NVIDIA_CLAIM_UID}-gpu-4",
        (HardwareKey(KeyKind.NVIDIA_MINOR, "4"),),
    ),
)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A writable copy of the fixture tree."""
    root = tmp_path / "node"
    shutil.copytree(FIXTURES, root)
    return root


def _context(root: Path, *cdi: Path) -> CollectorContext:
    return CollectorContext(
        sysfs=root / "sys",
        procfs=root / "proc",
        kubelet_plugins=root / "plugins",
        cdi=cdi or (root / "cdi",),
    )


def _collect(root: Path, *cdi: Path) -> Readings:
    return DraCollector(_context(root, *cdi)).collect()


def _checkpoint(root: Path) -> Path:
    return root / "plugins" / "gpu.nvidia.com" / "checkpoint.json"


class TestCollect:
    def test_fixture_tree(self, tree: Path) -> None:
        """Checkpoint, metadata and CDI specs of the fixture tree give the whole DraState."""
        expected = Readings(
            dra=DraState(devices=CHECKPOINT_DEVICES + METADATA_DEVICES, cdi_devices=CDI_DEVICES)
        )
        assert expected == _collect(tree)

    def test_no_directory_is_unavailable(self, tmp_path: Path) -> None:
        """Without the plugins directory and every CDI directory the source is absent."""
        with pytest.raises(CollectorUnavailable):
            _collect(tmp_path / "none", tmp_path / "cdi-a", tmp_path / "cdi-b")

    def test_only_cdi_directory(self, tree: Path) -> None:
        """CDI specs are read where the kubelet plugins directory is missing."""
        shutil.rmtree(tree / "plugins")
        assert Readings(dra=DraState(cdi_devices=CDI_DEVICES)) == _collect(tree)

    def test_checkpoint_of_another_boot(self, tree: Path) -> None:
        """After a reboot the checkpoint is ignored, with one issue; the rest still reads."""
        (tree / "proc" / "sys" / "kernel" / "random" / "boot_id").write_text("other-boot\n")
        readings = _collect(tree)
        assert DraState(devices=METADATA_DEVICES, cdi_devices=CDI_DEVICES) == readings.dra
        assert ["stale_checkpoint"] == [i.error for i in readings.issues]

    def test_missing_boot_id(self, tree: Path) -> None:
        """Without the kernel's boot_id the checkpoint cannot be trusted."""
        (tree / "proc" / "sys" / "kernel" / "random" / "boot_id").unlink()
        readings = _collect(tree)
        assert readings.dra is not None
        assert METADATA_DEVICES == readings.dra.devices
        assert ["unreadable"] == [i.error for i in readings.issues]

    def test_garbage_checkpoint(self, tree: Path) -> None:
        """A checkpoint that is not JSON is one issue naming the file."""
        _checkpoint(tree).write_text('{"v2": ')
        readings = _collect(tree)
        assert readings.dra is not None
        assert METADATA_DEVICES == readings.dra.devices
        assert [("garbage", True)] == [
            (i.error, str(_checkpoint(tree)) in i.detail) for i in readings.issues
        ]

    def test_bad_cdi_spec_loses_that_file_only(self, tree: Path) -> None:
        """A spec without a kind and a spec with YAML aliases are one issue each."""
        (tree / "cdi" / "broken.json").write_text('{"devices": []}')
        (tree / "cdi" / "bomb.yaml").write_text(
            "kind: a.b/c\nx: &a [1, 1]\ndevices: [{name: d, containerEdits: {env: *a}}]\n"
        )
        readings = _collect(tree)
        assert readings.dra is not None
        assert CDI_DEVICES == readings.dra.cdi_devices
        assert ["garbage", "garbage"] == [i.error for i in readings.issues]

    def test_deeply_nested_files_lose_that_file_only(self, tree: Path) -> None:
        """The parsers recurse: a file nested a few thousand deep raised RecursionError,
        which took the whole collector down every poll. It is one bad file now."""
        path = next((tree / "plugins" / SRIOV).rglob("metadata.json"))
        path.write_text("[" * 200_000)
        (tree / "cdi" / "deep.yaml").write_text("kind: a.b/c\ndevices: " + "[" * 5_000 + "\n")
        readings = _collect(tree)
        assert readings.dra is not None
        assert (CHECKPOINT_DEVICES, CDI_DEVICES) == (readings.dra.devices, readings.dra.cdi_devices)
        assert ["garbage", "garbage"] == sorted(i.error for i in readings.issues)
        assert all("nested too deeply" in i.detail for i in readings.issues)

    def test_fifo_is_refused_without_blocking(self, tree: Path) -> None:
        """A FIFO named like a spec is unreadable: opening it plainly would wait forever."""
        os.mkfifo(tree / "cdi" / "pipe.yaml")
        readings = _collect(tree)
        assert readings.dra is not None
        assert CDI_DEVICES == readings.dra.cdi_devices
        assert ["unreadable"] == [i.error for i in readings.issues]

    def test_oversized_metadata(self, tree: Path) -> None:
        """A metadata file beyond the cap is refused unread, as one issue."""
        path = next((tree / "plugins" / SRIOV).rglob("metadata.json"))
        path.write_text(" " * (MAX_METADATA_BYTES + 1))
        readings = _collect(tree)
        assert readings.dra is not None
        assert CHECKPOINT_DEVICES == readings.dra.devices
        assert [("garbage", True)] == [
            (i.error, f"larger than {MAX_METADATA_BYTES} bytes" in i.detail)
            for i in readings.issues
        ]

    def test_first_cdi_directory_wins(self, tree: Path) -> None:
        """The same CDI device in two directories keeps the first directory's keys."""
        other = tree / "etc-cdi"
        other.mkdir()
        (other / "k8s.gpu.nvidia.com-claim_x.json").write_text(
            json.dumps(
                {
                    "cdiVersion": "0.5.0",
                    "kind": "k8s.gpu.nvidia.com/claim",
                    "devices": [
                        {
                            "name": f"{NVIDIA_CLAIM_UID}-gpu-4",
                            "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia7"}]},
                        }
                    ],
                }
            )
        )
        readings = _collect(tree, tree / "cdi", other)
        assert readings.dra is not None
        assert CDI_DEVICES == readings.dra.cdi_devices

    @staticmethod
    def _write_spec(path: Path, *devices: tuple[str, str | None]) -> None:
        """A spec of kind vendor.example.com/dev: (name, device node or None) each; None
        is an edit that names no hardware."""
        edits = [
            {
                "name": name,
                "containerEdits": {"deviceNodes": [{"path": node}]} if node else {"env": ["A=b"]},
            }
            for name, node in devices
        ]
        spec = {"cdiVersion": "0.5.0", "kind": "vendor.example.com/dev", "devices": edits}
        path.write_text(json.dumps(spec))

    def test_two_specs_of_one_directory_naming_a_device_use_neither(self, tree: Path) -> None:
        """CDI takes a name defined in two specs of one directory as a conflict and drops
        it (pkg/cdi/cache.go): so do we, with an issue naming both files. Their other
        devices still count, and so does a keyless definition's conflict."""
        self._write_spec(tree / "cdi" / "a.json", ("x", "/dev/dri/card5"), ("y", "/dev/dri/card6"))
        self._write_spec(tree / "cdi" / "b.json", ("x", "/dev/dri/card7"), ("z", None))
        self._write_spec(tree / "cdi" / "c.json", ("z", "/dev/dri/card8"))
        readings = _collect(tree)
        assert readings.dra is not None
        assert {
            **dict(CDI_DEVICES),
            "vendor.example.com/dev=y": (HardwareKey(KeyKind.DRM_CARD, "6"),),
        } == dict(readings.dra.cdi_devices)
        assert [
            (
                "garbage",
                f"{tree}/cdi/b.json: device vendor.example.com/dev=x also in "
                f"{tree}/cdi/a.json, used by neither",
            ),
            (
                "garbage",
                f"{tree}/cdi/c.json: device vendor.example.com/dev=z also in "
                f"{tree}/cdi/b.json, used by neither",
            ),
        ] == [(i.error, i.detail) for i in readings.issues]

    def test_a_conflict_in_a_later_directory_drops_the_name(self, tree: Path) -> None:
        """CDI drops a conflicting name after its scan, even where a directory it prefers
        defines the name once: the runtime will not resolve it, so neither do we."""
        other = tree / "etc-cdi"
        other.mkdir()
        self._write_spec(tree / "cdi" / "a.json", ("x", "/dev/dri/card5"))
        self._write_spec(other / "b.json", ("x", "/dev/dri/card6"))
        self._write_spec(other / "c.json", ("x", "/dev/dri/card7"))
        readings = _collect(tree, tree / "cdi", other)
        assert readings.dra is not None
        assert CDI_DEVICES == readings.dra.cdi_devices
        assert ["garbage"] == [i.error for i in readings.issues]

    def test_a_spec_naming_a_device_twice_is_refused(self, tree: Path) -> None:
        """CDI refuses such a spec whole ("multiple device", pkg/cdi/spec.go)."""
        self._write_spec(tree / "cdi" / "a.json", ("x", "/dev/dri/card5"), ("x", None))
        self._write_spec(tree / "cdi" / "b.json", ("y", "/dev/dri/card6"))
        readings = _collect(tree)
        assert readings.dra is not None
        assert {
            **dict(CDI_DEVICES),
            "vendor.example.com/dev=y": (HardwareKey(KeyKind.DRM_CARD, "6"),),
        } == dict(readings.dra.cdi_devices)
        assert [("garbage", f"{tree}/cdi/a.json: device 'x' named twice")] == [
            (i.error, i.detail) for i in readings.issues
        ]

    def test_a_spec_holding_a_device_without_edits_is_refused(self, tree: Path) -> None:
        """CDI refuses a spec one of whose devices has no container edits at all
        ("empty device edits", pkg/cdi/device.go): its devices are not used, and do not
        conflict with another spec's."""
        self._write_spec(tree / "cdi" / "a.json", ("x", "/dev/dri/card5"))
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "vendor.example.com/dev",
            "devices": [
                {"name": "x", "containerEdits": {"deviceNodes": [{"path": "/dev/dri/card6"}]}},
                {"name": "empty", "containerEdits": {}},
            ],
        }
        (tree / "cdi" / "b.json").write_text(json.dumps(spec))
        readings = _collect(tree)
        assert readings.dra is not None
        assert {
            **dict(CDI_DEVICES),
            "vendor.example.com/dev=x": (HardwareKey(KeyKind.DRM_CARD, "5"),),
        } == dict(readings.dra.cdi_devices)
        assert [("garbage", f"{tree}/cdi/b.json: device 'empty' has no container edits")] == [
            (i.error, i.detail) for i in readings.issues
        ]


class TestCdiCache:
    def _spec(self, root: Path, node: str) -> Path:
        path = root / "cdi" / "vendor.example.com-dev.json"
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "vendor.example.com/dev",
            "devices": [{"name": "a", "containerEdits": {"deviceNodes": [{"path": node}]}}],
        }
        path.write_text(json.dumps(spec))
        return path

    def _keys(self, collector: DraCollector) -> tuple[HardwareKey, ...]:
        dra = collector.collect().dra
        assert dra is not None
        return dict(dra.cdi_devices).get("vendor.example.com/dev=a", ())

    def test_unchanged_file_is_not_parsed_again(self, tree: Path) -> None:
        """Same inode, size and mtime: the parsed spec is reused; a new mtime re-reads it."""
        collector = DraCollector(_context(tree))
        path = self._spec(tree, "/dev/dri/card1")
        assert (HardwareKey(KeyKind.DRM_CARD, "1"),) == self._keys(collector)
        status = path.stat()
        with path.open("r+") as handle:  # same inode, same size, mtime put back
            handle.write(path.read_text().replace("card1", "card2"))
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
        assert (HardwareKey(KeyKind.DRM_CARD, "1"),) == self._keys(collector)
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns + 1))
        assert (HardwareKey(KeyKind.DRM_CARD, "2"),) == self._keys(collector)

    def test_a_refused_file_is_not_parsed_again_until_it_changes(
        self, tree: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A bad spec (seconds of YAML when large) is refused once per version of the
        file, not parsed again every poll; the issue is reported each poll."""
        path = tree / "cdi" / "vendor.example.com-bad.yaml"
        path.write_text("kind: no-slash\ndevices: []\n")
        parsed: list[str] = []
        real = dra_module.parse_cdi_spec

        def counting(text: str, *, yaml_format: bool) -> Any:
            parsed.append(text)
            return real(text, yaml_format=yaml_format)

        monkeypatch.setattr(dra_module, "parse_cdi_spec", counting)
        collector = DraCollector(_context(tree))
        issues = [collector.collect().issues for _ in range(3)]
        assert [["garbage"]] * 3 == [[i.error for i in polled] for polled in issues]
        bad = [t for t in parsed if "no-slash" in t]
        assert len(bad) == 1
        path.write_text("kind: a.b/c\ndevices: [{name: d, containerEdits: {env: [A=1]}}]\n")
        assert () == collector.collect().issues

    def test_a_refused_file_keeps_no_tracebacks(self, tree: Path) -> None:
        """The refusal is remembered as its message and raised anew each poll: raising
        one exception object again grows its traceback by the raising frames, each
        holding that poll's locals, every poll (the leak issue 11 found in the runner)."""
        (tree / "cdi" / "vendor.example.com-bad.yaml").write_text("kind: no-slash\n")
        collector = DraCollector(_context(tree))
        collector.collect()

        def tracebacks() -> int:
            gc.collect()
            return sum(1 for o in gc.get_objects() if isinstance(o, types.TracebackType))

        before = tracebacks()
        for _ in range(50):
            assert ["garbage"] == [i.error for i in collector.collect().issues]
        assert tracebacks() - before < 10

    def test_removed_file_is_forgotten(self, tree: Path) -> None:
        """A spec that is gone names nothing any more."""
        collector = DraCollector(_context(tree))
        path = self._spec(tree, "/dev/dri/card1")
        self._keys(collector)
        path.unlink()
        assert () == self._keys(collector)


BOOT_STARTED_S = 1_769_904_000  # btime of the fixture tree's proc/stat
RELEASES = FIXTURES / "checkpoints"


def _install(root: Path, release: str, *, modified_s: float) -> None:
    """The checkpoint of ``release`` in place of the tree's, last written at ``modified_s``."""
    shutil.copyfile(RELEASES / f"{release}.json", _checkpoint(root))
    os.utime(_checkpoint(root), (modified_s, modified_s))


def _with_old_mig_name() -> Readings:
    """The tree's readings with its MIG device as releases before v25.12 name it,
    gpu-<minor>-mig-<GI profile ID>-<start>-<size>, known by its UUID."""
    mig = DraDevice(
        "gpu.nvidia.com",
        "node-a",
        "gpu-5-mig-19-3-1",
        (HardwareKey(KeyKind.MIG_UUID, MIG),),
        CHECKPOINT_SOURCE,
    )
    return Readings(
        dra=DraState(
            devices=(CHECKPOINT_DEVICES[0], mig, *METADATA_DEVICES), cdi_devices=CDI_DEVICES
        )
    )


class TestReleases:
    """Checkpoints as each NVIDIA DRA driver release writes them (checkpoints/README.md)."""

    def test_v25_12_written_this_boot(self, tree: Path) -> None:
        """v25.12.0 writes no nodeBootID: a file written since this boot started is
        this boot's, as v0.4.0 itself takes it (device_state.go@v0.4.0:197-209)."""
        _install(tree, "v25.12.0", modified_s=BOOT_STARTED_S + 60)
        expected = Readings(
            dra=DraState(devices=CHECKPOINT_DEVICES + METADATA_DEVICES, cdi_devices=CDI_DEVICES)
        )
        assert expected == _collect(tree)

    def test_v25_12_written_before_this_boot(self, tree: Path) -> None:
        """A file without nodeBootID last written before the boot is stale, and says when."""
        _install(tree, "v25.12.0", modified_s=BOOT_STARTED_S - 60)
        readings = _collect(tree)
        assert readings.dra is not None
        assert METADATA_DEVICES == readings.dra.devices
        assert [
            (
                "stale_checkpoint",
                f"{_checkpoint(tree)}: ignored, no nodeBootID (a driver before v0.4.0), and "
                "last written at 2026-01-31T23:59:00+00:00, before this boot started at "
                "2026-02-01T00:00:00+00:00",
            )
        ] == [(i.error, i.detail) for i in readings.issues]

    def test_v25_8_mig_info(self, tree: Path) -> None:
        """v25.8.1 keeps a MIG device as {"info": {"uuid"}, "device"} (prepared.go@v25.8.1,
        deviceinfo.go@v25.8.1:48), named gpu-<minor>-mig-<GI profile ID>-<start>-<size>:
        its UUID is the key."""
        _install(tree, "v25.8.1", modified_s=BOOT_STARTED_S + 60)
        assert _with_old_mig_name() == _collect(tree)

    def test_v25_3_v1_only(self, tree: Path) -> None:
        """v25.3.2 writes only v1 (checkpoint.go@v25.3.2:10-25), of claims it finished
        preparing (device_state.go@v25.3.2:158-166): read as v2 PrepareCompleted ones, as
        later releases convert it (checkpointv.go@v25.8.1 ToV2)."""
        _install(tree, "v25.3.2", modified_s=BOOT_STARTED_S + 60)
        assert _with_old_mig_name() == _collect(tree)

    def test_v25_3_written_before_this_boot(self, tree: Path) -> None:
        """A v1 checkpoint says no boot either: written before this one, it is stale."""
        _install(tree, "v25.3.2", modified_s=BOOT_STARTED_S - 1)
        assert ["stale_checkpoint"] == [i.error for i in _collect(tree).issues]

    def test_boot_start_from_uptime(self, tree: Path) -> None:
        """Without btime in /proc/stat, the boot started /proc/uptime seconds ago."""
        (tree / "proc" / "stat").unlink()
        (tree / "proc" / "uptime").write_text("3600.25 7000.50\n")
        now = time.time()
        _install(tree, "v25.12.0", modified_s=now - 60)
        fresh = _collect(tree)
        _install(tree, "v25.12.0", modified_s=now - 7200)
        stale = _collect(tree)
        assert ([], ["stale_checkpoint"]) == (
            [i.error for i in fresh.issues],
            [i.error for i in stale.issues],
        )

    def test_no_boot_time(self, tree: Path) -> None:
        """Where neither /proc/stat nor /proc/uptime dates the boot, such a file is stale."""
        (tree / "proc" / "stat").unlink()
        _install(tree, "v25.12.0", modified_s=time.time())
        readings = _collect(tree)
        assert [("stale_checkpoint", True)] == [
            (i.error, i.detail.endswith("and no boot time")) for i in readings.issues
        ]


class TestDatesPastDatetime:
    def test_a_checkpoint_dated_before_year_1_is_stale(self) -> None:
        """tmpfs keeps an mtime of -1e11 s (year -1199), where datetime raised ValueError
        while the stale message was written: the file was reported garbage, the detail
        "year -1199 is out of range"."""
        text = (RELEASES / "v25.12.0.json").read_text()
        with pytest.raises(StaleCheckpointError, match="-100000000000 s since the epoch"):
            parse_nvidia_checkpoint(
                text, boot_id=BOOT_ID, modified_s=-1e11, boot_started_s=BOOT_STARTED_S
            )

    def test_a_boot_dated_past_time_t_is_no_crash(self, tree: Path) -> None:
        """parse_boot_time takes a btime of up to 20 digits; dating such a boot raised
        OverflowError, out of the collector, every poll: all DRA files were lost."""
        stat_path = tree / "proc" / "stat"
        stat_path.write_text(
            re.sub(r"(?m)^btime .*$", "btime 99999999999999999999", stat_path.read_text())
        )
        _install(tree, "v25.12.0", modified_s=BOOT_STARTED_S + 60)
        readings = _collect(tree)
        assert readings.dra is not None
        assert (METADATA_DEVICES, CDI_DEVICES) == (readings.dra.devices, readings.dra.cdi_devices)
        started = "before this boot started at 100000000000000000000 s since the epoch"
        assert [("stale_checkpoint", True)] == [
            (i.error, i.detail.endswith(started)) for i in readings.issues
        ]


class TestParseCheckpoint:
    def test_prepare_started_claims_are_skipped(self) -> None:
        """Only PrepareCompleted claims count: the half-prepared claim (its name and
        status, no devices yet) adds nothing."""
        text = (FIXTURES / "plugins" / "gpu.nvidia.com" / "checkpoint.json").read_text()
        assert CHECKPOINT_DEVICES == parse_nvidia_checkpoint(text, boot_id=BOOT_ID)

    def test_no_boot_id_is_stale(self) -> None:
        """A checkpoint that does not say its boot, and that nothing dates, is stale."""
        with pytest.raises(StaleCheckpointError):
            parse_nvidia_checkpoint('{"v2": {"preparedClaims": {}}}', boot_id=BOOT_ID)

    def test_neither_v1_nor_v2_is_garbage(self) -> None:
        """A file with no checkpoint version this exporter knows is not read."""
        with pytest.raises(ValueError, match="neither v1 nor v2"):
            parse_nvidia_checkpoint('{"checksum": 1, "v3": {}}', boot_id=BOOT_ID)

    def test_vfio_device(self) -> None:
        """A GPU bound to vfio-pci is known by its PCI function, from NVML's bus ID form."""
        claim = {
            "checkpointState": "PrepareCompleted",
            "preparedDevices": [
                {
                    "devices": [
                        {
                            "gpu": None,
                            "mig": None,
                            "vfio": {
                                "info": {"uuid": GPU_4, "pciBusID": "00000000:3B:00.0"},
                                "device": {"PoolName": "node-a", "DeviceName": "gpu-vfio-0"},
                            },
                        }
                    ]
                }
            ],
        }
        text = json.dumps({"v2": {"nodeBootID": BOOT_ID, "preparedClaims": {"u": claim}}})
        expected = (
            DraDevice(
                "gpu.nvidia.com",
                "node-a",
                "gpu-vfio-0",
                (HardwareKey(KeyKind.PCI, "0000:3b:00.0"),),
                CHECKPOINT_SOURCE,
            ),
        )
        assert expected == parse_nvidia_checkpoint(text, boot_id=BOOT_ID)


# Device attributes as the drivers publish them in their ResourceSlices, which
# dra-driver-sriov copies whole into its metadata (pkg/devicestate/state.go,
# buildMetadataAttributes). ROCm/k8s-gpu-dra-driver (deviceinfo.go, docs/demo.md):
# an MI300X, and a partition of one, which names its GPU's address only.
AMD_GPU_ATTRIBUTES = {
    "cardIndex": {"int": 40},
    "deviceID": {"string": "994913940318892495"},
    "driverSrcVersion": {"string": "7AA72EC2C8F513519BE86FD"},
    "driverVersion": {"version": "6.12.12"},
    "family": {"string": "AI"},
    "partitionProfile": {"string": "spx_nps1"},
    "pciAddr": {"string": "0003:00:02.0"},
    "productName": {"string": "AMD_Instinct_MI300X_OAM"},
    "renderIndex": {"int": 168},
    "resource.kubernetes.io/pcieRoot": {"string": "pci0003:00"},
    "type": {"string": "amdgpu"},
}
AMD_PARTITION_ATTRIBUTES = {
    "cardIndex": {"int": 41},
    "parentPciAddr": {"string": "0003:00:02.0"},
    "partitionProfile": {"string": "cpx_nps1"},
    "renderIndex": {"int": 169},
    "type": {"string": "amdgpu-partition"},
}
# dra-driver-sriov (pkg/consts/consts.go, pkg/devicestate/discovery.go) before it added
# the standard pciBusID (675c8cc): every name in its own domain.
SRIOV = "sriovnetwork.k8snetworkplumbingwg.io"
SRIOV_VF_ATTRIBUTES = {
    f"{SRIOV}/vendor": {"string": "15b3"},
    f"{SRIOV}/deviceID": {"string": "101e"},
    f"{SRIOV}/pfDeviceID": {"string": "101d"},
    f"{SRIOV}/pciAddress": {"string": "0000:4b:00.5"},
    "k8s.cni.cncf.io/deviceID": {"string": "0000:4b:00.5"},
    f"{SRIOV}/PFName": {"string": "ens1f0np0"},
    f"{SRIOV}/EswitchMode": {"string": "legacy"},
    f"{SRIOV}/vfID": {"int": 3},
    "resource.kubernetes.io/pcieRoot": {"string": "pci0000:4a"},
    f"{SRIOV}/pfPciAddress": {"string": "0000:4b:00.0"},
    "dra.net/numaNode": {"int": 0},
}


class TestParseMetadata:
    def _stream(self, attributes: dict[str, object], *, driver: str = "gpu.example.com") -> str:
        document = {
            "apiVersion": "metadata.resource.k8s.io/v1alpha1",
            "kind": "DeviceMetadata",
            "requests": [
                {
                    "name": "gpu",
                    "devices": [
                        {
                            "driver": driver,
                            "pool": "p",
                            "name": "gpu-0",
                            "attributes": attributes,
                        }
                    ],
                }
            ],
        }
        return json.dumps(document) + "\n"

    def test_claim_from_directory_when_the_object_has_none(self) -> None:
        """The directory's namespace and claim name stand in for missing object metadata."""
        text = self._stream({"resource.k8s.io/pciBusID": {"string": "0000:00:01.0"}})
        expected = (
            DraDevice(
                "gpu.example.com",
                "p",
                "gpu-0",
                (HardwareKey(KeyKind.PCI, "0000:00:01.0"),),
                METADATA_SOURCE,
                claim_namespace="default",
                claim_name="my-claim",
            ),
        )
        assert expected == parse_device_metadata(
            text, claim_namespace="default", claim_name="my-claim"
        )

    @pytest.mark.parametrize(
        ("bus_id", "keys"),
        [
            ("0000:b1:00.0", (HardwareKey(KeyKind.PCI, "0000:b1:00.0"),)),
            ("00000000:B1:00.0", (HardwareKey(KeyKind.PCI, "0000:b1:00.0"),)),  # NVML's
            # An Intel VMD domain (from 0x10000), which was refused as past 0xffff.
            ("10000:e1:00.0", (HardwareKey(KeyKind.PCI, "10000:e1:00.0"),)),
            ("00010000:E1:00.0", (HardwareKey(KeyKind.PCI, "10000:e1:00.0"),)),
            ("0000:b1:00.0\n", ()),
            ("0000:b1:20.0", ()),  # no slot past 0x1f
        ],
    )
    def test_pci_bus_id_in_the_kernels_form(
        self, bus_id: str, keys: tuple[HardwareKey, ...]
    ) -> None:
        """pciBusID as the kernel, NVML or a driver writes it gives the kernel's address."""
        text = self._stream({"resource.kubernetes.io/pciBusID": {"string": bus_id}})
        found = parse_device_metadata(text, claim_namespace="a", claim_name="b")
        assert keys == tuple(k for d in found for k in d.keys)

    @pytest.mark.parametrize(
        ("driver", "attributes", "address"),
        [
            pytest.param("gpu.amd.com", AMD_GPU_ATTRIBUTES, "0003:00:02.0", id="amd pciAddr"),
            pytest.param(
                "gpu.amd.com",
                {"gpu.amd.com/pciAddr": {"string": "0003:00:02.0"}},
                "0003:00:02.0",
                id="amd, in its domain",
            ),
            pytest.param(SRIOV, SRIOV_VF_ATTRIBUTES, "0000:4b:00.5", id="sriov pciAddress"),
            pytest.param("gpu.amd.com", AMD_PARTITION_ATTRIBUTES, None, id="amd partition"),
            pytest.param(
                "other.example.com",
                {f"{SRIOV}/pciAddress": {"string": "0000:4b:00.5"}},
                None,
                id="another driver's name",
            ),
        ],
    )
    def test_a_drivers_own_name_for_the_pci_address(
        self, driver: str, attributes: dict[str, object], address: str | None
    ) -> None:
        """AMD's pciAddr and SR-IOV's pciAddress, bare or in the driver's domain, give
        the device's address; a partition's parentPciAddr is its GPU's, not its own."""
        found = parse_device_metadata(
            self._stream(attributes, driver=driver), claim_namespace="a", claim_name="b"
        )
        expected = () if address is None else (HardwareKey(KeyKind.PCI, address),)
        assert expected == tuple(k for d in found for k in d.keys)

    def test_the_standard_pci_bus_id_wins_over_a_drivers_own_name(self) -> None:
        attributes = {
            **SRIOV_VF_ATTRIBUTES,
            "resource.kubernetes.io/pciBusID": {"string": "0000:4b:00.6"},
        }
        (device,) = parse_device_metadata(
            self._stream(attributes, driver=SRIOV), claim_namespace="a", claim_name="b"
        )
        assert (HardwareKey(KeyKind.PCI, "0000:4b:00.6"),) == device.keys

    def test_mig_uuid_drops_the_parents_pci_address(self) -> None:
        """A MIG device's pciBusID is its parent GPU's: only the MIG UUID names it."""
        text = self._stream(
            {
                "uuid": {"string": MIG},
                "resource.kubernetes.io/pciBusID": {"string": "0000:b1:00.0"},
            }
        )
        (device,) = parse_device_metadata(text, claim_namespace="a", claim_name="b")
        assert (HardwareKey(KeyKind.MIG_UUID, MIG),) == device.keys

    def test_gpu_uuid_first(self) -> None:
        """A GPU UUID comes before the PCI address: the more specific key first."""
        text = self._stream(
            {
                "uuid": {"string": GPU_4.lower()},
                "resource.kubernetes.io/pciBusID": {"string": "0000:b1:00.0"},
            }
        )
        (device,) = parse_device_metadata(text, claim_namespace="a", claim_name="b")
        expected = (
            HardwareKey(KeyKind.GPU_UUID, GPU_4),
            HardwareKey(KeyKind.PCI, "0000:b1:00.0"),
        )
        assert expected == device.keys

    def test_no_known_version(self) -> None:
        """A stream without a v1alpha1 object is refused."""
        with pytest.raises(ValueError, match="v1alpha1"):
            parse_device_metadata(
                '{"apiVersion": "metadata.resource.k8s.io/v9"}',
                claim_namespace="a",
                claim_name="b",
            )


class TestParseCdiSpec:
    def test_a_device_whose_only_edit_is_a_net_device_is_valid(self) -> None:
        """CDI 0.8's netDevices are edits (pkg/cdi/container-edits.go isEmpty): a device
        with nothing else is no empty device, and its spec is not refused."""
        spec = {
            "cdiVersion": "0.8.0",
            "kind": "vendor.example.com/net",
            "devices": [
                {
                    "name": "vf3",
                    "containerEdits": {
                        "netDevices": [{"hostInterfaceName": "ens1f0v3", "name": "net1"}]
                    },
                }
            ],
        }
        expected = (("vendor.example.com/net=vf3", (HardwareKey(KeyKind.NETDEV, "ens1f0v3"),)),)
        assert expected == parse_cdi_spec(json.dumps(spec), yaml_format=False)

    def test_env_uuids_and_net_devices(self) -> None:
        """GPU/MIG UUIDs in env values and annotations, and host interfaces, are keys."""
        spec = {
            "cdiVersion": "0.7.0",
            "kind": "vendor.example.com/dev",
            "devices": [
                {
                    "name": "a",
                    "annotations": {"example.com/uuid": MIG},
                    "containerEdits": {
                        "env": [f"NVIDIA_VISIBLE_DEVICES={GPU_4},{GPU_5}", "OTHER=x"],
                        "netDevices": [{"hostInterfaceName": "ens1f0v2", "name": "net1"}],
                    },
                },
                {"name": "nothing", "containerEdits": {"env": ["A=b"]}},
            ],
        }
        expected = (
            (
                "vendor.example.com/dev=a",
                (
                    HardwareKey(KeyKind.GPU_UUID, GPU_4),
                    HardwareKey(KeyKind.GPU_UUID, GPU_5),
                    HardwareKey(KeyKind.MIG_UUID, MIG),
                    HardwareKey(KeyKind.NETDEV, "ens1f0v2"),
                ),
            ),
            ("vendor.example.com/dev=nothing", ()),  # names no hardware
        )
        assert expected == parse_cdi_spec(json.dumps(spec), yaml_format=False)

    def test_a_mig_device_takes_none_of_its_parents_device_nodes(self) -> None:
        """NVIDIA's DRA driver builds a MIG device's CDI edits from its parent GPU's spec
        (cmd/gpu-kubelet-plugin/cdi.go): the GPU's /dev/nvidiaN and DRM nodes beside the
        MIG device's capability nodes. None of them names the MIG device."""
        nodes = [
            {"path": "/dev/nvidia0"},
            {"path": "/dev/dri/card1"},
            {"path": "/dev/dri/renderD128"},
            {"path": "/dev/nvidia-caps/nvidia-cap21"},
        ]
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "k8s.gpu.nvidia.com/claim",
            "devices": [
                {"name": "m", "containerEdits": {"env": [f"X={MIG}"], "deviceNodes": nodes}}
            ],
        }
        expected = (("k8s.gpu.nvidia.com/claim=m", (HardwareKey(KeyKind.MIG_UUID, MIG),)),)
        assert expected == parse_cdi_spec(json.dumps(spec), yaml_format=False)

    def test_relocated_host_paths_are_read_by_their_dev_name(self) -> None:
        """The GPU operator's driver container puts nodes under /run/nvidia/driver/dev:
        hostPath is relocated, and the keys are read from its last /dev/ on."""
        relocated = [{"path": "/dev/nvidia3", "hostPath": "/run/nvidia/driver/dev/nvidia3"}]
        render = [
            {"path": "/dev/dri/renderD130", "hostPath": "/run/nvidia/driver/dev/dri/renderD130"}
        ]
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "vendor.example.com/dev",
            "devices": [
                {"name": "a", "containerEdits": {"deviceNodes": relocated}},
                {"name": "b", "containerEdits": {"deviceNodes": render}},
            ],
        }
        assert (
            ("vendor.example.com/dev=a", (HardwareKey(KeyKind.NVIDIA_MINOR, "3"),)),
            ("vendor.example.com/dev=b", (HardwareKey(KeyKind.DRM_RENDER, "130"),)),
        ) == parse_cdi_spec(json.dumps(spec), yaml_format=False)

    def test_the_host_node_names_the_hardware_where_the_container_renames_it(self) -> None:
        """A spec may give a node another name in the container: the hardware is the
        host's node, hostPath, which CDI's runtimes open for its device numbers."""
        nodes = [{"path": "/dev/dri/renderD128", "hostPath": "/dev/dri/renderD131"}]
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "vendor.example.com/dev",
            "devices": [{"name": "a", "containerEdits": {"deviceNodes": nodes}}],
        }
        assert (
            ("vendor.example.com/dev=a", (HardwareKey(KeyKind.DRM_RENDER, "131"),)),
        ) == parse_cdi_spec(json.dumps(spec), yaml_format=False)

    def test_an_unquoted_number_names_a_device_as_cdi_reads_it(self) -> None:
        """A hand-written spec's ``name: 0`` is the device ``0`` to CDI (sigs.k8s.io/yaml
        gives a string field the scalar's text), not a device without a name."""
        text = textwrap.dedent(
            """\
            cdiVersion: 0.6.0
            kind: vendor.example.com/gpu
            devices:
              - name: 0
                containerEdits:
                  deviceNodes: [{path: /dev/dri/renderD128}]
            """
        )
        assert (
            ("vendor.example.com/gpu=0", (HardwareKey(KeyKind.DRM_RENDER, "128"),)),
        ) == parse_cdi_spec(text, yaml_format=True)

    def test_not_a_mapping(self) -> None:
        """A YAML list is not a spec."""
        with pytest.raises(ValueError, match="mapping"):
            parse_cdi_spec("- a\n- b\n", yaml_format=True)


def _nvidia_checkpoint(*claims: dict[str, Any]) -> str:
    """A v0.4.0 checkpoint of this boot holding ``claims`` (by made-up UIDs)."""
    prepared = {f"uid-{n}": claim for n, claim in enumerate(claims)}
    return json.dumps({"v2": {"nodeBootID": BOOT_ID, "preparedClaims": prepared}})


def _claim(state: str, *devices: dict[str, Any], **named: str) -> dict[str, Any]:
    """A v2 claim in ``state`` with one device group of ``devices``."""
    return {"checkpointState": state, "preparedDevices": [{"devices": list(devices)}], **named}


def _gpu(uuid: str, name: str) -> dict[str, Any]:
    return {"gpu": {"info": {"uuid": uuid}, "device": {"PoolName": "node-a", "DeviceName": name}}}


class TestParseCheckpointEntries:
    def test_a_prepare_started_claim_adds_none_of_its_devices(self) -> None:
        """A claim still PrepareStarted adds nothing, even where it lists devices: the
        prepare may have crashed before they existed."""
        text = _nvidia_checkpoint(
            _claim("PrepareStarted", _gpu(GPU_5, "gpu-5")),
            _claim("PrepareCompleted", _gpu(GPU_4, "gpu-4")),
        )
        assert ("gpu-4",) == tuple(d.device for d in parse_nvidia_checkpoint(text, boot_id=BOOT_ID))

    def test_a_claim_that_names_itself_names_its_devices(self) -> None:
        """Where a completed claim carries its name and namespace, its devices do."""
        text = _nvidia_checkpoint(
            _claim("PrepareCompleted", _gpu(GPU_4, "gpu-4"), name="train", namespace="ml")
        )
        (device,) = parse_nvidia_checkpoint(text, boot_id=BOOT_ID)
        assert ("ml", "train") == (device.claim_namespace, device.claim_name)

    def test_a_vfio_device_without_a_pci_bus_id_is_left_out(self) -> None:
        """v25.12 keeps a vfio device's UUID only (pciBusID came after it): a GPU bound to
        vfio-pci is not in NVML, so nothing names its hardware and no device is made."""
        vfio = {
            "vfio": {
                "info": {"uuid": GPU_4},
                "device": {"PoolName": "node-a", "DeviceName": "gpu-vfio-4"},
            }
        }
        text = _nvidia_checkpoint(_claim("PrepareCompleted", vfio))
        assert () == parse_nvidia_checkpoint(text, boot_id=BOOT_ID)

    @pytest.mark.parametrize(
        ("concrete", "expected"),
        [
            (  # no ciId: the MIG path needs it, the minor/GI key does not
                {"parentMinor": 5, "giId": 5, "migUUID": MIG, "parentUUID": GPU_5},
                (HardwareKey(KeyKind.MIG_UUID, MIG), HardwareKey(KeyKind.NVIDIA_MINOR_GI, "5/5")),
            ),
            (  # JSON true is no GI ID
                {"parentMinor": 5, "giId": True, "ciId": 0, "migUUID": MIG, "parentUUID": GPU_5},
                (HardwareKey(KeyKind.MIG_UUID, MIG),),
            ),
        ],
    )
    def test_mig_keys_need_integer_ids(
        self, concrete: dict[str, Any], expected: tuple[HardwareKey, ...]
    ) -> None:
        """A MIG device's path and minor/GI keys are made only of the integers they need."""
        mig = {"mig": {"concrete": concrete, "device": {"PoolName": "p", "DeviceName": "m"}}}
        text = _nvidia_checkpoint(_claim("PrepareCompleted", mig))
        (device,) = parse_nvidia_checkpoint(text, boot_id=BOOT_ID)
        assert expected == device.keys

    @pytest.mark.parametrize(
        ("text", "detail"),
        [
            ("[" * 200_000, "nested too deeply"),  # json.loads recurses
            ("[]", "not a JSON object"),
        ],
    )
    def test_a_checkpoint_that_is_no_object_is_garbage(
        self, tree: Path, text: str, detail: str
    ) -> None:
        """A checkpoint nested too deeply for the parser, or a JSON array, loses the
        checkpoint only, as one garbage issue; the collector goes on."""
        _checkpoint(tree).write_text(text)
        readings = _collect(tree)
        assert readings.dra is not None
        assert (METADATA_DEVICES, CDI_DEVICES) == (readings.dra.devices, readings.dra.cdi_devices)
        assert [("garbage", True)] == [(i.error, detail in i.detail) for i in readings.issues]


class TestParseMetadataEntries:
    def _stream(self, devices: list[dict[str, Any]], **meta: str) -> str:
        document = {
            "apiVersion": "metadata.resource.k8s.io/v1alpha1",
            "kind": "DeviceMetadata",
            "metadata": meta,
            "requests": [{"name": "r", "devices": devices}],
        }
        return json.dumps(document) + "\n"

    def test_the_objects_own_claim_wins_over_the_directory(self) -> None:
        """The object names its claim; the directory name is only a stand-in."""
        text = self._stream(
            [
                {
                    "driver": "gpu.example.com",
                    "name": "gpu-0",
                    "attributes": {"uuid": {"string": GPU_4}},
                }
            ],
            name="real-claim",
            namespace="real-ns",
        )
        (device,) = parse_device_metadata(text, claim_namespace="dir-ns", claim_name="dir-claim")
        assert ("real-ns", "real-claim") == (device.claim_namespace, device.claim_name)

    def test_a_device_without_hardware_attributes_is_left_out(self) -> None:
        """A device with neither a UUID nor a PCI address (a CPU driver's) names no
        hardware: it adds nothing."""
        text = self._stream(
            [
                {"driver": "dra.cpu", "name": "cpu-0", "attributes": {"numaNode": {"int": 0}}},
                {
                    "driver": "gpu.example.com",
                    "name": "gpu-1",
                    "attributes": {"gpu.example.com/uuid": {"string": GPU_5}},
                },
            ]
        )
        devices = parse_device_metadata(text, claim_namespace="a", claim_name="b")
        assert (("gpu-1", (HardwareKey(KeyKind.GPU_UUID, GPU_5),)),) == tuple(
            (d.device, d.keys) for d in devices
        )

    def test_upper_case_uuid_is_read_as_nvml_writes_it(self) -> None:
        """A UUID attribute in upper case is the GPU NVML names in lower case."""
        text = self._stream(
            [
                {
                    "driver": "gpu.example.com",
                    "name": "gpu-4",
                    "attributes": {"uuid": {"string": GPU_4.upper()}},
                }
            ]
        )
        (device,) = parse_device_metadata(text, claim_namespace="a", claim_name="b")
        assert (HardwareKey(KeyKind.GPU_UUID, GPU_4),) == device.keys


class TestCdiKeys:
    def test_a_uuid_named_twice_is_one_key(self) -> None:
        """The same GPU UUID in an env value and an annotation is one key."""
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "vendor.example.com/dev",
            "devices": [
                {
                    "name": "a",
                    "annotations": {"example.com/uuid": GPU_4},
                    "containerEdits": {"env": [f"NVIDIA_VISIBLE_DEVICES={GPU_4}"]},
                }
            ],
        }
        assert (("vendor.example.com/dev=a", (HardwareKey(KeyKind.GPU_UUID, GPU_4),)),) == (
            parse_cdi_spec(json.dumps(spec), yaml_format=False)
        )


class TestCollectDegrades:
    def test_a_bad_metadata_file_loses_only_itself(self, tree: Path) -> None:
        """Of two metadata files, the one that is not JSON is one issue; the other reads."""
        claim = tree / "plugins" / SRIOV / "dra-device-metadata" / "net_a-claim" / "vf"
        claim.mkdir(parents=True)
        (claim / "metadata.json").write_text("{not json")
        readings = _collect(tree)
        assert readings.dra is not None
        assert CHECKPOINT_DEVICES + METADATA_DEVICES == readings.dra.devices
        assert [("garbage", True)] == [
            (i.error, str(claim / "metadata.json") in i.detail) for i in readings.issues
        ]

    def test_metadata_without_object_claim_is_named_by_its_directory(self, tree: Path) -> None:
        """A metadata object without its own name and namespace takes the claim
        directory's ``<namespace>_<claim>``."""
        path = next((tree / "plugins" / SRIOV).rglob("metadata.json"))
        documents = [json.loads(line) for line in path.read_text().splitlines()]
        for document in documents:
            document["metadata"] = {}
        path.write_text("".join(json.dumps(d) + "\n" for d in documents))
        readings = _collect(tree)
        assert readings.dra is not None
        assert METADATA_DEVICES == readings.dra.devices[len(CHECKPOINT_DEVICES) :]

    def test_an_unlistable_plugins_directory_is_an_issue(self, tree: Path) -> None:
        """A plugins directory the kernel will not resolve (a symlink loop: ELOOP) is an
        unreadable issue for the checkpoint and one for the metadata; CDI still reads."""
        shutil.rmtree(tree / "plugins")
        (tree / "plugins").symlink_to(tree / "plugins")
        readings = _collect(tree)
        assert Readings(dra=DraState(cdi_devices=CDI_DEVICES)) == replace(readings, issues=())
        assert ["unreadable", "unreadable"] == [i.error for i in readings.issues]

    def test_a_cdi_spec_that_cannot_be_statted_is_an_issue(self, tree: Path) -> None:
        """A spec name the kernel will not resolve (a symlink loop: ELOOP) is one
        unreadable issue naming it, not a spec silently skipped."""
        loop = tree / "cdi" / "loop.json"
        loop.symlink_to(loop)
        readings = _collect(tree)
        assert readings.dra is not None
        assert CDI_DEVICES == readings.dra.cdi_devices
        assert [("unreadable", True)] == [(i.error, str(loop) in i.detail) for i in readings.issues]

    def test_a_cdi_directory_past_the_entry_cap_is_an_issue(self, tree: Path) -> None:
        """A CDI directory with more entries than the cap is refused, as one issue, not
        listed without end; the other sources still read."""
        crowded = tree / "crowded"
        crowded.mkdir()
        for n in range(dra_module.MAX_DIRECTORY_ENTRIES + 1):
            (crowded / f"{n}.txt").touch()
        readings = _collect(tree, tree / "cdi", crowded)
        assert readings.dra is not None
        assert CDI_DEVICES == readings.dra.cdi_devices
        assert [("garbage", True)] == [(i.error, str(crowded) in i.detail) for i in readings.issues]

    def test_cdi_temporary_files_are_not_read(self, tree: Path) -> None:
        """The CDI library writes a spec as ``spec.*.tmp`` and renames it: a file that is
        neither ``.json`` nor ``.yaml`` is not a spec, half-written or not."""
        (tree / "cdi" / "spec.1234567.tmp").write_text('{"cdiVersion": "0.5.0", "ki')
        readings = _collect(tree)
        assert readings.dra is not None
        assert (CDI_DEVICES, ()) == (readings.dra.cdi_devices, readings.issues)


class TestBootStart:
    def test_the_boot_started_uptime_seconds_ago_not_idle_seconds(self, tree: Path) -> None:
        """/proc/uptime's first field dates the boot; the second, idle time summed over
        CPUs, does not: a file written after the boot but before now less idle is fresh."""
        (tree / "proc" / "stat").unlink()
        (tree / "proc" / "uptime").write_text("3600.25 1800.50\n")
        _install(tree, "v25.12.0", modified_s=time.time() - 2400)
        assert () == _collect(tree).issues


class TestCdiCacheVersions:
    def _write(self, path: Path, node: str) -> None:
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "vendor.example.com/dev",
            "devices": [{"name": "a", "containerEdits": {"deviceNodes": [{"path": node}]}}],
        }
        path.write_text(json.dumps(spec))

    def _keys(self, collector: DraCollector) -> tuple[HardwareKey, ...]:
        dra = collector.collect().dra
        assert dra is not None
        return dict(dra.cdi_devices).get("vendor.example.com/dev=a", ())

    def test_a_spec_rewritten_to_another_size_is_read_again(self, tree: Path) -> None:
        """Rewritten in place within one mtime tick (same inode and mtime), a spec of a
        new size is a new version."""
        path = tree / "cdi" / "vendor.example.com-dev.json"
        self._write(path, "/dev/dri/card1")
        collector = DraCollector(_context(tree))
        assert (HardwareKey(KeyKind.DRM_CARD, "1"),) == self._keys(collector)
        status = path.stat()
        self._write(path, "/dev/dri/card12")
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
        assert (HardwareKey(KeyKind.DRM_CARD, "12"),) == self._keys(collector)

    def test_a_spec_replaced_by_rename_is_read_again(self, tree: Path) -> None:
        """The CDI library replaces a spec by renaming a new file over it: a new inode is
        a new version, even of the same size and mtime."""
        path = tree / "cdi" / "vendor.example.com-dev.json"
        self._write(path, "/dev/dri/card1")
        collector = DraCollector(_context(tree))
        assert (HardwareKey(KeyKind.DRM_CARD, "1"),) == self._keys(collector)
        status = path.stat()
        new = tree / "cdi" / "spec.1.tmp"
        self._write(new, "/dev/dri/card2")
        os.utime(new, ns=(status.st_atime_ns, status.st_mtime_ns))
        os.rename(new, path)
        assert (HardwareKey(KeyKind.DRM_CARD, "2"),) == self._keys(collector)

    def test_the_cache_holds_only_the_specs_still_there(self, tree: Path) -> None:
        """Transient specs come and go with every claim: the parsed ones of specs that
        are gone are dropped, so the cache does not grow with the claims a node saw."""
        collector = DraCollector(_context(tree))
        for n in range(20):
            self._write(tree / "cdi" / f"vendor.example.com-dev_{n}.json", f"/dev/dri/card{n}")
            collector.collect()
            (tree / "cdi" / f"vendor.example.com-dev_{n}.json").unlink()
        collector.collect()
        assert sorted(p.name for p in (tree / "cdi").iterdir()) == sorted(
            p.name for p in collector._cdi_cache
        )


class TestBootStartFallbacks:
    def test_a_proc_stat_without_btime_falls_back_to_uptime(self, tree: Path) -> None:
        """A /proc/stat that says no btime (a virtualised /proc) is passed over for
        /proc/uptime, not taken as a bad checkpoint."""
        (tree / "proc" / "stat").write_text("cpu  1 2 3 4\nintr 0\n")
        (tree / "proc" / "uptime").write_text("3600.25 1800.50\n")
        _install(tree, "v25.12.0", modified_s=time.time() - 60)
        assert () == _collect(tree).issues

    def test_an_uptime_without_a_fraction_dates_the_boot(self, tree: Path) -> None:
        """The fraction is optional: a whole number of seconds is an uptime."""
        (tree / "proc" / "stat").write_text("cpu  1 2 3 4\nintr 0\n")
        (tree / "proc" / "uptime").write_text("3600 1800\n")
        _install(tree, "v25.12.0", modified_s=time.time() - 60)
        assert () == _collect(tree).issues

    @pytest.mark.parametrize(
        "uptime",
        [
            "not-a-number",
            "nan 1.00",
            "inf 1.00",
            "-inf",
            "-3600.25 1.00",
            "1_000 2",
            "9" * 400 + " 1.00",  # float() gives inf: a boot dated -inf
        ],
    )
    def test_an_uptime_that_is_no_number_dates_nothing(self, tree: Path, uptime: str) -> None:
        """Neither /proc/stat's btime nor a number in /proc/uptime: the boot is not dated
        and a checkpoint without nodeBootID is stale, not garbage. float() would take
        "nan" or "inf", and a boot dated nan or -inf took a years-old checkpoint's MIG
        devices for this boot's."""
        (tree / "proc" / "stat").unlink()
        (tree / "proc" / "uptime").write_text(f"{uptime}\n")
        _install(tree, "v25.12.0", modified_s=BOOT_STARTED_S - 365 * 86400)
        assert [("stale_checkpoint", True)] == [
            (i.error, i.detail.endswith("and no boot time")) for i in _collect(tree).issues
        ]


class TestStreamsAndNames:
    def test_a_stream_entry_that_is_no_object_is_skipped(self) -> None:
        """A JSON stream value that is not an object (a newer writer's, or junk) is passed
        over; the v1alpha1 object after it is read."""
        document = {
            "apiVersion": "metadata.resource.k8s.io/v1alpha1",
            "requests": [
                {
                    "name": "r",
                    "devices": [
                        {
                            "driver": "d.example.com",
                            "name": "x",
                            "attributes": {"uuid": {"string": GPU_4}},
                        }
                    ],
                }
            ],
        }
        text = "[1, 2]\n" + json.dumps(document) + "\n"
        (device,) = parse_device_metadata(text, claim_namespace="a", claim_name="b")
        assert (HardwareKey(KeyKind.GPU_UUID, GPU_4),) == device.keys

    @pytest.mark.parametrize("name", [None, ""])
    def test_a_cdi_device_without_a_name_refuses_its_spec(self, name: str | None) -> None:
        """CDI refuses a spec with a device it cannot name ("invalid (empty) device name",
        pkg/parser ValidateDeviceName): its other devices are not used either."""
        nodes = {"deviceNodes": [{"path": "/dev/nvidia1"}]}
        nameless = (
            {"containerEdits": nodes} if name is None else {"name": name, "containerEdits": nodes}
        )
        spec = {
            "cdiVersion": "0.5.0",
            "kind": "vendor.example.com/dev",
            "devices": [nameless, {"name": "b", "containerEdits": nodes}],
        }
        with pytest.raises(ValueError, match="a device without a name"):
            parse_cdi_spec(json.dumps(spec), yaml_format=False)


# Specs CDI refuses whole (pkg/cdi/spec.go validate, device.go validate,
# container-edits.go Validate, pkg/parser): (what is wrong, the change to a good spec).
_NODE = {"path": "/dev/nvidia1"}
_REFUSED_SPECS: list[tuple[str, dict[str, Any]]] = [
    ("vendor", {"kind": "-vendor.example.com/dev"}),
    ("vendor", {"kind": "1vendor.example.com/dev"}),
    ("class", {"kind": "vendor.example.com/dev/x"}),
    ("class", {"kind": "vendor.example.com/dev-"}),
    ("class", {"kind": "vendor.example.com/dev:x"}),
    ("device name", {"device": {"name": "gpu 1"}}),
    ("device name", {"device": {"name": "gpu/1"}}),
    ("device name", {"device": {"name": "-gpu"}}),
    ("device name", {"device": {"name": "gpu:"}}),
    ("environment entry", {"edits": {"env": ["=1"]}}),
    ("environment entry", {"edits": {"env": ["NOVALUE"]}}),
    ("environment entry", {"spec_edits": {"env": ["NOVALUE"]}}),
    ("environment entry", {"edits": {"env": [1]}}),
    (
        "environment entry",
        {
            "edits": {
                "env": ["A=1"],
                "hooks": [{"hookName": "prestart", "path": "/h", "env": ["X"]}],
            }
        },
    ),
    ("without a path", {"edits": {"deviceNodes": [{"hostPath": "/dev/nvidia1"}]}}),
    ("has type", {"edits": {"deviceNodes": [{**_NODE, "type": "x"}]}}),
    ("has permissions", {"edits": {"deviceNodes": [{**_NODE, "permissions": "rwx"}]}}),
    ("has permissions", {"edits": {"deviceNodes": [{**_NODE, "permissions": 7}]}}),
    ("hook name", {"edits": {"env": ["A=1"], "hooks": [{"hookName": "pre", "path": "/h"}]}}),
    ("without a path", {"edits": {"env": ["A=1"], "hooks": [{"hookName": "prestart"}]}}),
    ("mount without", {"edits": {"env": ["A=1"], "mounts": [{"hostPath": "/a"}]}}),
    ("net device without", {"edits": {"netDevices": [{"hostInterfaceName": "eth1"}]}}),
    (
        "listed twice",
        {
            "edits": {
                "netDevices": [
                    {"hostInterfaceName": "eth1", "name": "net0"},
                    {"hostInterfaceName": "eth1", "name": "net1"},
                ]
            }
        },
    ),
    (
        "listed twice",
        {
            "edits": {
                "netDevices": [
                    {"hostInterfaceName": "eth1", "name": "net0"},
                    {"hostInterfaceName": "eth2", "name": "net0"},
                ]
            }
        },
    ),
    ("no devices", {"no_devices": True}),
]


def _spec(change: dict[str, Any]) -> str:
    device: dict[str, Any] = {
        "name": "gpu-1",
        "containerEdits": change.get("edits", {"deviceNodes": [_NODE]}),
        **change.get("device", {}),
    }
    spec: dict[str, Any] = {
        "cdiVersion": "0.6.0",
        "kind": change.get("kind", "vendor.example.com/dev"),
        "devices": [] if change.get("no_devices") else [device],
    }
    if "spec_edits" in change:
        spec["containerEdits"] = change["spec_edits"]
    return json.dumps(spec)


class TestCdiValidation:
    """A spec CDI's runtimes refuse is skipped by them whole (pkg/cdi/cache.go): it
    must name no hardware here either, nor shadow or conflict with a valid spec."""

    @pytest.mark.parametrize(("wrong", "change"), _REFUSED_SPECS)
    def test_a_spec_cdi_refuses_is_refused(self, wrong: str, change: dict[str, Any]) -> None:
        with pytest.raises(ValueError, match=wrong):
            parse_cdi_spec(_spec(change), yaml_format=False)

    @pytest.mark.parametrize(
        "change",
        [
            {"kind": "v/c"},
            {"kind": "Vendor_1.example-x.com/gpu.shared_2"},
            {"device": {"name": "0"}},
            {"device": {"name": "MIG-gpu_1.2:3"}},
            {"edits": {"deviceNodes": [{**_NODE, "type": "c", "permissions": "rw"}]}},
            {"edits": {"deviceNodes": [{**_NODE, "permissions": "none"}]}},
            {"edits": {"deviceNodes": [{**_NODE, "type": "b", "permissions": "mrw"}]}},
            # YAML's "type:" and "permissions:" left empty: null, which CDI reads as "".
            {"edits": {"deviceNodes": [{**_NODE, "type": None, "permissions": None}]}},
            {"edits": {"env": ["A=1"], "hooks": [{"hookName": "poststop", "path": "/h"}]}},
            {"edits": {"env": ["A=", "B=1=2"]}},
            {
                "edits": {
                    "env": ["A=1"],
                    "hooks": [{"hookName": "createContainer", "path": "/h", "env": ["X=1"]}],
                    "mounts": [{"hostPath": "/a", "containerPath": "/b"}],
                }
            },
            {"spec_edits": {"env": ["A=1"], "mounts": [{"hostPath": "/a", "containerPath": "/b"}]}},
        ],
    )
    def test_a_spec_cdi_accepts_is_read(self, change: dict[str, Any]) -> None:
        ((name, _keys),) = parse_cdi_spec(_spec(change), yaml_format=False)
        assert name.endswith("=" + change.get("device", {}).get("name", "gpu-1"))

    def test_a_refused_spec_in_the_first_directory_shadows_no_later_one(self, tree: Path) -> None:
        """CDI skips the refused spec, so the device is the later directory's: before,
        the refused spec's /dev/nvidia7 named it."""
        first, later = tree / "run-cdi", tree / "etc-cdi"
        first.mkdir()
        later.mkdir()
        broken = {"deviceNodes": [{"path": "/dev/nvidia7", "permissions": "rwx"}]}
        good = {"deviceNodes": [{"path": "/dev/nvidia2"}]}
        for directory, edits in ((first, broken), (later, good)):
            spec = {
                "cdiVersion": "0.6.0",
                "kind": "vendor.example.com/dev",
                "devices": [{"name": "gpu-1", "containerEdits": edits}],
            }
            (directory / "vendor.example.com-dev.json").write_text(json.dumps(spec))
        readings = _collect(tree, first, later)
        assert readings.dra is not None
        assert (HardwareKey(KeyKind.NVIDIA_MINOR, "2"),) == dict(readings.dra.cdi_devices)[
            "vendor.example.com/dev=gpu-1"
        ]
        assert ["garbage"] == [i.error for i in readings.issues]


def _assert_all_read_but(broken: Path, readings: Readings) -> None:
    """Every device of the tree read, and one issue: ``broken`` unreadable."""
    assert readings.dra is not None
    assert CHECKPOINT_DEVICES + METADATA_DEVICES == readings.dra.devices
    assert [("unreadable", True)] == [(i.error, str(broken) in i.detail) for i in readings.issues]


class TestListingFailuresStayLocal:
    def test_one_drivers_unlistable_metadata_loses_that_driver_only(self, tree: Path) -> None:
        """A driver's metadata directory the kernel will not resolve (ELOOP) is one issue;
        the next driver's metadata still reads."""
        broken = tree / "plugins" / "a.example.com" / "dra-device-metadata"
        broken.parent.mkdir()
        broken.symlink_to(broken)
        _assert_all_read_but(broken, _collect(tree))

    def test_one_unlistable_claim_directory_loses_that_claim_only(self, tree: Path) -> None:
        """A claim's metadata directory the kernel will not resolve (ELOOP) is one issue;
        the other claims of its driver still read (they were all lost with it)."""
        broken = tree / "plugins" / SRIOV / "dra-device-metadata" / "net_a-broken-claim"
        broken.symlink_to(broken)
        _assert_all_read_but(broken, _collect(tree))

    def test_an_unlistable_cdi_directory_loses_that_directory_only(self, tree: Path) -> None:
        """A CDI directory the kernel will not resolve (ELOOP) is one issue; the next
        directory's specs still read."""
        loop = tree / "cdi-loop"
        loop.symlink_to(loop)
        readings = _collect(tree, loop, tree / "cdi")
        assert readings.dra is not None
        assert CDI_DEVICES == readings.dra.cdi_devices
        assert [("unreadable", True)] == [(i.error, str(loop) in i.detail) for i in readings.issues]


class TestStrayEntries:
    def test_a_socket_beside_the_drivers_is_no_driver(self, tree: Path) -> None:
        """A plugin's socket directly under the plugins directory is not a driver's
        directory: it has no metadata, and is no issue."""
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(str(tree / "plugins" / "dra.sock"))
            readings = _collect(tree)
        assert readings.dra is not None
        assert (CHECKPOINT_DEVICES + METADATA_DEVICES, ()) == (
            readings.dra.devices,
            readings.issues,
        )

    def test_a_file_beside_the_request_directories_is_no_request(self, tree: Path) -> None:
        """A file in a claim's metadata directory is not a request directory: nothing
        under it to read, and no issue."""
        claim = next((tree / "plugins" / SRIOV).rglob("metadata.json")).parent.parent
        (claim / "notes").write_text("x")
        readings = _collect(tree)
        assert readings.dra is not None
        assert (CHECKPOINT_DEVICES + METADATA_DEVICES, ()) == (
            readings.dra.devices,
            readings.issues,
        )

    def test_a_dangling_spec_link_is_a_spec_gone(self, tree: Path) -> None:
        """A spec name whose link points nowhere is a spec removed since listed: no
        devices, no issue."""
        (tree / "cdi" / "gone.json").symlink_to(tree / "cdi" / "nowhere.json")
        readings = _collect(tree)
        assert readings.dra is not None
        assert (CDI_DEVICES, ()) == (readings.dra.cdi_devices, readings.issues)


class TestHostileYaml:
    @pytest.mark.parametrize(
        "scalar",
        ["!!bool maybe", "!!timestamp yesterday", "!!int ''", "!!float '1:" + "1:" * 400 + "1'"],
    )
    def test_a_scalar_its_tag_cannot_take_loses_that_spec_only(
        self, tree: Path, scalar: str
    ) -> None:
        """SafeLoader's constructors raise KeyError, AttributeError, IndexError or
        OverflowError, not YAMLError, for such a scalar: that escaped the collector and
        lost every driver's files each poll. It is one bad spec now."""
        (tree / "cdi" / "tagged.yaml").write_text(f"kind: {scalar}\ndevices: []\n")
        readings = _collect(tree)
        assert readings.dra is not None
        assert (CHECKPOINT_DEVICES + METADATA_DEVICES, CDI_DEVICES) == (
            readings.dra.devices,
            readings.dra.cdi_devices,
        )
        assert [("garbage", True)] == [
            (i.error, "cannot construct" in i.detail) for i in readings.issues
        ]

    def test_a_spec_of_too_many_nodes_is_refused_before_it_takes_the_memory(
        self, tree: Path
    ) -> None:
        """The pure-Python parser holds ~1 KiB per node: a 4 MiB spec (under
        MAX_CDI_SPEC_BYTES) of CDI's own shape took 280 MiB of RSS and 10 s, past the
        DaemonSet's 256 MiB limit. Past MAX_CDI_YAML_NODES the spec is refused."""
        zeros = ", ".join(["0"] * 50_001)  # MAX_CDI_YAML_NODES + 1
        (tree / "cdi" / "wide.yaml").write_text(f"kind: a.b/c\ndevices: []\nx: [{zeros}]\n")
        readings = _collect(tree)
        assert readings.dra is not None
        assert CDI_DEVICES == readings.dra.cdi_devices
        assert [("garbage", True)] == [
            (i.error, "more than 50000 YAML nodes" in i.detail) for i in readings.issues
        ]
