"""exporter.pci_address: every spelling of a PCI address, as the kernel names it."""

from __future__ import annotations

import pytest

from exporter.pci_address import is_pci_address, parse_pci_address


class TestParse:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("0000:af:00.1", "0000:af:00.1"),  # the kernel's own
            ("10000:e1:00.0", "10000:e1:00.0"),  # an Intel VMD domain (from 0x10000)
            ("7fffffff:01:1f.7", "7fffffff:01:1f.7"),  # the widest the kernel's int prints
            ("00000000:3B:00.0", "0000:3b:00.0"),  # NVML's busId: capitals, 8 digits
            ("00010000:E1:00.0", "10000:e1:00.0"),  # NVML's busId of a GPU behind a VMD
            ("0000:3B:00.0", "0000:3b:00.0"),  # NVML's busIdLegacy
            ("0000:AF:00.1", "0000:af:00.1"),  # a device plugin's ID in capitals
        ],
    )
    def test_each_writer_gives_the_kernel_form(self, text: str, expected: str) -> None:
        """The kernel's, NVML's and the DRA drivers' spellings all give the kernel's."""
        assert expected == parse_pci_address(text)

    @pytest.mark.parametrize(
        "text",
        [
            "af:00.1",  # no domain: lspci's short form
            "000:af:00.1",  # a domain of 3 digits
            "000000000:af:00.1",  # 9 digits: wider than NVML's unsigned int
            "0000:af:00.8",  # functions are 0-7
            "0000:af:20.0",  # slots are 0-0x1f
            "0000:af:0.1",
            "0000:af:00.1\n",  # "$" takes a trailing newline; fullmatch does not
            " 0000:af:00.1",
            "0000-af-00-1",  # dra-driver-sriov's device name: the resolver's business
            "0000:\u0661f:00.1",  # an Arabic-Indic digit: int(x, 16) takes it
            "0000:af:00.\uff11",  # a fullwidth one
            "0000:ag:00.1",
            "card0-0",
            "",
        ],
    )
    def test_junk_is_none(self, text: str) -> None:
        """What none of the writers writes is no address."""
        assert parse_pci_address(text) is None


class TestIsPciAddress:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ("0000:af:00.1", True),
            ("10000:e1:00.0", True),  # VMD: the kernel prints the wider domain whole
            ("0000:AF:00.1", False),  # the kernel writes small letters
            ("00000000:af:00.1", False),  # and pads to 4 digits only
            ("010000:e1:00.0", False),
            ("af:00.1", False),
            ("0000:af:00.8", False),
            ("card0-0", False),
        ],
    )
    def test_only_the_kernels_spelling(self, text: str, expected: bool) -> None:
        """A sysfs name is a PCI function only as the kernel spells one."""
        assert expected == is_pci_address(text)
