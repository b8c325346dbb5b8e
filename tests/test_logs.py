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
