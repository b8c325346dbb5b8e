"""Errors a telemetry source raises; shared by collectors, sysfs readers and the runner."""

from __future__ import annotations

__all__ = ["CollectorError", "CollectorUnavailable"]


class CollectorError(Exception):
    """A collector could not read its source; the message names the path or call."""


class CollectorUnavailable(CollectorError):
    """The source is absent on this node (no driver, no such subsystem).

    Not a failure by itself: the join judges it a failure only where the kubelet
    advertises resources the collector would serve (NVML absent on a node with
    ``nvidia.com/gpu``), so a CPU-only node stays quiet.
    """
