"""structlog set-up: JSON lines by default, a readable console format on request."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import re
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
        console = structlog.dev.ConsoleRenderer(colors=out.isatty())

        def renderer(logger: object, method: str, event: structlog.typing.EventDict) -> str:
            # Values from outside (device IDs, pod names) must not move the cursor or
            # start a line of their own on a terminal.
            for key, value in event.items():
                if isinstance(value, str):
                    event[key] = value.translate(_CONTROL_ESCAPES)
            return str(console(logger, method, event))
    elif fmt == "logfmt":
        renderer = _logfmt
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


# Control characters (C0, DEL, C1) and the Unicode line and paragraph separators, as
# escapes: raw, a TAB or NUL splits a logfmt value into a forged key, a CR or an ANSI
# escape rewrites what a terminal shows, U+2028 breaks lines for some readers.
_CONTROL_ESCAPES = {
    **{c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))},
    **{ord("\t"): "\\t", ord("\n"): "\\n", ord("\r"): "\\r"},
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}
_LOGFMT_QUOTE = re.compile(r'[\x00-\x20"=\\\x7f-\x9f\u2028\u2029]')
_LOGFMT_FIRST = ("timestamp", "level", "event")


def _logfmt(_logger: object, _method: str, event: structlog.typing.EventDict) -> str:
    """One logfmt line, written as go-logfmt writes one: a value with a space, '=', a
    quote, a backslash or a control character is quoted, its specials escaped JSON-style;
    a list is its items joined with ',' (devices=a,b), not Python's ['a', 'b']."""
    keys = [
        *(k for k in _LOGFMT_FIRST if k in event),
        *(k for k in event if k not in _LOGFMT_FIRST),
    ]
    return " ".join(f"{key}={_logfmt_value(event[key])}" for key in keys)


def _logfmt_value(value: object) -> str:
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = ""
    elif isinstance(value, list | tuple):
        text = ",".join(map(str, value))
    else:
        text = str(value)
    if not _LOGFMT_QUOTE.search(text):
        return text
    # json.dumps escapes C0, the quote and the backslash; the rest is left raw by it.
    return json.dumps(text, ensure_ascii=False).translate(_WIDE_ESCAPES)


_WIDE_ESCAPES = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)}


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
