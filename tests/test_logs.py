"""configure_logging: JSON lines, the level filter, and where the lines go."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from exporter.logs import configure_logging, cut_line


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


def _lines(fmt: str) -> list[str]:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(level="info", fmt=fmt, stream=stream)
        structlog.get_logger("test").info(
            "poll_failed", reason="kubelet gone", pods=3, cpus=[2, 3], devices=("r/a", "r/b")
        )
        try:
            raise ConnectionResetError("peer went away")
        except ConnectionResetError:
            logging.getLogger("aiohttp.server").exception("Error handling request")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return stream.getvalue().splitlines()


def test_library_lines_are_stamped_and_name_their_exception() -> None:
    """A library's line carries a timestamp and its logger like the exporter's own, its
    exception named in one line, no traceback."""
    own, library = (json.loads(line) for line in _lines("json"))
    assert (own.keys() - {"reason", "pods", "cpus", "devices"}, library) == (
        {"event", "level", "timestamp"},
        {
            "event": "Error handling request",
            "level": "error",
            "timestamp": library["timestamp"],
            "logger": "aiohttp.server",
            "error": "ConnectionResetError: peer went away",
        },
    )
    assert library["timestamp"].endswith("Z")


def test_logfmt_lines() -> None:
    """--log.format=logfmt, as Prometheus' own programs log: key=value, quoted where
    the value has a space, the library's line in the same format."""
    own, library = _lines("logfmt")
    assert (own.split(" ", 1)[1], library.split(" ", 1)[1]) == (
        'level=info event=poll_failed reason="kubelet gone" pods=3 cpus=2,3 devices=r/a,r/b',
        'level=error event="Error handling request" logger=aiohttp.server '
        'error="ConnectionResetError: peer went away"',
    )
    assert [own[:12], library[:12]] == ["timestamp=20"] * 2


HOSTILE = 'gpu-0\tforged=1\r\x1b[2Klevel=error\x00\x85\u2028" \\ end'
# Nothing structlog's console renderer would quote for us (no space, tab or quote), and
# the format characters that rewrite a terminal line without being controls.
BARE = "gpu-0\x1b[2K\x00\u2028\u202e\u200b\ufeffend"


def _hostile_line(fmt: str, value: str = HOSTILE) -> str:
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(level="info", fmt=fmt, stream=stream)
        log = structlog.get_logger("test")
        log.info("allocation_changed", devices_added=[value], pod=value)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    return stream.getvalue()


def _raw_controls(text: str) -> list[str]:
    return [hex(ord(c)) for c in text[:-1] if not c.isprintable()]


@pytest.mark.parametrize("value", [HOSTILE, BARE], ids=["quoted", "bare"])
@pytest.mark.parametrize("fmt", ["logfmt", "console", "json"])
def test_values_from_outside_cannot_forge_lines_or_keys(fmt: str, value: str) -> None:
    """A device ID or pod name with TAB, CR, NUL, an ANSI escape, C1 NEL, U+2028, a
    bidi override, a zero-width character, a quote and a backslash (a device plugin
    names its devices freely): one line, nothing that does not print, in every format."""
    line = _hostile_line(fmt, value)
    assert (line.count("\n"), _raw_controls(line)) == (1, [])


def test_logfmt_quotes_as_go_logfmt_does() -> None:
    """A value with a space, '=', a quote, a backslash or a control character is quoted
    with JSON-style escapes (go-logfmt's encoding), so a reader gets it back whole."""
    line = _hostile_line("logfmt").rstrip("\n")
    quoted = line.split(" pod=", 1)[1]
    assert (json.loads(quoted), line.split(" ")[2]) == (HOSTILE, "event=allocation_changed")


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


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("plain", "plain"),
        ("a=b", '"a=b"'),
        ('a"b', '"a\\"b"'),
        ("a\\b", '"a\\\\b"'),
        ("café au lait", '"café au lait"'),
        ("", ""),
        (True, "true"),
        (False, "false"),
        (None, ""),
    ],
    ids=["plain", "equals", "quote", "backslash", "utf8", "empty", "true", "false", "none"],
)
def test_logfmt_values_as_go_logfmt_writes_them(value: object, written: str) -> None:
    """One special character is enough to quote a value ('=' alone would read as a
    second key); text stays UTF-8, not \\u escapes; booleans are Go's, None is empty."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(level="info", fmt="logfmt", stream=stream)
        structlog.get_logger("test-logfmt-values").info("probe", value=value)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert written == stream.getvalue().rstrip("\n").split(" value=", 1)[1]


@pytest.mark.parametrize(("level", "shown"), [("info", True), ("warning", True), ("error", False)])
def test_library_lines_follow_the_log_level_above_warning(level: str, shown: bool) -> None:
    """A library's warning goes out at --log.level=info or warning, not at error: the
    level asked for holds for the libraries' lines too, never below warning."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, root_level = root.handlers[:], root.level
    try:
        configure_logging(level=level, fmt="json", stream=stream)
        logging.getLogger("aiohttp.server").warning("from a library")
    finally:
        root.handlers[:] = handlers
        root.setLevel(root_level)
    assert shown == ("from a library" in stream.getvalue())


@pytest.mark.parametrize("fmt", ["json", "logfmt"])
def test_an_own_exception_is_in_its_line(fmt: str) -> None:
    """``log.exception`` (poll_failed, render_failed, http_handler_failed) writes the
    exception's type and message into its one line, not a bare exc_info flag."""
    stream = io.StringIO()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging(level="info", fmt=fmt, stream=stream)
        try:
            raise ValueError("reply\nundecodable")
        except ValueError:
            structlog.get_logger(f"test-exception-{fmt}").exception("poll_failed")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    text = stream.getvalue()
    if fmt == "json":
        exception = json.loads(text)["exception"]
    else:
        exception = json.loads(text.rstrip("\n").split(" exception=", 1)[1])
    assert (1, ["ValueError: reply", "undecodable"]) == (
        text.count("\n"),
        exception.splitlines()[-2:],
    )


def test_a_closed_stream_stops_nothing_and_writes_nowhere_else(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The stream closed under the exporter (stderr at interpreter exit): set-up, the
    exporter's lines and a library's return, and nothing goes to sys.stderr instead
    (logging's "--- Logging error ---" traceback is many lines)."""
    closed = io.StringIO()
    closed.close()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        for fmt in ("console", "json"):
            configure_logging(level="info", fmt=fmt, stream=closed)
            structlog.get_logger(f"test-closed-{fmt}").info("stopped")
            logging.getLogger("aiohttp").error("from a library")
        configure_logging(level="info", fmt="json", stream=_GoneReader())
        logging.getLogger("aiohttp").error("from a library")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    assert ("", "") == capsys.readouterr()


@pytest.mark.parametrize(
    ("text", "quoted", "shown"),
    [
        ("x" * 8, False, "x" * 8),  # at the limit: nothing left out, nothing said
        ("x" * 9, False, "x" * 8 + "... (1 more characters)"),
        ("a\nb", True, "'a\\nb'"),  # escaped as escape_line escapes, then quoted
        ("\x00" * 20, True, "'" + "\\x00" * 8 + "'... (12 more characters)"),  # cut, then escaped
    ],
)
def test_cut_line_bounds_what_it_quotes(text: str, quoted: bool, shown: str) -> None:
    """The limit counts characters of the text, not of their escapes; the count says
    how many of the text's were left out."""
    assert shown == cut_line(text, 8, quoted=quoted)
