"""structlog set-up: JSON lines by default, a readable console format on request."""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from typing import TextIO, cast

import structlog

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "configure_logging"]

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "logfmt", "console")


def configure_logging(*, level: str, fmt: str, stream: TextIO | None = None) -> None:
    """Route structlog (and stdlib logging, for grpc and aiohttp) to ``stream``, stderr
    unless told."""
    out = _LossyStream(sys.stderr if stream is None else stream)
    renderer: structlog.typing.Processor
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    elif fmt == "logfmt":
        logfmt = structlog.processors.LogfmtRenderer(
            key_order=["timestamp", "level", "event"], bool_as_flag=False
        )

        def renderer(logger: object, method: str, event: structlog.typing.EventDict) -> str | bytes:
            # A list as logfmt readers split it (devices=a,b), not Python's ['a', 'b'].
            for key, value in event.items():
                if isinstance(value, list | tuple):
                    event[key] = ",".join(map(str, value))
            return logfmt(logger, method, event)
    else:
        renderer = structlog.processors.JSONRenderer()
    stamped: list[structlog.typing.Processor] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *stamped,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=cast(TextIO, out)),
        cache_logger_on_first_use=True,
    )
    # Libraries log through stdlib logging: their warnings go out as our own lines, in
    # the same format with a timestamp, one line each.
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*stamped, structlog.stdlib.add_logger_name, _name_exception],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    logging.basicConfig(
        level=max(logging.getLevelName(level.upper()), logging.WARNING),
        handlers=[handler],
        force=True,
    )


def _name_exception(
    _logger: object, _method: str, event: structlog.typing.EventDict
) -> structlog.typing.EventDict:
    """A library record's exception, named in ``error``, its traceback left out (a
    multi-line traceback is many log events to a collector, and says nothing to on-call)."""
    info = event.pop("exc_info", None)
    if isinstance(info, tuple) and info[1] is not None:
        event["error"] = f"{type(info[1]).__name__}: {info[1]}"
    return event


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
