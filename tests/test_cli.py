"""Flags and environment variables become one Config; bad values end with one line, exit 2."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporter import cli
from exporter.app import _bind_host, collector_context
from exporter.cli import env_name, parse_config
from exporter.collectors import registrations
from exporter.config import ConfigError, is_wildcard_host


def test_defaults(tmp_path: Path) -> None:
    """Defaults: the kubelet socket, 1 MiB replies (what the DaemonSet's 256Mi holds, not
    DESIGN.md's 16 MiB), a 5 s kubelet timeout, 10 s polls, all collectors."""
    config = parse_config([], {"NODE_NAME": "gpu-node-7"})
    assert (
        config.kubelet_socket,
        config.kubelet_max_message_bytes,
        config.kubelet_timeout_s,
        config.poll_interval_s,
        config.collector_timeout_s,
        config.listen_addresses,
        config.enable_debug,
        config.collectors,
        config.node_name,
        config.log_format,
    ) == (
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        1024 * 1024,
        5.0,
        10.0,
        5.0,
        (("", 9410),),  # every address family
        True,
        ("nvml", "pci", "netdev", "infiniband", "drm", "cpu", "numa", "topology", "dra"),
        "gpu-node-7",
        "json",
    )


def test_dra_paths() -> None:
    """DRA file roots: DESIGN.md's defaults, env twins, --path.cdi split on colons."""
    defaults = parse_config([], {})
    from_env = parse_config(
        [],
        {
            env_name("--path.kubelet-plugins"): "/host/plugins",
            env_name("--path.cdi"): "/host/run-cdi::/host/etc-cdi",
        },
    )
    from_flags = parse_config(["--path.cdi", "/a", "--path.kubelet-plugins", "/p"], {})
    assert [
        (Path("/var/lib/kubelet/plugins"), (Path("/var/run/cdi"), Path("/etc/cdi"))),
        (Path("/host/plugins"), (Path("/host/run-cdi"), Path("/host/etc-cdi"))),
        (Path("/p"), (Path("/a"),)),
    ] == [(c.kubelet_plugins, c.cdi) for c in (defaults, from_env, from_flags)]


def test_web_config_files_reach_the_config(tmp_path: Path) -> None:
    """--web.config.file and --web.debug-auth.file, from flags or variables, are the files
    the server reads: a path dropped on the way would serve without the auth asked for."""
    web, debug, other = tmp_path / "web.yml", tmp_path / "debug.yml", tmp_path / "other.yml"
    for path in (web, debug, other):
        path.write_text("")
    variables = {
        env_name("--web.config.file"): str(web),
        env_name("--web.debug-auth.file"): str(other),
    }
    from_flags = parse_config(
        ["--web.config.file", str(web), "--web.debug-auth.file", str(debug)], {}
    )
    from_env = parse_config([], variables)
    both = parse_config(["--web.debug-auth.file", str(debug)], variables)
    assert [(web, debug), (web, other), (web, debug)] == [
        (c.web_config_file, c.debug_auth_file) for c in (from_flags, from_env, both)
    ]


def test_environment_then_flags_win() -> None:
    """Every flag reads its environment variable; a flag on the command line wins."""
    environ = {
        env_name("--poll.interval"): "30",
        env_name("--collector.nvml"): "false",
        env_name("--web.enable-debug"): "0",
        env_name("--log.format"): "console",
        env_name("--web.listen-address"): "127.0.0.1:9000",
    }
    config = parse_config(["--poll.interval", "15"], environ)
    assert (config.poll_interval_s, "nvml" in config.collectors, config.enable_debug) == (
        15.0,
        False,
        False,
    )
    assert (config.log_format, config.listen_addresses) == ("console", (("127.0.0.1", 9000),))
    assert (
        env_name("--kubelet.max-message-bytes") == "PODRESOURCES_EXPORTER_KUBELET_MAX_MESSAGE_BYTES"
    )


@pytest.mark.parametrize(
    ("argv", "variable", "text", "expected"),
    [
        (["--poll.interval", "30"], "--poll.interval", "0.5", ("poll_interval_s", 30.0)),
        (["--no-collector.cpu"], "--collector.cpu", "maybe", ("cpu collector", False)),
        (["--collector.gpu_processes"], "--collector.gpu_processes", "maybe", ("gpu", True)),
        (["--log.level=debug"], "--log.level", "loud", ("log_level", "debug")),
    ],
)
def test_a_flag_wins_over_a_bad_environment_value(
    argv: list[str], variable: str, text: str, expected: tuple[str, object]
) -> None:
    """The environment value is refused only where it would be used: a flag given on
    the command line overrides it (it used to fail the start all the same), and the
    flag's value, not a default, is what the exporter gets."""
    config = parse_config(argv, {env_name(variable): text})
    got = {
        "poll_interval_s": config.poll_interval_s,
        "cpu collector": "cpu" in config.collectors,
        "gpu": "gpu_processes" in config.collectors,
        "log_level": config.log_level,
    }
    assert got[expected[0]] == expected[1]


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (["--log.level=warn"], {}, ("log_level", "warning")),
        (["--log.format=logfmt"], {}, ("log_format", "logfmt")),
        (["--poll.interval=1m30s"], {}, ("poll_interval_s", 90.0)),
        (["--poll.interval", "2.5"], {}, ("poll_interval_s", 2.5)),
        ([], {env_name("--poll.interval"): "30s"}, ("poll_interval_s", 30.0)),
        (["--kubelet.timeout=500ms"], {}, ("kubelet_timeout_s", 0.5)),
        (["--kubelet.timeout=+2s"], {}, ("kubelet_timeout_s", 2.0)),
        (["--collector.timeout=1.5s"], {}, ("collector_timeout_s", 1.5)),
        (["--kubelet.timeout=250μs"], {}, ("kubelet_timeout_s", 0.00025)),  # U+03BC: Go's too
        # Where a flag parts from Go: a plain number is seconds, and blanks around go.
        (["--poll.interval", " 30s\n"], {}, ("poll_interval_s", 30.0)),
        ([], {env_name("--poll.interval"): "30\n"}, ("poll_interval_s", 30.0)),
    ],
)
def test_prometheus_flag_words_are_understood(
    argv: list[str], environ: dict[str, str], expected: tuple[str, object]
) -> None:
    """Values copied from node_exporter or another promslog/kingpin exporter work:
    ``warn``, ``logfmt``, and Go durations for the seconds flags."""
    config = parse_config(argv, environ)
    assert expected == (expected[0], getattr(config, expected[0]))


@pytest.mark.parametrize(
    "text",
    # Unicode digits and "1_0" pass float(); Go's parser refuses them, and durations
    # past its int64 nanoseconds.
    ["10x", "s", "1h-5m", "10 s", "5s10", "", "1e400s", "\u0661\u0660", "1_0", "9999999999h"],
)
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_config([f"--poll.interval={text}"], {})
    assert exit_info.value.code == 2


@pytest.mark.parametrize(
    "text", ["9223372036.854775808s", "2562047h47m16.854775808s", "9223372036854775808ns"]
)
def test_a_duration_one_nanosecond_past_gos_longest_is_refused(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Go's time.Duration ends at 2**63-1 ns: one past it, refused by Go, was summed in
    floats that rounded it back under and taken."""
    flag = "--collector.nvml.gpm-interval"  # no range of its own above 0
    with pytest.raises(SystemExit) as exit_info:
        parse_config([f"{flag}={text}"], {})
    assert exit_info.value.code == 2
    expected = f"{flag} must be seconds or a duration such as 10s or 1m, not {text!r}"
    assert expected in capsys.readouterr().err
    longest = parse_config([f"{flag}=9223372036854775807ns"], {}).nvml_gpm_interval_s
    assert (2**63 - 1) / 1e9 == longest


def test_a_negative_duration_is_refused_as_negative(capsys: pytest.CaptureFixture[str]) -> None:
    """-5s is a Go duration, below the flag's range: the line says so (it said -5s was no
    duration at all, while -5 was below the range)."""
    with pytest.raises(SystemExit):
        parse_config(["--collector.timeout=-5s"], {})
    assert "--collector.timeout must be greater than 0, not '-5s'" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["3601", "1h1s", "99999999999999", "1e300"])
def test_a_poll_interval_past_an_hour_is_refused(
    text: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An hour is the longest poll: readiness (3 intervals), the snapshot's age and the
    alerts assume minutes; 1e300 polled once and stayed ready "forever"."""
    with pytest.raises(SystemExit) as exit_info:
        parse_config([f"--poll.interval={text}"], {})
    assert exit_info.value.code == 2
    assert f"--poll.interval must be at most 3600, not {text!r}" in capsys.readouterr().err
    assert 3600.0 == parse_config(["--poll.interval=1h"], {}).poll_interval_s


@pytest.mark.parametrize(
    "argv", [["--poll.interv", "5"], ["--web.config", "w.yml"], ["--no-collector.nv"]]
)
def test_abbreviated_flags_are_refused(argv: list[str]) -> None:
    """A prefix of a flag is an error, as kingpin has it: a typo must not pass, and a
    flag added later must not change what a deployed command line means."""
    with pytest.raises(SystemExit) as exit_info:
        parse_config(argv, {})
    assert exit_info.value.code == 2


def test_socket_in_endpoint_form() -> None:
    """unix:///path, the form kubelet and CRI configs write, is the path (it was taken
    whole, and every poll failed on 'unix:unix:///...')."""
    given = ["unix:///run/k/kubelet.sock", "unix:/run/k/kubelet.sock", "/run/k/kubelet.sock"]
    given += ["UNIX:///run/k/kubelet.sock", "Unix:/run/k/kubelet.sock"]  # schemes have no case
    sockets = {parse_config([f"--kubelet.socket={s}"], {}).kubelet_socket for s in given}
    assert {"/run/k/kubelet.sock"} == sockets
    # A relative path with a colon is a path, not a URL.
    assert "k:sock" == parse_config(["--kubelet.socket=k:sock"], {}).kubelet_socket


def test_listen_address_repeats_and_replaces_the_environment() -> None:
    """--web.listen-address is repeatable, as exporter-toolkit's: every address given is
    served (one given twice, once), and flags replace the environment's address."""
    environ = {env_name("--web.listen-address"): "127.0.0.1:9000"}
    argv = ["--web.listen-address=127.0.0.1:9411", "--web.listen-address=[::1]:9412"]
    config = parse_config([*argv, argv[0]], environ)
    assert (("127.0.0.1", 9411), ("::1", 9412)) == config.listen_addresses


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9000", (("127.0.0.1", 9000),)),
        ("127.0.0.1:9000\n", (("127.0.0.1", 9000),)),
        ("127.0.0.1:9000\n[::1]:9001", (("127.0.0.1", 9000), ("::1", 9001))),
        ("127.0.0.1:9000\r\n[::1]:9001\r\n", (("127.0.0.1", 9000), ("::1", 9001))),
    ],
)
def test_listen_addresses_in_the_variable_one_a_line(
    text: str, expected: tuple[tuple[str, int], ...]
) -> None:
    """The variable holds several addresses one a line (a YAML block scalar), as kingpin
    reads a repeatable flag's variable; a last line break is no empty address."""
    config = parse_config([], {env_name("--web.listen-address"): text})
    assert expected == config.listen_addresses


@pytest.mark.parametrize(
    ("addresses", "message"),
    [
        ([":9410", "0.0.0.0:9410"], ":9410 and 0.0.0.0:9410 overlap"),
        (["[::]:9410", "127.0.0.1:9410"], r"\[::\]:9410 and 127.0.0.1:9410 overlap"),
        (["[::1]:9410", "0.0.0.0:9410"], r"0.0.0.0:9410 and \[::1\]:9410 overlap"),
        # Go's IsUnspecified: the IPv4-mapped wildcard is one too.
        (["[::ffff:0.0.0.0]:9410", "127.0.0.1:9410"], r"\[::ffff:0.0.0.0\]:9410 and 127"),
    ],
)
def test_a_wildcard_listen_address_overlaps_any_other_on_its_port(
    addresses: list[str], message: str
) -> None:
    """A wildcard host binds every address of both families: another address on its
    port could only fail at bind time, as 'address already in use'."""
    with pytest.raises(ConfigError, match=message):
        parse_config([f"--web.listen-address={a}" for a in addresses], {})


@pytest.mark.parametrize(
    ("host", "wildcard"),
    [
        ("", True),  # ":9410"
        ("0.0.0.0", True),
        ("::", True),
        ("::ffff:0.0.0.0", True),
        ("localhost", False),  # a host name, which may resolve to one address only
        ("node-1.example", False),
        ("127.0.0.1", False),
        ("::1", False),
    ],
)
def test_only_unspecified_addresses_are_wildcards(host: str, wildcard: bool) -> None:
    """Go's IsUnspecified: a wildcard is bound as every address of both families
    (None to asyncio); any other host, a name included, is bound as given."""
    assert (wildcard, None if wildcard else host) == (is_wildcard_host(host), _bind_host(host))


def test_a_host_name_overlaps_no_other_address() -> None:
    """A host name is bound as the addresses it resolves to, not as a wildcard: another
    address on its port is no overlap."""
    given = ["node-1.example:9410", "127.0.0.1:9410"]
    config = parse_config([f"--web.listen-address={a}" for a in given], {})
    assert (("node-1.example", 9410), ("127.0.0.1", 9410)) == config.listen_addresses


def test_listen_addresses_that_do_not_overlap() -> None:
    """Other ports, specific hosts side by side, port 0 (a free port each) and one
    address given twice are fine."""
    given = [":9410", ":9411", "127.0.0.1:9412", "[::1]:9412", ":0", "0.0.0.0:0", ":9410"]
    config = parse_config([f"--web.listen-address={a}" for a in given], {})
    assert (
        ("", 9410),
        ("", 9411),
        ("127.0.0.1", 9412),
        ("::1", 9412),
        ("", 0),
        ("0.0.0.0", 0),
    ) == config.listen_addresses


@pytest.mark.parametrize(
    ("argv", "environ", "on"),
    [
        (["--demo"], {}, True),  # the demo shows per-process attribution
        (["--demo", "--no-collector.gpu_processes"], {}, False),  # unless told not to
        (["--demo"], {env_name("--collector.gpu_processes"): "false"}, False),
        (["--no-collector.gpu_processes", "--demo", "--collector.gpu_processes"], {}, True),
        ([], {}, False),  # off by default elsewhere
    ],
)
def test_demo_turns_gpu_processes_on_unless_told_otherwise(
    argv: list[str], environ: dict[str, str], on: bool
) -> None:
    assert on == ("gpu_processes" in parse_config(argv, environ).collectors)


@pytest.mark.parametrize("flag", ["--help", "--version"])
def test_help_and_version_work_whatever_the_environment_holds(flag: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "exporter", flag],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, env_name("--poll.interval"): "0.5"},
    )
    assert (result.returncode, result.stderr) == (0, "")


def test_short_poll_interval_shortens_collector_timeout() -> None:
    """Without --collector.timeout a collector may take at most the poll interval."""
    assert parse_config(["--poll.interval", "2"], {}).collector_timeout_s == 2.0


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (["--web.listen-address", "9410"], {}, "expected HOST:PORT"),
        (["--web.listen-address", "[::1:9410"], {}, "expected HOST:PORT"),  # half a bracket
        (["--web.listen-address", "::1]:9410"], {}, "expected HOST:PORT"),
        (["--web.listen-address", "::1:9410"], {}, "expected HOST:PORT"),  # no brackets
        (["--web.listen-address", ":\u00b2"], {}, "expected HOST:PORT"),  # int() refuses it
        (["--web.listen-address", ":65536"], {}, "expected HOST:PORT"),  # past the last port
        (["--web.listen-address", ":\u0669\u0664\u0661\u0660"], {}, "expected HOST:PORT"),
        ([], {env_name("--web.listen-address"): "9410"}, "PODRESOURCES_EXPORTER_WEB_LISTEN"),
        (["--collector.timeout", "20", "--poll.interval", "10"], {}, "longer than --poll.interval"),
        (["--path.sysfs", "/no/such/dir"], {}, "not a directory"),
        (["--node-name", " "], {}, "--node-name .* ' ': empty or padded"),
        ([], {env_name("--node-name"): ""}, "PODRESOURCES_EXPORTER_NODE_NAME\\) '': empty"),
        (["--node-name", " gpu-1 "], {}, "' gpu-1 ': empty or padded with spaces"),
        # Any white space, as a name read from a file or a heredoc ends with a newline.
        (["--node-name", "gpu-1\n"], {}, r"'gpu-1\\n': empty or padded"),
        ([], {env_name("--node-name"): "\tgpu-1"}, r"'\\tgpu-1': empty or padded"),
        (["--web.config.file", "/"], {}, "is a directory; name the file in it"),
        (["--web.debug-auth.file", "/no/such/file"], {}, "no such file"),
        ([], {env_name("--poll.interval"): "soon"}, "PODRESOURCES_EXPORTER_POLL_INTERVAL"),
        # An empty variable is no path: Path("") would be the working directory.
        ([], {env_name("--path.procfs"): ""}, "PATH_PROCFS: --path.procfs must not be empty"),
        ([], {env_name("--path.kubelet-plugins"): ""}, "--path.kubelet-plugins must not be"),
        ([], {env_name("--web.listen-address"): "127.0.0.1:9000\n\n"}, "expected HOST:PORT"),
        ([], {env_name("--log.level"): "loud"}, "is not one of"),
        ([], {env_name("--collector.cpu"): "maybe"}, "expected true or false"),
    ],
)
def test_bad_values_raise_config_error(
    argv: list[str], environ: dict[str, str], message: str
) -> None:
    """Unusable values are refused at start with a message that names them."""
    with pytest.raises(ConfigError, match=message):
        parse_config(argv, environ)


@pytest.mark.parametrize(
    "argv",
    [
        ["--poll.interval", "-1"],
        ["--poll.interval", "nan"],
        ["--kubelet.timeout", "abc"],
        ["--no-such-flag"],
        ["--web.listen-address", "host:99999"],
    ],
)
def test_process_exits_2_with_one_line(argv: list[str]) -> None:
    """The real entry point: exit code 2 and exactly one line on stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "exporter", *argv], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("podresources-exporter: error: ")
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--poll.interval", "nan"], "--poll.interval must be a finite number"),
        (
            ["--kubelet.max-message-bytes", "1_048_576"],
            "--kubelet.max-message-bytes must be a whole number",
        ),
        (["--poll.interval", "inf"], "--poll.interval must be a finite number"),
        (["--poll.interval", "1e-9"], "--poll.interval must be at least 1"),
        (["--poll.interval", "0.5"], "--poll.interval must be at least 1"),
        (["--kubelet.timeout", "nan"], "--kubelet.timeout must be a finite number"),
        (["--kubelet.timeout", "inf"], "--kubelet.timeout must be a finite number"),
        (["--kubelet.timeout", "0"], "--kubelet.timeout must be greater than 0"),
        (["--collector.timeout=-inf"], "--collector.timeout must be a finite number"),
        (["--kubelet.max-message-bytes", "2147483648"], "must be at most 2147483647"),
        (["--kubelet.max-message-bytes", "1e6"], "must be a whole number"),
        (["--kubelet.socket", "tcp://10.0.0.1:10250"], "a unix socket path or unix:///path"),
        (["--path.sysfs", ""], "--path.sysfs must not be empty"),
        (["--path.pod-logs", " "], "--path.pod-logs must not be empty"),
        (["--kubelet.max-message-bytes", "100"], "must be at least 4096"),
        (["--collector.nvml.energy-interval=-1"], "energy-interval must be at least 0"),
        (["--collector.nvml.energy-interval", "nan"], "energy-interval must be a finite"),
        (["--collector.nvml.gpm-interval=-1"], "gpm-interval must be at least 0"),
        (["--collector.nvml.gpm-interval", "inf"], "gpm-interval must be a finite"),
        (["--kubelet.socket", ""], "--kubelet.socket must not be empty"),
        (["--kubelet.socket", "/" + "s" * 107], "108 bytes long"),
    ],
)
def test_out_of_range_flags_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Non-finite and out-of-range numbers and unusable socket paths stop the start."""
    with pytest.raises(SystemExit) as stopped:
        parse_config(argv, {})
    err = capsys.readouterr().err
    assert (2, 1) == (stopped.value.code, err.count("\n"))
    assert re.search(message, err), err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kubelet.timeout", "11"], "--kubelet.timeout 11s is longer than --poll.interval 10s"),
        (["--poll.interval", "1", "--collector.timeout", "1.5"], "--collector.timeout 1.5s is"),
    ],
)
def test_timeouts_longer_than_the_interval_are_refused(argv: list[str], message: str) -> None:
    """Timeouts lie within (0, poll interval]: a poll must end before the next begins."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(argv, {})


def test_edges_of_the_ranges_are_accepted() -> None:
    """1 s polls, a timeout equal to the interval, 2 GiB - 1 and a 107-byte path all work."""
    config = parse_config(
        [
            "--poll.interval=1",
            "--kubelet.timeout=1",
            "--kubelet.max-message-bytes=2147483647",
            "--kubelet.socket=/" + "s" * 106,
        ],
        {},
    )
    assert (1.0, 1.0, 1.0, 2**31 - 1, 107) == (
        config.poll_interval_s,
        config.kubelet_timeout_s,
        config.collector_timeout_s,
        config.kubelet_max_message_bytes,
        len(config.kubelet_socket),
    )


def test_help_documents_every_flag_and_variable() -> None:
    """--help names each DESIGN.md flag with its environment variable."""
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    flags = [
        "--kubelet.socket",
        "--kubelet.max-message-bytes",
        "--kubelet.timeout",
        "--poll.interval",
        "--web.listen-address",
        "--web.config.file",
        "--web.enable-debug",
        "--path.sysfs",
        "--path.procfs",
        "--path.kubelet-plugins",
        "--path.cdi",
        "--collector.nvml",
        "--no-collector.nvml",
        "--node-name",
        "--log.level",
        "--log.format",
        "--demo",
    ]
    help_text = " ".join(result.stdout.split())
    missing = [f for f in flags if f not in help_text]
    assert missing == []
    assert env_name("--kubelet.socket") in help_text


def _readme_flag_rows() -> dict[str, str]:
    """README's flag table: each flag its first cell names -> that row's default cell.
    ``--[no-]collector.NAME`` stands for the collector names its meaning lists."""
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme[readme.index("\n## Flags\n") : readme.index("\n## Endpoints\n")]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        if not line.startswith("| `-"):
            continue
        flags_cell, default_cell, meaning = (c.strip() for c in line.strip("|").split("|", 2))
        for flag in re.findall(r"`(--[^` ]+)", flags_cell):
            flag = flag.replace("[no-]", "")
            if flag == "--collector.NAME":
                for name in re.findall(r"`(\w+)`", meaning):
                    rows[f"--collector.{name}"] = default_cell
            else:
                rows[flag] = default_cell
    return rows


def test_readme_flag_table_names_every_flag_with_its_default() -> None:
    """README's flag table and the parser name the same flags, and each default the
    parser holds is the one the table gives: a flag added, renamed or given another
    default without its row fails here."""
    parser = cli._build_parser({})
    flags = {
        option: action
        for action in parser._actions
        for option in action.option_strings
        if option.startswith("--") and not option.startswith("--no-")
    }
    rows = _readme_flag_rows()
    assert (set(), set()) == (flags.keys() - rows.keys(), rows.keys() - flags.keys())
    # Defaults applied after parsing, or worked out from the poll interval.
    later = {
        "--web.listen-address": cli.DEFAULT_LISTEN_ADDRESS,
        "--kubelet.timeout": cli.DEFAULT_KUBELET_TIMEOUT_S,
        "--collector.timeout": cli.DEFAULT_COLLECTOR_TIMEOUT_S,
    }
    # gpu_processes' default is None, for --demo to decide: its registration says.
    later |= {f"--collector.{r.name}": r.enabled_by_default for r in registrations()}
    for flag, action in flags.items():
        default = later.get(flag, action.default)
        if flag == "--node-name" or default is None or default == argparse.SUPPRESS:
            continue  # the host's name; none; --help and --version
        if flag.startswith("--collector.") and isinstance(default, bool):
            # "all on but gpu_processes": a collector off by default is named there.
            assert (not default) == (f"`{flag.removeprefix('--collector.')}`" in rows[flag])
            continue
        if isinstance(default, bool):
            assert rows[flag] == ("on" if default else "off"), flag
            continue
        text = default if isinstance(default, str) else cli._plain(default)
        assert re.search(rf"(?<![\w.]){re.escape(text)}(?![\w.])", rows[flag]), (flag, text)


def test_gpu_processes_is_opt_in_with_its_pod_log_path() -> None:
    """gpu_processes is off unless asked for; --path.pod-logs defaults to the kubelet's
    /var/log/pods and reads its environment variable; --help says what it needs."""
    default = parse_config([], {})
    chosen = parse_config(
        ["--collector.gpu_processes"], {"PODRESOURCES_EXPORTER_PATH_POD_LOGS": "/host/var/log/pods"}
    )
    assert (False, Path("/var/log/pods"), True, Path("/host/var/log/pods")) == (
        "gpu_processes" in default.collectors,
        default.pod_logs,
        "gpu_processes" in chosen.collectors,
        chosen.pod_logs,
    )
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "--help"], capture_output=True, text=True, timeout=60
    )
    help_text = " ".join(result.stdout.split())
    assert "hostPID: true" in help_text
    assert env_name("--path.pod-logs") in help_text


@pytest.mark.parametrize(
    ("flag", "field", "variable"),
    [
        (
            "--collector.nvml.energy-interval",
            "nvml_energy_interval_s",
            "PODRESOURCES_EXPORTER_COLLECTOR_NVML_ENERGY_INTERVAL",
        ),
        (
            "--collector.nvml.gpm-interval",
            "nvml_gpm_interval_s",
            "PODRESOURCES_EXPORTER_COLLECTOR_NVML_GPM_INTERVAL",
        ),
    ],
)
def test_nvml_intervals_reach_the_collectors(flag: str, field: str, variable: str) -> None:
    """The energy counter's and GPM's intervals: 30 s by default, a duration or the
    flag's variable otherwise, 0 for every poll; the collectors' context carries each."""
    default = parse_config([], {})
    minute = parse_config([flag, "1m"], {})
    from_env = parse_config([], {env_name(flag): "0"})
    assert (30.0, 60.0, 0.0) == tuple(
        getattr(collector_context(c), field) for c in (default, minute, from_env)
    )
    assert 60.0 == minute.as_log_fields()[field]  # in "starting"
    assert variable == env_name(flag)


def test_path_flags_reach_the_collectors(tmp_path: Path) -> None:
    """Each filesystem root given reaches the collectors' context whole: sysfs, procfs,
    the kubelet plugins', every CDI directory in order, the pod logs'."""
    sysfs, procfs = tmp_path / "sys", tmp_path / "proc"
    sysfs.mkdir()
    procfs.mkdir()
    config = parse_config(
        [
            f"--path.sysfs={sysfs}",
            f"--path.procfs={procfs}",
            "--path.kubelet-plugins=/host/plugins",
            "--path.cdi=/host/run-cdi:/host/etc-cdi",
            "--path.pod-logs=/host/pods",
        ],
        {},
    )
    context = collector_context(config)
    assert (
        sysfs,
        procfs,
        Path("/host/plugins"),
        (Path("/host/run-cdi"), Path("/host/etc-cdi")),
        Path("/host/pods"),
    ) == (context.sysfs, context.procfs, context.kubelet_plugins, context.cdi, context.pod_logs)


def test_the_starting_line_names_the_effective_configuration(tmp_path: Path) -> None:
    """``starting`` carries every setting as the exporter will use it: addresses as Go
    writes them (IPv6 in brackets), the files by path (never what they hold), the
    collectors enabled in registry order."""
    web, debug = tmp_path / "web.yml", tmp_path / "debug.yml"
    web.write_text("")
    debug.write_text("basic_auth_users:\n  ops: $2y$10$secret-hash-never-logged\n")
    config = parse_config(
        [
            "--kubelet.socket=/run/k.sock",
            "--kubelet.max-message-bytes=2097152",
            "--kubelet.timeout=2s",
            "--poll.interval=20s",
            "--collector.timeout=3s",
            "--web.listen-address=[::1]:9410",
            "--web.listen-address=127.0.0.1:0",
            f"--web.config.file={web}",
            f"--web.debug-auth.file={debug}",
            "--no-web.enable-debug",
            f"--path.sysfs={tmp_path}",
            f"--path.procfs={tmp_path}",
            "--path.kubelet-plugins=/host/plugins",
            "--path.cdi=/host/run-cdi:/host/etc-cdi",
            "--path.pod-logs=/host/pods",
            "--collector.nvml.energy-interval=1m",
            "--collector.nvml.gpm-interval=15s",
            "--no-collector.nvml",
            "--no-collector.dra",
            "--node-name=gpu-7",
        ],
        {},
    )
    fields = config.as_log_fields()
    assert {
        "kubelet_socket": "/run/k.sock",
        "kubelet_max_message_bytes": 2097152,
        "kubelet_timeout_s": 2.0,
        "poll_interval_s": 20.0,
        "collector_timeout_s": 3.0,
        "listen_addresses": ["[::1]:9410", "127.0.0.1:0"],
        "web_config_file": str(web),
        "debug_auth_file": str(debug),
        "enable_debug": False,
        "sysfs": str(tmp_path),
        "procfs": str(tmp_path),
        "kubelet_plugins": "/host/plugins",
        "cdi": ["/host/run-cdi", "/host/etc-cdi"],
        "pod_logs": "/host/pods",
        "nvml_energy_interval_s": 60.0,
        "nvml_gpm_interval_s": 15.0,
        "collectors": ["pci", "netdev", "infiniband", "drm", "cpu", "numa", "topology"],
        "node_name": "gpu-7",
        "demo": False,
    } == fields
    assert "secret-hash" not in repr(fields)


def test_only_variables_no_flag_reads_are_unknown() -> None:
    """Every flag's variable is known, the --no- forms and repeatable flags' too, and so
    are the links Kubernetes adds for a Service of the same name; the variables of
    --help and --version, which no variable can stand for, are not."""
    parser = cli._build_parser({})
    options = [
        option
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._VersionAction)
        for option in action.option_strings
        if option.startswith("--") and not option.startswith("--no-")
    ]
    read = {env_name(option): "x" for option in options}
    # Kubernetes' links to a Service named podresources-exporter, where they are on.
    links = {
        f"PODRESOURCES_EXPORTER_{name}": "x"
        for name in (
            "SERVICE_HOST",
            "SERVICE_PORT",
            "SERVICE_PORT_METRICS",
            "PORT",
            "PORT_9410_TCP",
            "PORT_9410_TCP_PROTO",
            "PORT_9410_TCP_PORT",
            "PORT_9410_TCP_ADDR",
        )
    }
    never = {
        "PODRESOURCES_EXPORTER_HELP": "1",
        "PODRESOURCES_EXPORTER_VERSION": "1",
        "PODRESOURCES_EXPORTER_PORTS": "1",  # close to a link's name, but none
    }
    assert env_name("--web.listen-address") in read
    assert ((), tuple(sorted(never))) == (
        cli._unknown_variables(parser, {**read, **links}),
        cli._unknown_variables(parser, {**read, **links, **never, "NODE_NAME": "n"}),
    )


def test_app_does_not_import_cli() -> None:
    """Arrows point one way: the app runs a Config without importing the flag parser."""
    code = "import sys, exporter.app; print('exporter.cli' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "False" == result.stdout.strip()
