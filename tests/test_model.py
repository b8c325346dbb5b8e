"""The model's helpers that write label values: numa_label and cpulist."""

from __future__ import annotations

import pytest

from exporter.model import cpulist, numa_label


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
