"""exporter.go_duration: Go's time.ParseDuration, to the nanosecond and the refusal."""

from __future__ import annotations

import re

import pytest

from exporter.go_duration import MAX_DURATION_NS, parse_go_duration_ns

NS, US, MS, S, M, H = 1, 1_000, 1_000_000, 1_000_000_000, 60_000_000_000, 3_600_000_000_000


class TestParse:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            # Go's own cases (src/time/time_test.go, parseDurationTests).
            ("0", 0),
            ("5s", 5 * S),
            ("-5s", -5 * S),
            ("+5s", 5 * S),
            ("-0", 0),
            ("+0", 0),
            ("5.6s", 5 * S + 600 * MS),
            ("5.s", 5 * S),
            (".5s", 500 * MS),
            ("1.004s", 1 * S + 4 * MS),
            ("100.00100s", 100 * S + 1 * MS),
            ("10ns", 10 * NS),
            ("11us", 11 * US),
            ("12µs", 12 * US),  # U+00B5 micro sign
            ("12μs", 12 * US),  # U+03BC Greek mu
            ("13ms", 13 * MS),
            ("15m", 15 * M),
            ("16h", 16 * H),
            ("3h30m", 3 * H + 30 * M),
            ("10.5s4m", 4 * M + 10 * S + 500 * MS),
            ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
            ("1h2m3s4ms5us6ns", H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS),
            ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
            ("0.3333333333333333333h", 20 * M),
            ("9007199254740993ns", 2**53 + 1),  # no float holds it
            ("9223372036854775807ns", MAX_DURATION_NS),
            ("9223372036854775.807us", MAX_DURATION_NS),
            ("9223372036s854ms775us807ns", MAX_DURATION_NS),
            ("-9223372036854775808ns", -(2**63)),
            ("-2562047h47m16.854775808s", -(2**63)),
            ("0.100000000000000000000h", 6 * M),
            ("0.830103483285477580700h", 49 * M + 48 * S + 372_539_827 * NS),
        ],
    )
    def test_go_gives_the_same_nanoseconds(self, text: str, expected: int) -> None:
        """Every value Go's table gives, to the nanosecond."""
        assert expected == parse_go_duration_ns(text)

    @pytest.mark.parametrize(
        ("text", "reason"),
        [
            ("", "invalid duration ''"),
            ("3", "invalid duration '3': missing unit"),
            ("-", "invalid duration '-'"),
            ("s", "invalid duration 's'"),
            (".", "invalid duration '.'"),
            ("-.", "invalid duration '-.'"),
            (".s", "invalid duration '.s'"),
            ("+.s", "invalid duration '+.s'"),
            ("1d", "unknown unit 'd'"),  # Prometheus' model.Duration has it; Go has not
            ("1w", "unknown unit 'w'"),
            ("3000000h", "longer than Go's longest"),
            ("9223372036854775808ns", "longer than Go's longest"),
            ("9223372036854775.808us", "longer than Go's longest"),
            ("9223372036854ms775us808ns", "longer than Go's longest"),
            ("-9223372036854775809ns", "longer than Go's longest"),
            ("1" + "0" * 400 + "s", "longer than Go's longest"),
            # What Python's \d, int() and float() take and Go does not.
            ("\u0661s", "invalid duration"),  # Arabic-Indic one
            ("1\u0660s", "unknown unit '\u0660s'"),
            ("\uff11s", "invalid duration"),  # fullwidth one
            ("1_0s", "unknown unit '_'"),
            (" 1s", "invalid duration"),  # Go trims nothing
            ("1s ", "unknown unit 's '"),
            ("1s\n", "unknown unit 's\\n'"),
            ("--1s", "invalid duration '--1s'"),
            ("+-1s", "invalid duration"),
            ("1e3s", "unknown unit 'e'"),
            ("1S", "unknown unit 'S'"),
        ],
    )
    def test_go_refuses_it_too(self, text: str, reason: str) -> None:
        """What Go refuses, with the reason in one line."""
        with pytest.raises(ValueError, match=re.escape(reason)):
            parse_go_duration_ns(text)
