"""What HTTP handlers read: the current snapshot, and its /metrics page once asked for.

The page is rendered when a scraper first asks for it in a snapshot, not by the poll:
Prometheus scrapes every 15 s to 1 min against the poller's 10 s, so most snapshots are
never scraped, and a page nobody reads costs nothing. Renders run off the event loop,
one at a time; the scrapes that ask for the same snapshot meanwhile share its render.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from exporter.exposition import Exposition, render
from exporter.model import Snapshot
from exporter.outage import RepeatedFailure

__all__ = ["Published", "SnapshotStore"]


@dataclass(slots=True)
class Published:
    """One snapshot, and its page once rendered (``SnapshotStore.exposition``)."""

    snapshot: Snapshot
    # Changes whenever the join read new kubelet data, CPU map or DRA state: snapshots
    # with the same number have the same allocation families (render's same_allocations).
    allocations: int = 0
    # The render of this snapshot's page, started by the first scrape; loop thread only.
    page: asyncio.Future[Exposition] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    # Its unfiltered /debug/allocations encodings by format (the web layer's), which go
    # with it when a newer snapshot is published; loop thread only.
    debug_views: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)


@dataclass(slots=True)
class SnapshotStore:
    """Holds the current ``Published``; replaced whole, so readers never see a mix."""

    current: Published | None = None
    # The last page rendered and its snapshot's allocations number: the next render
    # re-uses its label prefixes and, for the same allocations, its container families.
    _rendered: tuple[int, Exposition] | None = field(default=None, init=False, repr=False)
    _render_lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False, repr=False)
    # The last failed render's error, while renders keep failing: a bug that fails every
    # snapshot logs its traceback once, then one line per snapshot.
    _render_failure: RepeatedFailure = field(
        default_factory=lambda: RepeatedFailure("render"), init=False, repr=False
    )

    async def exposition(self, published: Published) -> Exposition:
        """The page of ``published``: rendered in a thread by the first caller, shared by
        the callers meanwhile and after. A caller that gives up (a scraper that went
        away) leaves the render running for the next. A render that fails (a bug) is
        logged once for that snapshot, with its traceback unless the last failed render
        raised the same error, and the last page rendered is served for it, its
        snapshot's timestamp showing its age; with no page yet, the error is raised and
        the next caller tries again."""
        page = published.page
        if page is None or (page.done() and (page.cancelled() or page.exception() is not None)):
            page = published.page = asyncio.ensure_future(self._render(published))
        return await asyncio.shield(page)

    async def _render(self, published: Published) -> Exposition:
        async with self._render_lock:
            rendered = self._rendered
            previous = rendered[1] if rendered is not None else None
            same = rendered is not None and rendered[0] == published.allocations
            try:
                exposition = await asyncio.to_thread(
                    render, published.snapshot, previous=previous, same_allocations=same
                )
            except Exception as error:
                if previous is None:
                    raise
                collected_at = published.snapshot.collected_at
                self._render_failure.failed(error, collected_at=collected_at)
                return previous
            self._render_failure.succeeded()
            self._rendered = (published.allocations, exposition)
            return exposition

    def holds_page_before(self, allocations: int) -> bool:
        """Whether the last page rendered is of a snapshot older than ``allocations``."""
        return self._rendered is not None and self._rendered[0] < allocations
