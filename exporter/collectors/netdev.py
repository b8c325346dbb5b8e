"""Traffic counters of every network device of the node (``<sysfs>/class/net``).

Each host netdev backed by a device (one with a ``device`` link: not ``lo``, veth,
bridges, ifb) is reported under ``NETDEV <ifname>`` and, where the device is a PCI
function, ``PCI <address>``: the ``device`` link points at the function itself, or,
for virtio (the normal NIC of a VM), at ``<function>/virtio<N>`` whose parent folder
is the function. Counters come from ``class/net/<ifname>/statistics/``, labelled
``interface=<ifname>``.

An SR-IOV VF moved into a pod's network namespace (or bound to vfio-pci) is not in the
host's ``class/net``. Its traffic is read from the counters its PF keeps per VF,
``<pf>/sriov/<n>/stats`` (mlx5), where ``n`` is the PF's ``virtfn<n>`` link to the VF;
it is reported under ``PCI <vf address>`` and named by that address. Those samples are
labelled ``interface=<pf ifname>/vf<n>``: no real interface has that name (netdev
names cannot contain ``/``), which says where the figure came from. NVIDIA's
out-of-tree mlx5 (MLNX_OFED, DOCA; its ``sriov_sysfs.c``) writes ``stats`` as one file
of ``name : value`` lines; a folder of one file per counter is read too. The in-kernel
mlx5, ice, i40e and ixgbe drivers keep no such file (they answer netlink's VF stats
only), so there a VF inside a pod has no traffic figures -- unless the PF is in
switchdev mode (below). The per-VF counters have no error counts. Every VF, on the host
or not, also carries ``SRIOV_VF <pf address>/<n>``.

In switchdev mode (OVS hardware offload) the PF's driver adds a port representor per VF:
a host netdev whose ``device`` link names the PF, told apart by its ``phys_port_name``
(devlink's ``pf<n>vf<m>``, ``pf<n>sf<m>`` for a subfunction, ``c<k>`` before it for another
host's port; ice's own ``pf<port>vfr<m>`` before its devlink ports); the PF's own port,
the uplink, is ``p<n>``. A representor is reported under ``NETDEV <ifname>`` only: it is
not the PF, whose holder its traffic would otherwise be summed into. Where a VF of this
host is not on the host and its PF keeps no per-VF counters, its representor's
``statistics/`` give its traffic, as its driver reports them: mlx5 counts the eswitch
port, so the VF's receive is the representor's transmit ("flip tx/rx as we are reporting
the counters for the switch vport", en_rep.c; bytes and packets only, the rest is zero);
ice reports the VF's own counters (``ice_repr_get_stats64``: the VF's VSI). Other
drivers' representors give their VF no figures. Those samples are labelled as the PF's
per-VF counters are, ``interface=<pf ifname>/vf<n>``.

A missing counter (or a device gone since the listing, or being unregistered: its
counters answer EINVAL) gives no sample and no issue;
an unreadable or garbage one loses that figure and is reported as an issue with its
path. Which kubelet or DRA device names a NIC is ``exporter.resolver``'s business.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from exporter.collectors.base import (
    Collector,
    CollectorContext,
    CollectorError,
    Registration,
    issue,
)
from exporter.model import (
    CollectorIssue,
    DeviceIdentity,
    DeviceReading,
    HardwareKey,
    KeyKind,
    MetricKind,
    MetricSpec,
    Readings,
    Sample,
)
from exporter.pci_address import is_pci_address
from exporter.sysfs import (
    GARBAGE,
    MAX_COUNTER,
    UNREADABLE,
    KeptFiles,
    failed_with,
    file_issue,
    list_source_inodes,
    read_pci_id,
    read_text,
    vendor_name,
)

__all__ = [
    "NET_RECEIVE_BYTES",
    "NET_RECEIVE_DROPS",
    "NET_RECEIVE_ERRORS",
    "NET_RECEIVE_PACKETS",
    "NET_TRANSMIT_BYTES",
    "NET_TRANSMIT_DROPS",
    "NET_TRANSMIT_ERRORS",
    "NET_TRANSMIT_PACKETS",
    "REGISTRATION",
    "NetdevCollector",
    "net_samples",
    "parse_vf_stats",
    "pci_function",
]

_LABELS = ("interface",)
NET_RECEIVE_BYTES = MetricSpec(
    "podresources_net_receive_bytes_total",
    MetricKind.COUNTER,
    "Bytes the network interface received.",
    _LABELS,
)
NET_TRANSMIT_BYTES = MetricSpec(
    "podresources_net_transmit_bytes_total",
    MetricKind.COUNTER,
    "Bytes the network interface transmitted.",
    _LABELS,
)
NET_RECEIVE_PACKETS = MetricSpec(
    "podresources_net_receive_packets_total",
    MetricKind.COUNTER,
    "Packets the network interface received.",
    _LABELS,
)
NET_TRANSMIT_PACKETS = MetricSpec(
    "podresources_net_transmit_packets_total",
    MetricKind.COUNTER,
    "Packets the network interface transmitted.",
    _LABELS,
)
NET_RECEIVE_ERRORS = MetricSpec(
    "podresources_net_receive_errors_total",
    MetricKind.COUNTER,
    "Bad packets the network interface received.",
    _LABELS,
)
NET_TRANSMIT_ERRORS = MetricSpec(
    "podresources_net_transmit_errors_total",
    MetricKind.COUNTER,
    "Packets the network interface failed to transmit.",
    _LABELS,
)
NET_RECEIVE_DROPS = MetricSpec(
    "podresources_net_receive_drops_total",
    MetricKind.COUNTER,
    "Received packets the network interface dropped.",
    _LABELS,
)
NET_TRANSMIT_DROPS = MetricSpec(
    "podresources_net_transmit_drops_total",
    MetricKind.COUNTER,
    "Packets the network interface dropped instead of transmitting.",
    _LABELS,
)

# Kernel counter name -> family, in the order samples are reported.
_COUNTERS: tuple[tuple[str, MetricSpec], ...] = (
    ("rx_bytes", NET_RECEIVE_BYTES),
    ("tx_bytes", NET_TRANSMIT_BYTES),
    ("rx_packets", NET_RECEIVE_PACKETS),
    ("tx_packets", NET_TRANSMIT_PACKETS),
    ("rx_errors", NET_RECEIVE_ERRORS),
    ("tx_errors", NET_TRANSMIT_ERRORS),
    ("rx_dropped", NET_RECEIVE_DROPS),
    ("tx_dropped", NET_TRANSMIT_DROPS),
)
_MAX_DIGITS = len(str(MAX_COUNTER))
_VIRTFN = re.compile(r"^virtfn(\d+)$")
_VIRTIO = re.compile(r"^virtio\d+$")
# A switchdev port representor's phys_port_name: devlink's (net/devlink/port.c) for PF,
# VF and SF ports, c<controller> first for another host's; ice's own before devlink.
_REPRESENTOR = re.compile(r"^(c\d+)?pf(\d+)(?:(vfr?|sf)(\d+))?$")
# What a VF representor's statistics/ files say of its VF, by the PF's driver: (file,
# the VF's family). mlx5 counts the switch port, flipped from the VF's side; ice gives
# the VF's VSI counters as they are.
_REPRESENTED_VF_COUNTERS: dict[str, tuple[tuple[str, MetricSpec], ...]] = {
    "mlx5_core": (
        ("tx_bytes", NET_RECEIVE_BYTES),
        ("rx_bytes", NET_TRANSMIT_BYTES),
        ("tx_packets", NET_RECEIVE_PACKETS),
        ("rx_packets", NET_TRANSMIT_PACKETS),
    ),
    "ice": (
        ("rx_bytes", NET_RECEIVE_BYTES),
        ("tx_bytes", NET_TRANSMIT_BYTES),
        ("rx_packets", NET_RECEIVE_PACKETS),
        ("tx_packets", NET_TRANSMIT_PACKETS),
        ("tx_errors", NET_TRANSMIT_ERRORS),
        ("rx_dropped", NET_RECEIVE_DROPS),
        ("tx_dropped", NET_TRANSMIT_DROPS),
    ),
}


def parse_vf_stats(text: str) -> tuple[dict[str, int], tuple[str, ...]]:
    """mlx5's per-VF ``stats`` file (one ``name : value`` line per counter): the
    counters by name, and the lines that are not ``name : value`` with a 64-bit value
    (cut to 40 characters); a bad line loses only its own figure."""
    counters: dict[str, int] = {}
    bad: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        name, separator, value = line.partition(":")
        value = value.strip()
        # Length first: int() of a huge string is slow, and raises past 4300 digits.
        digits = value.isascii() and value.isdigit() and len(value) <= _MAX_DIGITS
        if separator and digits and int(value) <= MAX_COUNTER:
            counters[name.strip()] = int(value)
        else:
            bad.append(line[:40])
    return counters, tuple(bad)


def net_samples(counters: Mapping[str, int], *, interface: str) -> tuple[Sample, ...]:
    """Samples of the counters present in ``counters`` (kernel names), for one interface."""
    return tuple(
        Sample(spec, float(counters[name]), (interface,))
        for name, spec in _COUNTERS
        if name in counters
    )


def pci_function(device: Path) -> Path | None:
    """The PCI function a netdev's resolved ``device`` folder stands for, or None.

    The folder itself when it is a function; its parent for a virtio device
    (``<function>/virtio<N>``); None for other parents (USB, platform, virtio-mmio).
    """
    if is_pci_address(device.name):
        return device
    if _VIRTIO.match(device.name) and is_pci_address(device.parent.name):
        return device.parent
    return None


def _resolve(link: str) -> str | None:
    """Where a sysfs link leads, or None when it (or its target) does not exist.

    Raises CollectorError for anything else (a symlink loop, permissions).
    """
    try:
        return os.path.realpath(link, strict=True)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise CollectorError(f"cannot resolve {link}: {error.strerror or error}") from error


@dataclass(frozen=True, slots=True)
class _Interface:
    """A host netdev backed by a device, as resolved when it was first seen.

    None of it changes while the netdev exists: its ``device`` link, its function's
    ``physfn`` link and vendor are fixed when the kernel creates them.
    """

    name: str
    path: str  # <sysfs>/class/net/<name>, as on-call engineers know it
    function: str | None  # its PCI function's resolved folder
    physfn: str | None  # the function's PF's resolved folder, for a VF
    vendor: str | None
    # Made once, not every poll: what each reading of this netdev repeats.
    keys: tuple[HardwareKey, ...]  # NETDEV, and PCI for a PCI function's own netdev
    identity: DeviceIdentity
    counter_files: tuple[str, ...]  # statistics/<kernel name>, in _COUNTERS order
    labels: tuple[str, ...]  # the samples' (interface,)
    representor: _Representor | None = None  # a switchdev port representor


@dataclass(frozen=True, slots=True)
class _Representor:
    """A switchdev port representor of ``function``, the PF its ``device`` link names."""

    vf_index: int | None  # the VF of the PF it stands for; None for other ports
    # Its statistics/ files read as that VF's figures, with their families: () where its
    # driver's way of counting is not known here; and those files' paths.
    vf_counters: tuple[tuple[str, MetricSpec], ...]
    vf_files: tuple[str, ...]


def _new_interface(
    name: str,
    path: str,
    function: str | None,
    physfn: str | None,
    vendor: str | None,
    representor: _Representor | None = None,
) -> _Interface:
    keys = [HardwareKey(KeyKind.NETDEV, name)]
    identity = DeviceIdentity()
    if function is not None and representor is None:
        address = os.path.basename(function)
        keys.append(HardwareKey(KeyKind.PCI, address))
        identity = DeviceIdentity(pci_address=address, vendor=vendor)
    return _Interface(
        name,
        path,
        function,
        physfn,
        vendor,
        keys=tuple(keys),
        identity=identity,
        counter_files=tuple(f"{path}/statistics/{counter}" for counter, _ in _COUNTERS),
        labels=(name,),
        representor=representor,
    )


@dataclass(frozen=True, slots=True)
class _Vf:
    """A PF's ``virtfn<n>`` link, resolved when first seen."""

    index: int
    function: str  # the VF's resolved folder
    vendor: str | None
    stats: str  # <pf>/sriov/<n>/stats
    stats_is_dir: bool | None  # None: absent when first seen (the driver may add it later)


class NetdevCollector(Collector):
    """Traffic counters of every device-backed NIC, and of SR-IOV VFs through their PF.

    What a netdev's and a PF's links resolve to is kept between polls, checked against
    each poll's listing by name and inode (a re-created device has a new inode), and
    dropped with the entry; counter files are kept open (``KeptFiles``) and re-read.
    """

    name = "netdev"
    # NIC resources have no fixed name prefix (SR-IOV, host-device and virtio plugins
    # name them freely): an absent class/net is never judged a failure by the kubelet.
    known_errors = (UNREADABLE, GARBAGE)

    def __init__(self, context: CollectorContext) -> None:
        super().__init__(context)
        # class/net entry name -> (inode, the netdev, None for a virtual one)
        self._interfaces: dict[str, tuple[int, _Interface | None]] = {}
        # PF folder -> its virtfn<n> entries: name -> (inode, the VF, None if not a VF)
        self._vf_links: dict[str, dict[str, tuple[int, _Vf | None]]] = {}
        self._files = KeptFiles.under(context.sysfs)

    def collect(self) -> Readings:
        class_dir = str(self.context.sysfs / "class" / "net")
        listed = list_source_inodes(
            class_dir, absent=f"no network devices: {class_dir} does not exist"
        )
        issues: list[CollectorIssue] = []
        interfaces = self._interfaces_of(class_dir, listed, issues)
        vfs_of = self._vfs_of_pfs(interfaces, issues)
        vf_keys = {
            vf.function: HardwareKey(KeyKind.SRIOV_VF, f"{os.path.basename(pf)}/{vf.index}")
            for pf, vfs in vfs_of.items()
            for vf in vfs
        }
        readings = [self._read_interface(i, vf_keys, issues) for i in interfaces]
        readings += self._read_moved_vfs(interfaces, vfs_of, issues)
        self._files.sweep()
        return Readings(devices=tuple(readings), issues=tuple(issues))

    def close(self) -> None:
        self._files.close()

    def _interfaces_of(
        self, class_dir: str, listed: list[tuple[str, int]], issues: list[CollectorIssue]
    ) -> list[_Interface]:
        """The device-backed netdevs listed, from the cache where name and inode match."""
        kept: dict[str, tuple[int, _Interface | None]] = {}
        found: list[_Interface] = []
        for name, inode in listed:
            cached = self._interfaces.get(name)
            if cached is not None and cached[0] == inode:
                interface = cached[1]
            else:
                if cached is not None and cached[1] is not None:
                    # Another netdev has this name now (renamed, or gone and re-created):
                    # the kept counter files still read the one that had it.
                    self._files.forget(cached[1].counter_files)
                before = len(issues)
                interface = _interface(f"{class_dir}/{name}", name, issues)
                if len(issues) > before:
                    if interface is not None:
                        found.append(interface)
                    continue  # a failed read is retried, and reported, next poll
            kept[name] = (inode, interface)
            if interface is not None:
                found.append(interface)
        self._interfaces = kept  # entries no longer listed are dropped here
        return found

    def _vfs_of_pfs(
        self, interfaces: list[_Interface], issues: list[CollectorIssue]
    ) -> dict[str, tuple[_Vf, ...]]:
        """Every PF's VFs this poll, by PF folder: the PFs of host functions and of VFs."""
        # A VF has no VFs of its own: its folder is not listed.
        pfs = {i.function for i in interfaces if i.function is not None and i.physfn is None}
        pfs.update(i.physfn for i in interfaces if i.physfn is not None)
        cache: dict[str, dict[str, tuple[int, _Vf | None]]] = {}
        vfs_of: dict[str, tuple[_Vf, ...]] = {}
        for pf in sorted(p for p in pfs if p is not None):
            links, vfs = _list_vfs(pf, self._vf_links.get(pf, {}), issues)
            cache[pf] = links
            vfs_of[pf] = vfs
        self._vf_links = cache
        return vfs_of

    def _read_interface(
        self,
        interface: _Interface,
        vf_keys: Mapping[str, HardwareKey],
        issues: list[CollectorIssue],
    ) -> DeviceReading:
        keys = interface.keys
        if interface.physfn is not None and interface.function is not None:
            # A VF whose PF no longer links to it is being destroyed: no SRIOV_VF key.
            vf_key = vf_keys.get(interface.function)
            if vf_key is not None:
                keys = (*keys, vf_key)
        return DeviceReading(
            name=interface.name,
            keys=keys,
            identity=interface.identity,
            samples=self._counter_samples(interface.counter_files, interface.labels, issues),
        )

    def _counter_samples(
        self,
        files: tuple[str, ...],
        labels: tuple[str, ...],
        issues: list[CollectorIssue],
        counters: tuple[tuple[str, MetricSpec], ...] = _COUNTERS,
    ) -> tuple[Sample, ...]:
        """A sample of each counter file (one per entry of ``counters``) that exists; a
        bad file loses its figure. This is the collector's hot loop: ~500 files a poll
        on a node with 60 NICs."""
        samples: list[Sample] = []
        values = self._files.read_counters(files)
        for value, (_, spec) in zip(values, counters, strict=True):
            if value is None:
                continue
            if isinstance(value, CollectorError):
                # EINVAL: netstat_show's answer for a netdev being unregistered (a VF
                # going away): gone, like a file gone since the listing.
                if not failed_with(value, errno.EINVAL):
                    issues.append(file_issue(value))
                continue
            samples.append(Sample(spec, float(value), labels))
        return tuple(samples)

    def _read_moved_vfs(
        self,
        interfaces: list[_Interface],
        vfs_of: Mapping[str, tuple[_Vf, ...]],
        issues: list[CollectorIssue],
    ) -> list[DeviceReading]:
        """VFs of the host's PFs that have no host netdev, read through the PF's per-VF
        counters, else through the VF's switchdev representor."""
        on_host: set[str] = set()
        pf_names: dict[str, str] = {}  # each PF's first netdev, for the samples' label
        representors: dict[tuple[str, int], _Representor] = {}  # by (PF, VF index)
        for interface in interfaces:
            if interface.function is None:
                continue
            representor = interface.representor
            if representor is None:
                on_host.add(interface.function)
                pf_names.setdefault(interface.function, interface.name)
            elif representor.vf_index is not None and representor.vf_counters:
                representors[(interface.function, representor.vf_index)] = representor
        readings: list[DeviceReading] = []
        for pf, pf_name in pf_names.items():
            pf_address = os.path.basename(pf)
            for vf in vfs_of.get(pf, ()):
                if vf.function in on_host:
                    continue
                address = os.path.basename(vf.function)
                label = f"{pf_name}/vf{vf.index}"
                samples = self._read_vf_samples(vf, label, issues)
                through = representors.get((pf, vf.index))
                if samples is None and through is not None:
                    samples = self._counter_samples(
                        through.vf_files, (label,), issues, through.vf_counters
                    )
                readings.append(
                    DeviceReading(
                        name=address,
                        keys=(
                            HardwareKey(KeyKind.PCI, address),
                            HardwareKey(KeyKind.SRIOV_VF, f"{pf_address}/{vf.index}"),
                        ),
                        identity=DeviceIdentity(pci_address=address, vendor=vf.vendor),
                        samples=samples or (),
                    )
                )
        return readings

    def _read_vf_samples(
        self, vf: _Vf, interface: str, issues: list[CollectorIssue]
    ) -> tuple[Sample, ...] | None:
        """A PF's counters of one VF: a ``name : value`` file or a folder of files; None
        where the PF keeps none."""
        is_dir = vf.stats_is_dir
        if is_dir is None:
            is_dir = os.path.isdir(vf.stats)
        if is_dir:
            files = tuple(f"{vf.stats}/{name}" for name, _ in _COUNTERS)
            return self._counter_samples(files, (interface,), issues)
        try:
            text = self._files.read_text(vf.stats)  # refused past the read bound
        except CollectorError as error:
            # EINVAL: MLNX_OFED's stats_show when its vport query fails, as for a VF
            # being torn down: no figures now, as for a netdev being unregistered.
            if not failed_with(error, errno.EINVAL):
                issues.append(file_issue(error))
            return ()
        if text is None:
            return None  # the PF keeps no per-VF counters (most drivers but MLNX_OFED's)
        counters, bad_lines = parse_vf_stats(text)
        issues.extend(
            issue(GARBAGE, f"{vf.stats}: not a 'name : value' line: {b!r}") for b in bad_lines
        )
        return net_samples(counters, interface=interface)


def _interface(path: str, name: str, issues: list[CollectorIssue]) -> _Interface | None:
    """The netdev at ``class/net/<name>``, or None for a virtual or vanished one."""
    try:
        device = _resolve(f"{path}/device")
    except CollectorError as error:
        issues.append(file_issue(error))
        return None
    if device is None:
        return None  # no device link: lo, veth, bridges, ifb, tunnels
    function = pci_function(Path(device))
    if function is None:
        return _new_interface(name, path, None, None, None)
    try:
        physfn = _resolve(f"{function}/physfn")
    except CollectorError as error:
        issues.append(file_issue(error))
        physfn = None
    vendor = _identity(str(function), issues).vendor
    representor = None
    if physfn is None and str(function) == device:  # a PF's netdev: maybe a representor
        representor = _representor(path, str(function), issues)
    return _new_interface(name, path, str(function), physfn, vendor, representor)


def _representor(path: str, function: str, issues: list[CollectorIssue]) -> _Representor | None:
    """The switchdev port representor the netdev at ``path`` is, or None: its
    ``phys_port_name`` says (EOPNOTSUPP where the netdev has no switch port)."""
    try:
        port = read_text(f"{path}/phys_port_name")
    except CollectorError as error:
        if not failed_with(error, errno.EOPNOTSUPP):
            issues.append(file_issue(error))
        return None
    match = _REPRESENTOR.match(port or "")
    if match is None:
        return None  # no switch port, or the uplink (p<n>): the PF's own netdev
    controller, _, flavour, vf_index = match.groups()
    if controller is not None or flavour not in ("vf", "vfr"):
        return _Representor(None, (), ())  # another host's port, a PF's or an SF's
    # A VF of the PF its device link names: drivers make each eswitch's representors on
    # its own PF (mlx5, ice). pf<n> says nothing more to go by: the PCI function number
    # in devlink's names, but ice's own PF id (ice_devlink_create_vf_port: hw.pf_id, no
    # function number where the PF is passed through to a VM), mlx5's port index on some
    # kernels, and the switch port in ice's older pf<port>vfr<m>.
    try:
        driver = _resolve(f"{function}/driver")
    except CollectorError as error:
        issues.append(file_issue(error))
        driver = None
    counters = _REPRESENTED_VF_COUNTERS.get(os.path.basename(driver or ""), ())
    files = tuple(f"{path}/statistics/{name}" for name, _ in counters)
    return _Representor(int(vf_index), counters, files)


def _list_vfs(
    pf: str, cached: Mapping[str, tuple[int, _Vf | None]], issues: list[CollectorIssue]
) -> tuple[dict[str, tuple[int, _Vf | None]], tuple[_Vf, ...]]:
    """The ``virtfn<n>`` links of ``pf`` (entries to cache, VFs by n); resolved links
    whose name and inode are unchanged are taken from ``cached``."""
    try:
        with os.scandir(pf) as entries:
            listed = [(e.name, e.inode()) for e in entries if _VIRTFN.match(e.name)]
    except (FileNotFoundError, NotADirectoryError):
        return {}, ()
    except OSError as error:
        issues.append(issue(UNREADABLE, f"cannot list {pf}: {error.strerror or error}"))
        return {}, ()
    links: dict[str, tuple[int, _Vf | None]] = {}
    for entry, inode in listed:
        hit = cached.get(entry)
        if hit is not None and hit[0] == inode:
            links[entry] = hit
            continue
        try:
            target = _resolve(f"{pf}/{entry}")
        except CollectorError as error:
            issues.append(file_issue(error))
            continue
        if target is None:
            continue  # a dangling link may be a VF being created: look again next poll
        vf = None
        if is_pci_address(os.path.basename(target)):
            before = len(issues)
            vendor = _identity(target, issues).vendor
            index = int(entry[len("virtfn") :])
            stats = f"{pf}/sriov/{index}/stats"
            kind = os.path.isdir(stats) if os.path.lexists(stats) else None
            vf = _Vf(index, target, vendor, stats, kind)
            if len(issues) > before:  # report the vendor again next poll, read it again
                links[entry] = (-1, vf)
                continue
        links[entry] = (inode, vf)
    vfs = sorted((v for _, v in links.values() if v is not None), key=lambda v: v.index)
    return links, tuple(vfs)


def _identity(function: str, issues: list[CollectorIssue]) -> DeviceIdentity:
    try:
        vendor = vendor_name(read_pci_id(f"{function}/vendor"))
    except CollectorError as error:
        issues.append(file_issue(error))
        vendor = None
    return DeviceIdentity(pci_address=os.path.basename(function), vendor=vendor)


REGISTRATION = Registration(
    "netdev",
    "Traffic counters of network devices: NICs (virtio included) and SR-IOV VFs",
    NetdevCollector,
)
