"""structlog set-up: JSON lines by default, a readable console format on request."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "configure_logging"]

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "console")


def configure_logging(*, level: str, fmt: str) -> None:
    """Route structlog (and stdlib logging, for grpc and aiohttp) to stderr."""
    renderer: structlog.typing.Processor
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
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
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Libraries log through stdlib logging; keep their warnings, in one line each.
    logging.basicConfig(
        level=max(logging.getLevelName(level.upper()), logging.WARNING),
        stream=sys.stderr,
        format='{"level": "%(levelname)s", "logger": "%(name)s", "event": "%(message)s"}',
    )
