"""Fresh per-pod look-ups through the kubelet's ``Get``, rate-limited and coalesced.

The kubelet's socket is shared by every client on the node (100 QPS, burst 10 in all),
so on-call's curl must not turn into a kubelet load test: concurrent requests for one
pod share one call, and a token bucket caps calls overall. Where ``Get`` is missing,
disabled, limited or failing, the caller answers from the snapshot instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from exporter.model import PodResources
from exporter.ratelimit import TokenBucket

__all__ = ["CoalescingLookup", "LookupRefused"]


class LookupRefused(Exception):
    """The rate limit refused a fresh call; answer from the snapshot."""


class CoalescingLookup:
    """One in-flight ``Get`` per (namespace, pod); a token bucket over all of them."""

    def __init__(
        self,
        fetch: Callable[[str, str], Awaitable[PodResources]],
        *,
        bucket: TokenBucket,
    ) -> None:
        self._fetch = fetch
        self._bucket = bucket
        self._in_flight: dict[tuple[str, str], asyncio.Future[PodResources]] = {}

    async def get(self, *, namespace: str, name: str) -> PodResources:
        """The pod's resources, fresh from the kubelet; raises what fetch raises."""
        key = (namespace, name)
        pending = self._in_flight.get(key)
        if pending is None:
            if not self._bucket.try_take():
                raise LookupRefused("fresh look-ups are rate-limited; try again shortly")
            pending = asyncio.ensure_future(self._fetch(namespace, name))
            self._in_flight[key] = pending
            pending.add_done_callback(lambda f: self._done(key, f))
        # shield: one impatient client disconnecting must not cancel the others' call.
        return await asyncio.shield(pending)

    def _done(self, key: tuple[str, str], future: asyncio.Future[PodResources]) -> None:
        self._in_flight.pop(key, None)
        if not future.cancelled():
            future.exception()  # retrieved: every waiter may have gone away
