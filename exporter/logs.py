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

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "configure_logging", "cut_line", "escape_line"]

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
                    event[key] = escape_line(value)
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


def escape_line(text: str) -> str:
    """``text`` as one line that shows what it holds: every character ``str.isprintable``
    refuses (C0 and C1 controls, DEL, the line and paragraph separators, bidi overrides,
    zero-width and other format characters) and the backslash, as Python escapes them.
    Values from outside (device IDs a plugin names freely, pod names) reach log lines and
    the debug table: raw, a CR or an ANSI escape rewrites what a terminal shows, U+2028
    breaks lines for some readers, U+202E reverses what follows."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(c if c.isprintable() and c != "\\" else _escaped(c) for c in text)


def cut_line(text: str, limit: int, *, quoted: bool = False) -> str:
    """``escape_line`` of ``text``'s first ``limit`` characters (in single quotes if
    ``quoted``), then how many were left out: words from outside (a peer's error
    details, a client's query) quoted in a log line or an error answer, bounded."""
    kept = escape_line(text[:limit])
    shown = f"'{kept}'" if quoted else kept
    left_out = len(text) - limit
    return f"{shown}... ({left_out} more characters)" if left_out > 0 else shown


def _escaped(char: str) -> str:
    return "\\\\" if char == "\\" else char.encode("unicode_escape").decode("ascii")


# go-logfmt quotes a value with a space, '=', a quote or a backslash; we also quote any
# character escape_line would escape.
_LOGFMT_SPECIAL = re.compile(r'[ "=\\]')
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
    if text.isprintable() and not _LOGFMT_SPECIAL.search(text):
        return text
    # json.dumps escapes C0, the quote and the backslash; any other character that does
    # not print gets its JSON escape too.
    quoted = json.dumps(text, ensure_ascii=False)
    if quoted.isprintable():
        return quoted
    return "".join(c if c.isprintable() else json.dumps(c)[1:-1] for c in quoted)


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
