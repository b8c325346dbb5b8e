"""A clock that moves only when a test moves it, for code that takes a ``clock``."""

from __future__ import annotations

__all__ = ["ManualClock"]


class ManualClock:
    """Reads ``now``; a test sets or advances it by hand."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Moves the clock on by ``seconds``."""
        self.now += seconds
