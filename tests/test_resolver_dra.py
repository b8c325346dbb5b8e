"""The resolver maps DRA claim devices to hardware keys: driver files, CDI specs, names.

The DraStates come from tests/fixtures/dra/, files written in the drivers' own formats
(its README names the upstream file each format was read from: the NVIDIA checkpoint
from NVIDIA/k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/checkpointv.go and prepared.go,
KEP-5304 metadata from kubernetes/enhancements keps/sig-node/5304-*, CDI specs from
cncf-tags/container-device-interface specs-go/config.go), parsed by the dra
collector's pure parsers; the device-name grammars are NVIDIA's
(deviceinfo.go ``gpu-%d``, mig.go ``gpu-%d-mig-%s-%d-%d``) and AMD's
(ROCm/k8s-gpu-dra-driver deviceinfo.go ``gpu-%v-%v``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.collectors.dra import (
    CHECKPOINT_SOURCE,
    METADATA_SOURCE,
    parse_cdi_spec,
    parse_device_metadata,
    parse_nvidia_checkpoint,
)
from exporter.model import ClaimDevice, DraDevice, DraState, HardwareKey, KeyKind, Resolution
from exporter.resolver import (
    CDI_SOURCE,
    GRAMMAR_SOURCE,
    cdi_names_device,
    resolve_claim_device,
)

FIXTURES = Path(__file__).parent / "fixtures" / "dra"
BOOT_ID = (FIXTURES / "proc" / "sys" / "kernel" / "random" / "boot_id").read_text().strip()
NVIDIA_UID = "3f9a1c52-7b1e-4d2a-9c8e-1f2a3b4c5d6e"
AMD_UID = "5a7c3e91-0d2b-4f6a-8e1c-9b8a7f6e5d4c"
GPU_4 = "GPU-4e1f0a9b-5e1f-4c2a-9d3b-000000000104"
GPU_5 = "GPU-4e1f0a9b-5e1f-4c2a-9d3b-000000000105"
MIG = "MIG-0b5d7e21-5e1f-4c2a-9d3b-000000000501"
MIG_NAME = "gpu-5-mig-1g10gb-19-3"
SRIOV = "sriovnetwork.k8snetworkplumbingwg.io"
NVIDIA_CDI = f"k8s.gpu.nvidia.com/claim={NVIDIA_UID}"


def _checkpoint_devices() -> tuple[DraDevice, ...]:
    text = (FIXTURES / "plugins" / "gpu.nvidia.com" / "checkpoint.json").read_text()
    return parse_nvidia_checkpoint(text, boot_id=BOOT_ID)


def _metadata_devices() -> tuple[DraDevice, ...]:
    claim_dir = FIXTURES / "plugins" / SRIOV / "dra-device-metadata" / "net_dpdk-claim"
    text = (claim_dir / "vf" / "metadata.json").read_text()
    return parse_device_metadata(text, claim_namespace="net", claim_name="dpdk-claim")


def _cdi_devices() -> tuple[tuple[str, tuple[HardwareKey, ...]], ...]:
    found: list[tuple[str, tuple[HardwareKey, ...]]] = []
    for path in sorted((FIXTURES / "cdi").iterdir()):
        found.extend(parse_cdi_spec(path.read_text(), yaml_format=path.suffix == ".yaml"))
    return tuple(found)


ALL_FILES = DraState(
    devices=_checkpoint_devices() + _metadata_devices(), cdi_devices=_cdi_devices()
)
CDI_ONLY = DraState(cdi_devices=_cdi_devices())
NOTHING = DraState()

# The kubelet builds cdi_devices once per driver: both devices of the NVIDIA claim carry
# both CDI names, the MIG device's first.
NVIDIA_CDI_NAMES = (f"{NVIDIA_CDI}-{MIG_NAME}", f"{NVIDIA_CDI}-gpu-4")
GPU4 = ClaimDevice("gpu.nvidia.com", "node-a", "gpu-4", cdi_devices=NVIDIA_CDI_NAMES)
MIG_DEVICE = ClaimDevice("gpu.nvidia.com", "node-a", MIG_NAME, cdi_devices=NVIDIA_CDI_NAMES)
AMD = ClaimDevice(
    "gpu.amd.com",
    "node-a",
    "gpu-3-130",
    cdi_devices=("k8s.gpu.amd.com/gpu=common", f"k8s.gpu.amd.com/gpu={AMD_UID}-gpu-3-130"),
)
VF = ClaimDevice(
    SRIOV,
    "node-a",
    "0000-4b-00-5",
    share_id="0d6f3c2a-1b4e-4c5d-8e9f-a0b1c2d3e4f5",
    cdi_devices=(f"{SRIOV}/metadata=c41d8e2a-6b3f-4e7a-9d1c-2b3a4c5d6e7f_vf",),
)


def _resolve(
    device: ClaimDevice, dra: DraState, *, claim: tuple[str, str] = ("ml", "llm-gpus")
) -> Resolution:
    return resolve_claim_device(device, claim_namespace=claim[0], claim_name=claim[1], dra=dra)


class TestNvidia:
    def test_whole_gpu_from_the_checkpoint(self) -> None:
        """The checkpoint is authoritative: gpu-4 is the GPU of the UUID it recorded."""
        expected = Resolution(
            "gpu-4", keys=(HardwareKey(KeyKind.GPU_UUID, GPU_4),), source=CHECKPOINT_SOURCE
        )
        assert expected == _resolve(GPU4, ALL_FILES)

    def test_mig_device_from_the_checkpoint(self) -> None:
        """A MIG device the driver created is known by UUID and GI/CI from the checkpoint."""
        expected = Resolution(
            MIG_NAME,
            keys=(
                HardwareKey(KeyKind.MIG_UUID, MIG),
                HardwareKey(KeyKind.MIG_PATH, f"{GPU_5}/5/0"),
                HardwareKey(KeyKind.NVIDIA_MINOR_GI, "5/5"),
            ),
            source=CHECKPOINT_SOURCE,
        )
        assert expected == _resolve(MIG_DEVICE, ALL_FILES)

    def test_whole_gpu_from_its_cdi_spec(self) -> None:
        """Without the checkpoint the claim's CDI spec names /dev/nvidia4, found by name."""
        expected = Resolution(
            "gpu-4", keys=(HardwareKey(KeyKind.NVIDIA_MINOR, "4"),), source=CDI_SOURCE
        )
        assert expected == _resolve(GPU4, CDI_ONLY)

    def test_mig_device_without_the_checkpoint(self) -> None:
        """A MIG name gives its physical slot only: parent minor, GI profile, placement.

        Its CDI spec names the parent's /dev/nvidia5, which is not this device.
        """
        expected = Resolution(
            MIG_NAME, keys=(HardwareKey(KeyKind.MIG_PLACEMENT, "5/19/3"),), source=GRAMMAR_SOURCE
        )
        assert expected == _resolve(MIG_DEVICE, CDI_ONLY)

    @pytest.mark.parametrize(
        ("name", "slot"),
        [
            ("gpu-0-mig-9-4-4", "0/9/4"),  # A100 40GB: 3g.20gb (ID 9) at placement 4
            ("gpu-0-mig-19-2-1", "0/19/2"),  # 1g.5gb (ID 19) at placement 2
            ("gpu-7-mig-0-0-8", "7/0/0"),  # 7g.40gb (ID 0), all 8 slices
            ("gpu-0-mig-3g20gb-9-4", "0/9/4"),  # v25.12+: the profile name first
            # 1g.10gb+me: toRFC1123Compliant writes "+" as "-", so the name has a dash.
            ("gpu-0-mig-1g10gb-me-20-0", "0/20/0"),
        ],
    )
    def test_mig_names_of_each_release(self, name: str, slot: str) -> None:
        """v25.3/v25.8 name a MIG device gpu-<minor>-mig-<GI profile ID>-<placement
        start>-<placement size> (deviceinfo.go@v25.8.1 MigDeviceInfo.CanonicalName),
        v25.12+ gpu-<minor>-mig-<profile>-<GI profile ID>-<placement start> (mig.go
        ToCanonicalName): both give the slot minor/profile ID/start."""
        device = ClaimDevice("gpu.nvidia.com", "node-a", name)
        assert (HardwareKey(KeyKind.MIG_PLACEMENT, slot),) == _resolve(device, NOTHING).keys

    def test_whole_gpu_from_its_name(self) -> None:
        """With no driver file at all, gpu-<minor> gives the minor."""
        expected = Resolution(
            "gpu-4", keys=(HardwareKey(KeyKind.NVIDIA_MINOR, "4"),), source=GRAMMAR_SOURCE
        )
        assert expected == _resolve(GPU4, NOTHING)

    def test_checkpoint_entry_serves_any_claim(self) -> None:
        """The driver writes no claim name into a PrepareCompleted entry, so its device
        is that device whichever claim the kubelet names: the one prepared this boot."""
        assert CHECKPOINT_SOURCE == _resolve(GPU4, ALL_FILES, claim=("ml", "other")).source

    def test_checkpoint_entry_of_another_pool(self) -> None:
        """Driver, pool and device must all match a file's entry."""
        device = ClaimDevice("gpu.nvidia.com", "node-b", "gpu-4")
        assert GRAMMAR_SOURCE == _resolve(device, ALL_FILES).source

    def test_checkpoint_entry_without_a_pool_serves_every_pool(self) -> None:
        """An entry that names no pool is the device of that name in any pool."""
        keys = (HardwareKey(KeyKind.MIG_UUID, MIG),)
        entry = DraDevice("gpu.nvidia.com", "", MIG_NAME, keys, CHECKPOINT_SOURCE)
        resolution = _resolve(MIG_DEVICE, DraState(devices=(entry,)))
        assert (keys, CHECKPOINT_SOURCE) == (resolution.keys, resolution.source)

    def test_checkpoint_entry_of_another_driver(self) -> None:
        """A device of the same name from another driver is not the checkpoint's GPU."""
        keys = (HardwareKey(KeyKind.GPU_UUID, GPU_4),)
        entry = DraDevice("gpu.nvidia.com", "node-a", "gpu-4", keys, CHECKPOINT_SOURCE)
        device = ClaimDevice("gpu.example.com", "node-a", "gpu-4")
        assert () == _resolve(device, DraState(devices=(entry,))).keys

    def test_the_checkpoint_wins_over_metadata_for_one_device(self) -> None:
        """Two driver files naming one device: the first read (the checkpoint) wins."""

        def gpu_4_as(uuid: str, source: str, *claim: str) -> DraDevice:
            keys = (HardwareKey(KeyKind.GPU_UUID, uuid),)
            return DraDevice("gpu.nvidia.com", "node-a", "gpu-4", keys, source, *claim)

        checkpoint = gpu_4_as(GPU_4, CHECKPOINT_SOURCE)
        metadata = gpu_4_as(GPU_5, METADATA_SOURCE, "ml", "llm-gpus")
        resolution = _resolve(GPU4, DraState(devices=(checkpoint, metadata)))
        assert ((HardwareKey(KeyKind.GPU_UUID, GPU_4),), CHECKPOINT_SOURCE) == (
            resolution.keys,
            resolution.source,
        )

    def test_unknown_nvidia_name(self) -> None:
        """A vfio GPU no file describes is unresolved, with a reason."""
        resolution = _resolve(ClaimDevice("gpu.nvidia.com", "node-a", "gpu-vfio-0"), NOTHING)
        assert ("gpu-vfio-0", (), True) == (
            resolution.physical_id,
            resolution.keys,
            bool(resolution.unresolved and "gpu-vfio-0" in resolution.unresolved),
        )


class TestAmd:
    def test_card_and_render_node_from_the_cdi_spec(self) -> None:
        """AMD's claim spec names /dev/dri/card3 and renderD130; "common" names nothing."""
        expected = Resolution(
            "gpu-3-130",
            keys=(HardwareKey(KeyKind.DRM_CARD, "3"), HardwareKey(KeyKind.DRM_RENDER, "130")),
            source=CDI_SOURCE,
        )
        assert expected == _resolve(AMD, ALL_FILES)

    def test_amd_names_only_for_amd(self) -> None:
        """gpu-<card>-<render> is AMD's grammar: another driver's device of that shape
        is unresolved, not taken for DRM card 1."""
        device = ClaimDevice("gpu.example.com", "node-a", "gpu-1-129")
        assert () == _resolve(device, NOTHING).keys

    def test_card_and_render_node_from_the_name(self) -> None:
        """gpu-<card>-<render> gives both DRM nodes without any file."""
        expected = Resolution(
            "gpu-3-130",
            keys=(HardwareKey(KeyKind.DRM_CARD, "3"), HardwareKey(KeyKind.DRM_RENDER, "130")),
            source=GRAMMAR_SOURCE,
        )
        assert expected == _resolve(AMD, NOTHING)


class TestMetadata:
    def test_pci_address_from_kep_5304_metadata(self) -> None:
        """The standard pciBusID attribute of the claim's metadata gives the VF."""
        expected = Resolution(
            "0000-4b-00-5",
            keys=(HardwareKey(KeyKind.PCI, "0000:4b:00.5"),),
            source=METADATA_SOURCE,
        )
        assert expected == _resolve(VF, ALL_FILES, claim=("net", "dpdk-claim"))

    def test_shared_device_resolves_for_each_claim(self) -> None:
        """A shared device has one metadata file per claim; each claim finds its own."""
        second = DraDevice(
            SRIOV,
            "node-a",
            "0000-4b-00-5",
            (HardwareKey(KeyKind.PCI, "0000:4b:00.5"),),
            METADATA_SOURCE,
            claim_namespace="net",
            claim_name="dpdk-claim-2",
        )
        dra = DraState(devices=(*ALL_FILES.devices, second))
        assert [(HardwareKey(KeyKind.PCI, "0000:4b:00.5"),)] * 2 == [
            _resolve(VF, dra, claim=claim).keys
            for claim in (("net", "dpdk-claim"), ("net", "dpdk-claim-2"))
        ]

    def test_metadata_of_another_claim_is_not_used(self) -> None:
        """Without its own metadata a claim's VF is found by the SR-IOV driver's name
        grammar alone (its PCI address in the name), not by another claim's file."""
        resolution = _resolve(VF, ALL_FILES, claim=("net", "someone-else"))
        assert (resolution.source, resolution.keys) == (
            "device name",
            (HardwareKey(KeyKind.PCI, "0000:4b:00.5"),),
        )

    @pytest.mark.parametrize(
        ("name", "keys"),
        [
            ("0000-4b-00-5", (HardwareKey(KeyKind.PCI, "0000:4b:00.5"),)),
            ("0000-af-1f-7", (HardwareKey(KeyKind.PCI, "0000:af:1f.7"),)),
            ("0000-4b-00-8", ()),  # no function 8
            ("10000-e1-00-1", (HardwareKey(KeyKind.PCI, "10000:e1:00.1"),)),  # behind a VMD
            ("0000-AF-00-1", ()),  # the driver writes the kernel's small letters
            ("0000-4b-00-5-1", ()),
            ("0000-4b-00-5\n", ()),
            ("eth1", ()),
        ],
    )
    def test_sriov_names_are_pci_addresses(self, name: str, keys: tuple[HardwareKey, ...]) -> None:
        """dra-driver-sriov names a VF by its PCI address with ':' and '.' made '-'
        (pkg/devicestate/discovery.go), and writes no metadata by default."""
        device = ClaimDevice(SRIOV, "node-a", name)
        assert keys == _resolve(device, DraState(), claim=("a", "b")).keys

    def test_entry_without_claim_matches_every_claim(self) -> None:
        """A file that does not say which claim (a v1 checkpoint entry) serves any."""
        entry = DraDevice(
            SRIOV, "node-a", "0000-4b-00-5", (HardwareKey(KeyKind.PCI, "0000:4b:00.6"),), "x"
        )
        resolution = _resolve(VF, DraState(devices=(entry,)), claim=("a", "b"))
        assert (HardwareKey(KeyKind.PCI, "0000:4b:00.6"),) == resolution.keys


class TestCdiNames:
    def test_out_of_order_names_match_by_name(self) -> None:
        """Each device takes the CDI entry that names it, wherever it stands."""
        cdi = (
            ("accel.example.com/dev=a0", (HardwareKey(KeyKind.PCI, "0000:01:00.0"),)),
            ("accel.example.com/dev=a1", (HardwareKey(KeyKind.PCI, "0000:02:00.0"),)),
        )
        names = ("accel.example.com/dev=a1", "accel.example.com/dev=a0")
        devices = [
            ClaimDevice("accel.example.com", "p", d, cdi_devices=names) for d in ("a0", "a1")
        ]
        expected = [
            (HardwareKey(KeyKind.PCI, "0000:01:00.0"),),
            (HardwareKey(KeyKind.PCI, "0000:02:00.0"),),
        ]
        assert expected == [_resolve(d, DraState(cdi_devices=cdi)).keys for d in devices]

    @pytest.mark.parametrize(
        ("cdi_device", "device", "expected"),
        [
            (f"{NVIDIA_CDI}-gpu-4", "gpu-4", True),
            # No Kubernetes UID is upper case: this prefix is no claim's.
            (f"k8s.gpu.nvidia.com/claim={NVIDIA_UID.upper()}-gpu-4", "gpu-4", False),
            (f"{NVIDIA_CDI}-gpu-14", "gpu-4", False),
            (f"{NVIDIA_CDI}-gpu-0", "0", False),  # the whole tail names the device
            (f"{NVIDIA_CDI}-{MIG_NAME}", "gpu-3", False),
            ("vendor.example.com/dev=gpu-4", "gpu-4", True),
            ("vendor.example.com/dev=foo-gpu-4", "gpu-4", False),
            (f"{SRIOV}/metadata=c41d8e2a-6b3f-4e7a-9d1c-2b3a4c5d6e7f_vf", "vf", False),
            ("gpu-4", "gpu-4", False),
        ],
    )
    def test_cdi_names_device(self, cdi_device: str, device: str, expected: bool) -> None:
        """A CDI name is a device's when its name is the device or <claim UID>-<device>."""
        assert expected == cdi_names_device(cdi_device, device)

    def test_the_first_spec_of_a_cdi_name_wins(self) -> None:
        """Two specs describing one CDI name (two --path.cdi directories): the first
        listed wins, as the flag says."""
        name = f"{NVIDIA_CDI}-gpu-4"
        cdi = (
            (name, (HardwareKey(KeyKind.GPU_UUID, GPU_4),)),
            (name, (HardwareKey(KeyKind.GPU_UUID, GPU_5),)),
        )
        device = ClaimDevice("gpu.example.com", "p", "gpu-4", cdi_devices=(name,))
        assert (HardwareKey(KeyKind.GPU_UUID, GPU_4),) == _resolve(
            device, DraState(cdi_devices=cdi)
        ).keys

    def test_cdi_name_without_spec(self) -> None:
        """A CDI name that no spec on the node describes gives no keys."""
        device = ClaimDevice(
            "gpu.example.com", "p", "gpu-0", cdi_devices=("gpu.example.com/gpu=gpu-0",)
        )
        assert () == _resolve(device, CDI_ONLY).keys


class TestUnresolved:
    def test_unknown_driver(self) -> None:
        """A driver nothing describes is kept under its device name, with the reason."""
        resolution = _resolve(ClaimDevice("fpga.example.com", "p", "fpga-0"), ALL_FILES)
        assert ("fpga-0", (), "") == (
            resolution.physical_id,
            resolution.keys,
            resolution.source,
        )
        assert resolution.unresolved is not None
        assert "fpga.example.com" in resolution.unresolved
        assert "\n" not in resolution.unresolved


@pytest.mark.parametrize(
    ("driver", "name", "expected"),
    [
        ("gpu.nvidia.com", "gpu-" + "9" * 5000, (HardwareKey(KeyKind.NVIDIA_MINOR, "9" * 5000),)),
        (
            "gpu.nvidia.com",
            f"gpu-0-mig-1g10gb-{'9' * 5000}-0",
            (HardwareKey(KeyKind.MIG_PLACEMENT, f"0/{'9' * 5000}/0"),),
        ),
        (
            "gpu.amd.com",
            "gpu-01-0128",
            (HardwareKey(KeyKind.DRM_CARD, "1"), HardwareKey(KeyKind.DRM_RENDER, "128")),
        ),
        ("gpu.nvidia.com", "gpu-\u0663", ()),
        # Each number of each form, leading zeros and other scripts' digits alike.
        ("gpu.nvidia.com", "gpu-04", (HardwareKey(KeyKind.NVIDIA_MINOR, "4"),)),
        (
            "gpu.nvidia.com",
            "gpu-0-mig-1g10gb-03-01",
            (HardwareKey(KeyKind.MIG_PLACEMENT, "0/3/1"),),
        ),
        ("gpu.nvidia.com", "gpu-0-mig-1g10gb-\u0663-0", ()),
        ("gpu.nvidia.com", "gpu-0-mig-\u0663-0-1", ()),
        ("gpu.amd.com", "gpu-\u0663-128", ()),
    ],
)
def test_numbers_in_device_names_are_taken_as_text(
    driver: str, name: str, expected: tuple[HardwareKey, ...]
) -> None:
    """A number past int()'s 4,300 digits keys as its digits rather than failing the
    join; digits of other scripts are no number."""
    resolution = resolve_claim_device(
        ClaimDevice(driver, "pool", name), claim_namespace="ns", claim_name="c", dra=DraState()
    )
    assert expected == resolution.keys
