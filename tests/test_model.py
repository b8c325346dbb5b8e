"""The model's helpers that write label values (numa_label, cpulist), and how a
Resolution hashes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.model import HardwareKey, KeyKind, Resolution, cpulist, numa_label


class TestNumaLabel:
    @pytest.mark.parametrize(
        ("nodes", "label"),
        [((), ""), ((1,), "1"), ((1, 0), "0,1"), ((3, 1, 3, 1), "1,3")],
    )
    def test_sorted_unique_and_comma_joined(self, nodes: tuple[int, ...], label: str) -> None:
        """One label value per set of nodes, whatever their order or repeats: else one
        topology would be two series."""
        assert label == numa_label(nodes)


class TestCpulist:
    @pytest.mark.parametrize(
        ("ids", "text"),
        [
            ((), ""),
            ((5,), "5"),
            ((0, 1, 2, 3, 8, 10, 11), "0-3,8,10-11"),
            ((11, 3, 2, 2, 1, 5), "1-3,5,11"),
            ((0, 2, 4), "0,2,4"),
        ],
    )
    def test_the_kernels_list_notation(self, ids: tuple[int, ...], text: str) -> None:
        """Runs as ranges, lone CPUs alone, sorted and without repeats: what the kernel's
        cpulist files say, and what fixtures shaped like them are written with."""
        assert text == cpulist(ids)


class _CountedKey(HardwareKey):
    """A hardware key that counts how often it is hashed."""

    __slots__ = ()
    hashed = 0

    def __hash__(self) -> int:
        _CountedKey.hashed += 1
        return super().__hash__()


class TestResolutionHash:
    def test_made_once(self) -> None:
        """A Resolution keys the snapshot's hardware map and is looked up there several
        times a poll per device: its keys are hashed at its first hash only."""
        _CountedKey.hashed = 0
        resolution = Resolution("0000:af:00.2", keys=(_CountedKey(KeyKind.PCI, "0000:af:00.2"),))
        first = hash(resolution)
        assert {resolution: 1}[resolution] == 1
        assert hash(resolution) == first
        assert _CountedKey.hashed == 1

    def test_follows_equality(self) -> None:
        """Equal resolutions hash alike, however made; one that differs in any field
        compared is another key (the cached hash is neither compared nor copied)."""
        keys = (HardwareKey(KeyKind.PCI, "0000:af:00.2"),)
        resolution = Resolution("0000:af:00.2", keys=keys, source="device id")
        hash(resolution)
        same = Resolution("0000:af:00.2", keys=keys, source="device id")
        assert same == resolution
        assert hash(same) == hash(resolution)
        assert {resolution: 1}.get(same) == 1
        others = [
            replace(resolution, physical_id="0000:af:00.3"),
            replace(resolution, keys=(HardwareKey(KeyKind.NETDEV, "ens1"),)),
            replace(resolution, unresolved="no driver"),
            replace(resolution, source="checkpoint"),
        ]
        table = {resolution: 1}
        for other in others:
            assert other != resolution
            assert table.get(other) is None
            assert hash(other) == hash(replace(other))
