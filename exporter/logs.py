"""structlog set-up: JSON lines by default, a readable console format on request."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from typing import TextIO, cast

import structlog

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "configure_logging"]

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "console")


def configure_logging(*, level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Route structlog (and stdlib logging, for grpc and aiohttp) to ``stream``, stderr
    unless told."""
    out = _LossyStream(sys.stderr if stream is None else stream)
    renderer: structlog.typing.Processor
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, out)),
        cache_logger_on_first_use=True,
    )
    # Libraries log through stdlib logging; keep their warnings, one JSON line each.
    handler = logging.StreamHandler(out)
    handler.setFormatter(_OneLineJson())
    logging.basicConfig(
        level=max(logging.getLevelName(level.upper()), logging.WARNING),
        handlers=[handler],
        force=True,
    )


class _LossyStream(io.TextIOBase):
    """``stream``, with write errors dropped. A log reader that went away (a closed
    pipe, a container runtime's log pipe broken) makes every write raise
    BrokenPipeError: raised into the program, it stopped the poller (whose failures are
    logged) and the SIGTERM handler (which logs before it stops). Logs are lost then;
    the exporter keeps serving."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):  # ValueError: the stream was closed
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (OSError, ValueError):
            return False


class _OneLineJson(logging.Formatter):
    """A stdlib record as one JSON line: an exception is named, its traceback left out
    (a multi-line traceback is many log events to a collector, and says nothing to on-call)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line["error"] = f"{type(error).__name__}: {error}"
        return json.dumps(line)
