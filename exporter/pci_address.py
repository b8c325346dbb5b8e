"""PCI function addresses: the one parser of every spelling the exporter reads.

The key every collector reports a PCI function under, and the join matches on, is the
name the kernel gives it: ``"%04x:%02x:%02x.%d"`` of domain, bus, slot and function
(drivers/pci/probe.c, ``pci_setup_device``). So it is lower case, the slot is at most
0x1f and the function at most 7, and the domain has four digits or more: it is an
``int``, and a domain above 0xffff prints wider. Intel VMD numbers its domains from
0x10000 (drivers/pci/controller/vmd.c, ``vmd_find_free_domain``), so NVMe drives and
whatever else sits behind a VMD are ``10000:e1:00.0``.

Others write the same address their own way:

- NVML's ``busId``: ``"%08X:%02X:%02X.0"`` (nvml.h ``NVML_DEVICE_PCI_BUS_ID_FMT``):
  capitals and an 8-digit domain, ``00000000:3B:00.0``; ``busIdLegacy`` has 4 digits;
- DRA drivers' ``resource.kubernetes.io/pciBusID`` attribute: the kernel's form
  (k8s.io/dynamic-resource-allocation ``deviceattribute.GetPCIBusIDAttribute`` refuses
  any other, a VMD domain included; a driver that does not use it may write more);
  the NVIDIA driver's checkpoint keeps a VFIO GPU's ``pciBusID`` from sysfs;
- device plugins (SR-IOV network, AMD GPU) use the sysfs name as the device ID;
- dra-driver-sriov names a VF by its sysfs name with ``:`` and ``.`` made ``-``.

``parse_pci_address`` takes all of these (any case, a domain of 4 to 8 digits) and
gives the kernel's form; ``is_pci_address`` is true only for the kernel's own
spelling, which is what a name read from sysfs must be. ASCII hex digits only, as every
writer above writes them.
"""

from __future__ import annotations

import re

__all__ = ["is_pci_address", "parse_pci_address"]

# Explicit classes, no IGNORECASE and fullmatch: "$" would take a trailing newline.
_ADDRESS = re.compile(
    r"(?P<domain>[0-9a-fA-F]{4,8}):(?P<bus>[0-9a-fA-F]{2}):"
    r"(?P<slot>[0-9a-fA-F]{2})\.(?P<function>[0-7])"
)
_MAX_SLOT = 0x1F  # PCI_SLOT(devfn): 5 bits


def parse_pci_address(text: str) -> str | None:
    """The kernel's spelling of a PCI address written as the kernel, NVML or a DRA
    driver writes it (``0000:af:00.1``, ``00000000:AF:00.1``, ``10000:e1:00.0``);
    None for anything else."""
    match = _ADDRESS.fullmatch(text)
    if match is None or int(match["slot"], 16) > _MAX_SLOT:
        return None
    domain = int(match["domain"], 16)
    return f"{domain:04x}:{match['bus'].lower()}:{match['slot'].lower()}.{match['function']}"


def is_pci_address(text: str) -> bool:
    """True for a PCI address exactly as the kernel names the function in sysfs:
    ``0000:af:00.1``, ``10000:e1:00.0``; not ``0000:AF:00.1`` nor ``00000000:af:00.1``."""
    return parse_pci_address(text) == text
