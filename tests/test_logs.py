"""configure_logging: JSON lines, the level filter, and where the lines go."""

from __future__ import annotations

import io
import json
import logging

import structlog

from exporter.logs import configure_logging


def test_exporter_and_library_lines_go_to_the_stream_as_json() -> None:
    """structlog events at or above the level and stdlib warnings (grpc, aiohttp) are
    one JSON line each on the stream given; the bench gives /dev/null this way."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(level="info", fmt="json", stream=stream)
        log = structlog.get_logger("test")  # a new logger: cached ones keep their config
        log.debug("not_logged")
        log.info("allocation_changed", pod="p")
        logging.getLogger("grpc").info("below the library level")
        logging.getLogger("grpc").warning("from a library")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [(line["event"], line["level"]) for line in lines] == [
        ("allocation_changed", "info"),
        ("from a library", "warning"),
    ]
    assert lines[0]["pod"] == "p"
    assert lines[0]["timestamp"].endswith("Z")


class _GoneReader(io.StringIO):
    """A stream whose reader went away: every write raises, as a closed pipe does."""

    def __init__(self) -> None:
        super().__init__()
        self.tried: list[str] = []

    def write(self, text: str) -> int:
        self.tried.append(text)
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self) -> None:
        raise BrokenPipeError(32, "Broken pipe")


def test_a_log_reader_that_went_away_stops_nothing() -> None:
    """With stderr's reader gone every write raises BrokenPipeError; raised into the
    program it killed the poller (its failures are logged) and the SIGTERM handler.
    The lines are lost; the calls return."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    json_reader, console_reader = _GoneReader(), _GoneReader()
    try:
        configure_logging(level="info", fmt="json", stream=json_reader)
        structlog.get_logger("test-gone").info("poll_failed")
        logging.getLogger("aiohttp").error("from a library")
        configure_logging(level="info", fmt="console", stream=console_reader)
        structlog.get_logger("test-gone-console").warning("stopping")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    # Every line was written to the stream (and lost there), none raised.
    tried = ["".join(r.tried) for r in (json_reader, console_reader)]
    assert ["poll_failed" in tried[0], "from a library" in tried[0], "stopping" in tried[1]] == [
        True,
        True,
        True,
    ]
