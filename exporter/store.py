"""What HTTP handlers read: the current snapshot and its rendered /metrics page."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.exposition import Exposition
from exporter.model import Snapshot

__all__ = ["Published", "SnapshotStore"]


@dataclass(frozen=True, slots=True)
class Published:
    """One snapshot and its rendered /metrics page."""

    snapshot: Snapshot
    exposition: Exposition


@dataclass(slots=True)
class SnapshotStore:
    """Holds the current ``Published``; replaced whole, so readers never see a mix."""

    current: Published | None = None
