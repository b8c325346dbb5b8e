"""Basic auth on a real listener: 401 never 500, no user enumeration, floods do not starve."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any, cast

import aiohttp
import bcrypt
import pytest
from aiohttp import web
from structlog.testing import capture_logs
from webserving import basic, free_port, served

from exporter.auth import PasswordChecker, Verdict, _client_certificate_refusal, parse_basic_auth
from exporter.webconfig import LiveWebConfig, TlsSettings

ROUNDS = 4  # the cheapest cost: these tests are about behaviour, not bcrypt's speed
PASSWORD_72 = b"p" * 71 + b"!"


def _hash(password: bytes, *, rounds: int = ROUNDS) -> str:
    return bcrypt.hashpw(password, bcrypt.gensalt(rounds=rounds)).decode()


def _users_file(folder: Path, users: dict[str, str], name: str = "web.yml") -> LiveWebConfig:
    path = folder / name
    path.write_text("basic_auth_users:\n" + "".join(f"  {u}: '{h}'\n" for u, h in users.items()))
    return LiveWebConfig(path)


async def _status(url: str, headers: dict[str, str] | None = None) -> int:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as r:
        await r.read()
        return r.status


class TestBasicAuth:
    async def test_right_wrong_and_missing(self, tmp_path: Path) -> None:
        """Right credentials pass; wrong or missing ones get 401 with a Basic challenge."""
        live = _users_file(tmp_path, {"prometheus": _hash(b"s3cret")})
        async with served(live) as server, aiohttp.ClientSession() as session:
            url = server.url("/metrics")
            assert 200 == await _status(url, basic("prometheus", "s3cret"))
            assert 401 == await _status(url, basic("prometheus", "S3cret"))
            assert 401 == await _status(url, basic("nobody", "s3cret"))
            async with session.get(url) as anonymous:
                assert (401, 'Basic realm="podresources-exporter"') == (
                    anonymous.status,
                    anonymous.headers["WWW-Authenticate"],
                )

    @pytest.mark.parametrize(
        ("header", "why"),
        [
            ({"Authorization": "Basic !!!"}, "not base64"),
            ({"Authorization": "Basic " + "cHJvbWV0aGV1cw=="}, "no colon"),
            ({"Authorization": "Bearer abc"}, "another scheme"),
            ({"Authorization": "Basic"}, "nothing after the scheme"),
            (basic(b"\xff\xfe", "s3cret"), "user name not UTF-8"),
            (basic("prometheus", b"s3cret\0"), "NUL in the password"),
            (basic("prometheus", b"\xff" * 300), "300-byte password"),
        ],
    )
    async def test_odd_credentials_are_401(
        self, tmp_path: Path, header: dict[str, str], why: str
    ) -> None:
        """Whatever arrives in Authorization, the answer is 401, never a 500."""
        live = _users_file(tmp_path, {"prometheus": _hash(b"s3cret")})
        async with served(live) as server:
            assert 401 == await _status(server.url("/metrics"), header), why

    async def test_passwords_of_72_bytes_and_more(self, tmp_path: Path) -> None:
        """72 bytes is bcrypt's limit: it works; one byte more is refused, as Go refuses it,
        even though bcrypt alone would ignore the extra byte."""
        live = _users_file(tmp_path, {"long": _hash(PASSWORD_72)})
        async with served(live) as server:
            url = server.url("/metrics")
            assert 200 == await _status(url, basic("long", PASSWORD_72))
            assert 401 == await _status(url, basic("long", PASSWORD_72 + b"x"))
            assert 401 == await _status(url, basic("long", PASSWORD_72 * 3))

    @pytest.mark.parametrize("prefix", ["$2a$", "$2b$", "$2y$"])
    async def test_bcrypt_variants(self, tmp_path: Path, prefix: str) -> None:
        """The variants htpasswd ($2y$) and Go ($2a$) write are accepted."""
        hashed = prefix + _hash(b"s3cret")[4:]
        live = _users_file(tmp_path, {"alice": hashed})
        async with served(live) as server:
            assert 200 == await _status(server.url("/metrics"), basic("alice", "s3cret"))

    async def test_hash_bcrypt_cannot_decode_is_a_401(self, tmp_path: Path) -> None:
        """A hash of the right shape whose salt bcrypt rejects (it raises ValueError) fails
        the login with 401, for that user and for everyone else: never a 500."""
        live = _users_file(tmp_path, {"odd": "$2b$04$" + "z" * 53, "alice": _hash(b"s3cret")})
        async with served(live) as server:
            url = server.url("/metrics")
            assert 401 == await _status(url, basic("odd", "anything"))
            assert 401 == await _status(url, basic("nobody", "anything"))
            assert 200 == await _status(url, basic("alice", "s3cret"))

    async def test_password_with_colons(self, tmp_path: Path) -> None:
        """The user name ends at the first colon; the password may hold more."""
        live = _users_file(tmp_path, {"alice": _hash(b"a:b:c")})
        async with served(live) as server:
            assert 200 == await _status(server.url("/metrics"), basic("alice", "a:b:c"))

    async def test_probes_are_open(self, tmp_path: Path) -> None:
        """/healthz and /readyz answer without credentials; everything else needs them."""
        live = _users_file(tmp_path, {"prometheus": _hash(b"s3cret")})
        async with served(live) as server:
            assert [200, 200, 401, 401] == [
                await _status(server.url(p))
                for p in ("/healthz", "/readyz", "/metrics", "/debug/allocations")
            ]

    async def test_every_other_route_asks_whatever_it_ends_with(self, tmp_path: Path) -> None:
        """Only the two probe paths themselves are open: not a pod view whose names are
        "healthz" or "readyz", not the landing page, not a path that does not exist."""
        live = _users_file(tmp_path, {"prometheus": _hash(b"s3cret")})
        paths = (
            "/",
            "/debug/allocations/ml-training/healthz",
            "/debug/allocations/healthz/readyz",
            "/metrics/healthz",
            "/HEALTHZ",
        )
        async with served(live) as server:
            assert [401] * len(paths) == [await _status(server.url(p)) for p in paths]

    async def test_the_scheme_has_no_case(self, tmp_path: Path) -> None:
        """RFC 9110 11.1: "basic" is Basic (curl and Go send "Basic"; others need not)."""
        live = _users_file(tmp_path, {"prometheus": _hash(b"s3cret")})
        token = basic("prometheus", "s3cret")["Authorization"].split(" ", 1)[1]
        async with served(live) as server:
            assert [200, 200] == [
                await _status(server.url("/metrics"), {"Authorization": f"{scheme} {token}"})
                for scheme in ("basic", "BASIC")
            ]

    async def test_credentials_that_are_not_strict_base64_are_refused(self, tmp_path: Path) -> None:
        """As Go's StdEncoding: characters outside base64 are not skipped, and a token
        without a colon is no user with an empty password."""
        live = _users_file(tmp_path, {"prometheus": _hash(b"s3cret"), "empty": _hash(b"")})
        token = basic("prometheus", "s3cret")["Authorization"].split(" ", 1)[1]
        async with served(live) as server:
            url = server.url("/metrics")
            assert [200, 401, 401] == [
                await _status(url, basic("empty", "")),
                await _status(url, {"Authorization": f"Basic {token[:4]}!{token[4:]}"}),
                await _status(url, {"Authorization": "Basic ZW1wdHk="}),  # "empty", no colon
            ]

    async def test_a_flood_past_the_queue_is_refused_and_logged_once(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Refused for want of a bcrypt slot: 429 with Retry-After, and one log line per
        interval, not one per request: a flood must not flood the log too."""
        monkeypatch.setattr("exporter.auth.OVERLOAD_LOG_INTERVAL_S", 3600.0)
        answers, logs = await _refused_five_times(tmp_path, wait_for_lines=1)
        assert [(429, "1")] * 5 == answers  # when to come back, as every 429 says
        assert [("basic_auth_overloaded", 0)] == [
            (e["event"], e["suppressed_since_last"]) for e in logs
        ]

    async def test_a_flood_is_counted_whole_when_its_interval_ends(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The refusals after the first line are told when the interval ends, though no
        refusal follows: they used to wait for the next overload, days later maybe."""
        monkeypatch.setattr("exporter.auth.OVERLOAD_LOG_INTERVAL_S", 0.2)
        answers, logs = await _refused_five_times(tmp_path, wait_for_lines=2)
        assert [429] * 5 == [status for status, _ in answers]
        assert [
            ("basic_auth_overloaded", 0, "/metrics"),
            ("basic_auth_overloaded", 3, "/metrics"),
        ] == [(e["event"], e["suppressed_since_last"], e["path"]) for e in logs]


async def _refused_five_times(
    tmp_path: Path, *, wait_for_lines: int
) -> tuple[list[tuple[int, str | None]], list[dict[str, Any]]]:
    """Five scrapes with a password while no bcrypt slot is free: their status and
    Retry-After, and what was logged until ``wait_for_lines`` lines came (or a bound)."""
    live = _users_file(tmp_path, {"prometheus": _hash(b"s3cret")})
    checker = PasswordChecker(max_queued=0)  # every check that needs bcrypt: refused
    answers = []
    try:
        async with served(live, checker=checker) as server, aiohttp.ClientSession() as session:
            with capture_logs() as logs:
                for n in range(5):
                    headers = basic("prometheus", f"w{n}")
                    async with session.get(server.url("/metrics"), headers=headers) as r:
                        answers.append((r.status, r.headers.get("Retry-After")))
                for _ in range(100):  # a bound, not a timing assertion
                    if len(logs) >= wait_for_lines:
                        break
                    await asyncio.sleep(0.05)
    finally:
        checker.close()
    return answers, logs


class TestDebugUsers:
    async def test_debug_needs_its_own_credentials(self, tmp_path: Path) -> None:
        """With --web.debug-auth.file, /debug takes its users and /metrics keeps its own."""
        live = _users_file(tmp_path, {"prometheus": _hash(b"scrape")})
        debug = _users_file(tmp_path, {"oncall": _hash(b"pager")}, name="debug.yml")
        async with served(live, debug_users=debug) as server:
            metrics, allocations = server.url("/metrics"), server.url("/debug/allocations")
            assert 200 == await _status(metrics, basic("prometheus", "scrape"))
            assert 401 == await _status(metrics, basic("oncall", "pager"))
            assert 401 == await _status(allocations, basic("prometheus", "scrape"))
            assert 200 == await _status(allocations, basic("oncall", "pager"))

    async def test_pod_views_take_the_debug_users_too(self, tmp_path: Path) -> None:
        """/debug/allocations/{namespace}/{pod} is /debug: its users, not /metrics'."""
        live = _users_file(tmp_path, {"prometheus": _hash(b"scrape")})
        debug = _users_file(tmp_path, {"oncall": _hash(b"pager")}, name="debug.yml")
        async with served(live, debug_users=debug) as server:
            pod = server.url("/debug/allocations/ml-training/trainer-0")
            assert [401, 200] == [
                await _status(pod, basic("prometheus", "scrape")),
                await _status(pod, basic("oncall", "pager")),
            ]

    async def test_debug_users_without_web_config(self, tmp_path: Path) -> None:
        """/debug can be locked while /metrics stays open."""
        debug = _users_file(tmp_path, {"oncall": _hash(b"pager")}, name="debug.yml")
        async with served(None, debug_users=debug) as server:
            assert 200 == await _status(server.url("/metrics"))
            assert 401 == await _status(server.url("/debug/allocations"))

    def test_debug_file_holds_users_only(self, tmp_path: Path) -> None:
        """Anything but basic_auth_users in the debug file is refused, naming the key."""
        from exporter.webconfig import WebConfigError

        path = tmp_path / "debug.yml"
        path.write_text("tls_server_config: {}\n")
        with pytest.raises(WebConfigError, match="tls_server_config: unknown key"):
            LiveWebConfig(path, users_only=True)

    @pytest.mark.parametrize("text", ["", "basic_auth_users:\n", "basic_auth_users: {}\n"])
    def test_a_debug_file_without_users_is_refused(self, tmp_path: Path, text: str) -> None:
        """Its users replace the web config's for /debug: none would leave /debug open
        to anyone while /metrics stays locked (an empty Secret, a broken template)."""
        from exporter.webconfig import WebConfigError

        path = tmp_path / "debug.yml"
        path.write_text(text)
        with pytest.raises(WebConfigError, match="basic_auth_users: no users"):
            LiveWebConfig(path, users_only=True)

    async def test_emptied_debug_file_keeps_the_last_users(self, tmp_path: Path) -> None:
        """An edit that leaves no users is refused like any bad edit: the last users stay."""
        live = _users_file(tmp_path, {"prometheus": _hash(b"scrape")})
        path = tmp_path / "debug.yml"
        path.write_text(f"basic_auth_users:\n  oncall: '{_hash(b'pager')}'\n")
        debug = LiveWebConfig(path, users_only=True)
        async with served(live, debug_users=debug) as server:
            allocations = server.url("/debug/allocations")
            path.write_text("basic_auth_users:\n")
            assert 401 == await _status(allocations)
            assert 200 == await _status(allocations, basic("oncall", "pager"))

    def test_users_of_mixed_costs_are_logged(self, tmp_path: Path) -> None:
        """A cheaper user answers sooner than an unknown one (checked at the highest
        cost): the file is loaded, and the operator told."""
        users = {"prom": _hash(b"a", rounds=4), "admin": _hash(b"b", rounds=5)}
        with capture_logs() as logs:
            _users_file(tmp_path, users)
            _users_file(tmp_path, {"prom": _hash(b"a", rounds=4)}, name="one.yml")
        assert [(e["event"], e["costs"]) for e in logs] == [("basic_auth_mixed_costs", [4, 5])]


class _Transport:
    def __init__(self, peercert: dict[str, Any] | None) -> None:
        self._peercert = peercert

    def get_extra_info(self, name: str) -> Any:
        return self._peercert if name == "peercert" else None


class _Request:
    """What the client-certificate check reads of a request: its transport."""

    def __init__(self, peercert: dict[str, Any] | None) -> None:
        self.transport = _Transport(peercert)


def _refusal_status(tls: TlsSettings, peercert: dict[str, Any] | None) -> int | None:
    refusal = _client_certificate_refusal(cast(web.Request, _Request(peercert)), tls)
    return None if refusal is None else refusal.status


class TestClientCertificate:
    def test_an_ip_san_matches_in_any_spelling(self) -> None:
        """OpenSSL prints an IPv6 SAN uncompressed and in upper case (Python's peercert
        has it so), the config holds it compressed: the same address passes, another is
        403. The client certificates test_webconfig.py serves carry IPv4 SANs only."""
        tls = TlsSettings(
            client_auth_type="RequireAndVerifyClientCert", client_allowed_sans=("2001:db8::7",)
        )

        def presenting(address: str) -> dict[str, Any]:
            return {"subjectAltName": (("DNS", "prometheus"), ("IP Address", address))}

        assert [None, 403, 403] == [
            _refusal_status(tls, presenting("2001:DB8:0:0:0:0:0:7")),
            _refusal_status(tls, presenting("2001:DB8:0:0:0:0:0:8")),
            _refusal_status(tls, None),  # no certificate: required
        ]


class TestChecker:
    async def test_unknown_users_cost_a_bcrypt_check(self) -> None:
        """An unknown user queues for bcrypt like a known one (against a dummy hash), so the
        answer takes as long; only over-long passwords are refused without one."""
        checker = PasswordChecker(max_queued=0)  # every check that needs bcrypt: BUSY
        users = {"alice": _hash(b"s3cret").encode()}
        try:
            assert [Verdict.BUSY, Verdict.BUSY, Verdict.DENIED] == [
                await checker.check(users, "alice", b"wrong"),
                await checker.check(users, "mallory", b"wrong"),
                await checker.check(users, "mallory", b"x" * 73),
            ]
        finally:
            checker.close()

    async def test_verified_credentials_are_cached(self) -> None:
        """A credential checked once is answered from the cache, without bcrypt."""
        checker = PasswordChecker(max_queued=1)
        users = {"alice": _hash(b"s3cret").encode()}
        try:
            assert Verdict.ALLOWED == await checker.check(users, "alice", b"s3cret")
            assert Verdict.DENIED == await checker.check(users, "alice", b"wrong")
            checker._max_queued = 0  # from here on, anything that needs bcrypt is BUSY
            assert [Verdict.ALLOWED, Verdict.DENIED, Verdict.BUSY] == [
                await checker.check(users, "alice", b"s3cret"),
                await checker.check(users, "alice", b"wrong"),
                await checker.check(users, "alice", b"other"),
            ]
            changed = {"alice": _hash(b"s3cret").encode()}  # a new hash: a new cache key
            assert Verdict.BUSY == await checker.check(changed, "alice", b"s3cret")
        finally:
            checker.close()

    async def test_a_flood_cannot_push_out_a_right_credential(self) -> None:
        """Wrong passwords, more than the cache holds and for longer than a wrong one is
        kept, do not push out a right one still in use: Prometheus, verified once, is
        answered without a bcrypt slot all through a flood that keeps the queue full."""
        now = [0.0]
        checker = PasswordChecker(max_queued=1, cache_size=4, clock=lambda: now[0])
        users = {"prometheus": _hash(b"s3cret").encode()}
        try:
            assert Verdict.ALLOWED == await checker.check(users, "prometheus", b"s3cret")
            for second in range(1, 600):  # ten minutes of it, a scrape every 15 s
                now[0] = float(second)
                await checker.check(users, "prometheus", f"wrong-{second}".encode())
                if second % 15 == 0:
                    checker._max_queued = 0  # the flood holds every bcrypt slot
                    assert Verdict.ALLOWED == await checker.check(users, "prometheus", b"s3cret")
                    checker._max_queued = 1
        finally:
            checker.close()

    async def test_an_unknown_user_is_checked_at_the_highest_cost(self) -> None:
        """Against a dummy hash of the file's highest cost: a cheaper one would answer an
        unknown name sooner than a known one and tell names apart."""
        checker = PasswordChecker()
        costs: list[int] = []

        def verify(password: bytes, hashed: bytes | None, cost: int) -> bool:
            costs.append(cost)
            return False

        checker._verify = verify  # type: ignore[method-assign]
        users = {"cheap": _hash(b"a", rounds=4).encode(), "dear": _hash(b"b", rounds=6).encode()}
        try:
            assert Verdict.DENIED == await checker.check(users, "mallory", b"x")
        finally:
            checker.close()
        assert [6] == costs

    async def test_a_right_credential_stays_cached_while_it_is_used(self) -> None:
        """Kept an hour from its last use, not from its first: Prometheus, scraping all
        along, is never sent back to the bcrypt queue; unused for an hour, it is."""
        now = [0.0]
        checker = PasswordChecker(clock=lambda: now[0])
        users = {"prometheus": _hash(b"s3cret").encode()}
        try:
            assert Verdict.ALLOWED == await checker.check(users, "prometheus", b"s3cret")
            checker._max_queued = 0  # from here on, anything that needs bcrypt is BUSY
            seen = []
            for second in (3000.0, 6000.0, 9000.0, 9000.0 + 3601.0):
                now[0] = second
                seen.append(await checker.check(users, "prometheus", b"s3cret"))
        finally:
            checker.close()
        assert [Verdict.ALLOWED] * 3 + [Verdict.BUSY] == seen

    async def test_a_wrong_credential_checked_again_is_kept_anew(self) -> None:
        """Tried again after its minute, a wrong credential is checked once more and kept
        a minute from then, as the newest entry: a client repeating one wrong password
        costs a bcrypt check a minute, and other wrong ones push out older entries first."""
        now = [0.0]
        checker = PasswordChecker(cache_size=2, clock=lambda: now[0])
        users = {"alice": _hash(b"s3cret").encode()}
        try:
            for second, wrong in ((0.0, b"w1"), (50.0, b"w2"), (61.0, b"w1"), (62.0, b"w3")):
                now[0] = second
                assert Verdict.DENIED == await checker.check(users, "alice", wrong)
            checker._max_queued = 0  # from here on, anything that needs bcrypt is BUSY
            now[0] = 63.0  # w2, kept until 110, was the oldest entry when w3 came
            seen = [await checker.check(users, "alice", wrong) for wrong in (b"w1", b"w2", b"w3")]
        finally:
            checker.close()
        assert [Verdict.DENIED, Verdict.BUSY, Verdict.DENIED] == seen

    async def test_no_user_name_is_answered_from_another_users_cached_login(self) -> None:
        """The cache key is length-prefixed: an unknown user named alice + her hash + the
        start of her password, sending the rest, spells the same bytes as alice's login
        but is not answered from its cache entry (one who read the hash is not let in)."""
        checker = PasswordChecker()
        hashed = _hash(b"s3cret")
        users = {"alice": hashed.encode()}
        try:
            assert Verdict.ALLOWED == await checker.check(users, "alice", b"s3cret")
            checker._max_queued = 0  # from here on, anything that needs bcrypt is BUSY
            forged = await checker.check(users, f"alice{hashed}s3", b"cret")
        finally:
            checker.close()
        assert Verdict.BUSY == forged

    async def test_wrong_credentials_kept_are_bounded(self) -> None:
        """The wrong-credential cache holds cache_size entries, the oldest going first."""
        checker = PasswordChecker(cache_size=2)
        users = {"alice": _hash(b"s3cret").encode()}
        try:
            for wrong in (b"w1", b"w2", b"w3"):
                assert Verdict.DENIED == await checker.check(users, "alice", wrong)
            checker._max_queued = 0  # from here on, anything that needs bcrypt is BUSY
            assert [Verdict.BUSY, Verdict.DENIED, Verdict.DENIED] == [
                await checker.check(users, "alice", wrong) for wrong in (b"w1", b"w2", b"w3")
            ]
        finally:
            checker.close()

    async def test_a_check_whose_request_went_away_leaves_the_worker_serving(self) -> None:
        """A check cancelled while it waits its turn (its client went away) is skipped,
        and the checks after it are still made: the one thread must not die of it."""
        checker, release = _blocking_checker()
        users = {"alice": _hash(b"right").encode()}
        try:
            first = asyncio.create_task(checker.check(users, "alice", b"one"))
            gone = asyncio.create_task(checker.check(users, "alice", b"two"))
            await asyncio.sleep(0)  # both queued, the first running
            gone.cancel()
            # Its place is given back once its task has taken the cancellation: a check
            # from the same address before then finds the address's two places held
            # (Python 3.12's wait_for starts the check below at once, 3.11's a turn later).
            await asyncio.wait([gone])
            release.set()
            # The timeout only catches a worker that died: the check would wait forever.
            last = await asyncio.wait_for(checker.check(users, "alice", b"right"), 30)
            assert (Verdict.DENIED, True, Verdict.ALLOWED) == (
                await first,
                gone.cancelled(),
                last,
            )
        finally:
            release.set()
            checker.close()

    async def test_a_flood_from_one_address_leaves_a_scraper_its_turn(self) -> None:
        """20 distinct wrong passwords from one address, the first check still running:
        that address holds 2 places (18 refused), and a scraper from another address,
        its right password not cached yet, is checked after at most one of the flood's
        waiting checks. The flood held all 8 places, and the scraper got 429."""
        checker, release = _blocking_checker()
        users = {"prometheus": _hash(b"right").encode()}
        try:
            flood = [
                asyncio.create_task(
                    checker.check(users, "prometheus", f"w{n}".encode(), client="10.0.0.66")
                )
                for n in range(20)
            ]
            await asyncio.sleep(0)  # each has its place, or its refusal
            scraper = asyncio.create_task(
                checker.check(users, "prometheus", b"right", client="10.0.0.7")
            )
            await asyncio.sleep(0)
            release.set()
            verdicts = await asyncio.gather(*flood)
            allowed = await asyncio.wait_for(scraper, 30)  # a bound, not a timing
        finally:
            release.set()
            checker.close()
        refused = verdicts.count(Verdict.BUSY)
        assert (Verdict.ALLOWED, 18, 2) == (allowed, refused, verdicts.count(Verdict.DENIED))

    async def test_a_new_address_takes_a_place_from_the_address_with_most(self) -> None:
        """All 8 places held by four addresses, two each: a fifth address takes the
        newest waiting place of one of them, whose request gets 429; a sixth, with the
        others at two and it at none, takes another; each holds at most two."""
        checker, release = _blocking_checker()
        users = {"prometheus": _hash(b"right").encode()}
        try:
            held = {
                (client, n): asyncio.create_task(
                    checker.check(users, "prometheus", f"w{n}".encode(), client=client)
                )
                for client in ("a", "b", "c", "d")
                for n in range(2)
            }
            await asyncio.sleep(0)
            newcomers = [
                asyncio.create_task(checker.check(users, "prometheus", b"right", client=c))
                for c in ("e", "f")
            ]
            await asyncio.sleep(0)
            release.set()
            verdicts = {key: await task for key, task in held.items()}
            allowed = [await asyncio.wait_for(task, 30) for task in newcomers]
        finally:
            release.set()
            checker.close()
        refused = sorted(key for key, verdict in verdicts.items() if verdict is Verdict.BUSY)
        assert ([Verdict.ALLOWED] * 2, 2) == (allowed, len(refused))
        assert all(n == 1 for _, n in refused), refused  # a newest waiting one each

    def test_parse_basic_auth(self) -> None:
        """User name and raw password bytes; None for anything that is not Basic."""
        assert ("a", b"b:c") == parse_basic_auth(basic("a", "b:c")["Authorization"])
        assert parse_basic_auth("Digest x") is None


def _blocking_checker() -> tuple[PasswordChecker, threading.Event]:
    """A checker whose bcrypt waits for the event (right: the password "right"), so
    that the checks let in stay in line until a test lets them go."""
    checker = PasswordChecker()
    release = threading.Event()

    def verify(password: bytes, hashed: bytes | None, cost: int) -> bool:
        release.wait()
        return password == b"right"

    checker._verify = verify  # type: ignore[method-assign]
    return checker, release


async def test_a_scraper_from_its_own_address_is_served_through_a_flood(
    tmp_path: Path,
) -> None:
    """Over HTTP: 30 wrong passwords at once from 127.0.0.1 while bcrypt is held up,
    then Prometheus from 127.0.0.2 with its right password, not cached yet: 200 once
    bcrypt goes on, the flood 401 or 429. It got 429: the flood held every place."""
    live = _users_file(tmp_path, {"prometheus": _hash(b"right")})
    checker, release = _blocking_checker()
    try:
        async with (
            served(live, checker=checker) as server,
            aiohttp.ClientSession() as flood_session,
            aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
            ) as scraper_session,
        ):
            url = server.url("/metrics")

            async def get(session: aiohttp.ClientSession, password: str) -> int:
                headers = basic("prometheus", password)
                async with session.get(url, headers=headers) as response:
                    await response.read()
                    return response.status

            flood = [asyncio.create_task(get(flood_session, f"w{n}")) for n in range(30)]
            for _ in range(100):  # until the flood has its places (a bound, not a timing)
                if len(checker._turns._waiting.get("127.0.0.1", ())) >= 1:
                    break
                await asyncio.sleep(0.05)
            scrape = asyncio.create_task(get(scraper_session, "right"))
            for _ in range(100):  # until the scrape has its place, or its answer
                if scrape.done() or "127.0.0.2" in checker._turns._waiting:
                    break
                await asyncio.sleep(0.05)
            release.set()
            statuses = await asyncio.gather(*flood)
            scraped = await scrape
    finally:
        release.set()
        checker.close()
    assert (200, {401, 429}) == (scraped, set(statuses))


@pytest.mark.usefixtures("tempfile_in_memory")  # serve() runs --demo: its node's tree
async def test_wrong_password_flood_does_not_stop_polling(tmp_path: Path) -> None:
    """64 clients sending wrong passwords (each new, so never cached) to the real exporter:
    polls keep completing (the pod stays ready: /readyz wants a snapshot younger than three
    poll intervals), the already-verified scraper keeps getting fresh /metrics, and the
    flood gets 401 or 429, never a 500. Polls 2 s apart: 6 s of slack for /readyz on a
    CI machine whose two CPUs the flood's bcrypt checks share with the polls."""
    from exporter.app import serve
    from exporter.cli import parse_config

    web = tmp_path / "web.yml"
    web.write_text(f"basic_auth_users:\n  prometheus: '{_hash(b's3cret', rounds=10)}'\n")
    port = free_port()
    config = parse_config(
        [
            *("--demo", "--poll.interval", "2", "--web.listen-address", f"127.0.0.1:{port}"),
            *("--web.config.file", str(web)),
        ],
        {},
    )
    stop = asyncio.Event()
    server = asyncio.create_task(serve(config, stop=stop))
    url = f"http://127.0.0.1:{port}/metrics"
    flooding = asyncio.Event()
    statuses: dict[int, int] = {}
    readiness: list[int] = []

    async def flood(session: aiohttp.ClientSession) -> None:
        while not flooding.is_set():
            headers = basic("prometheus", os.urandom(12).hex())
            try:
                async with session.get(url, headers=headers) as r:
                    statuses[r.status] = statuses.get(r.status, 0) + 1
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.05)

    async def snapshot_time(session: aiohttp.ClientSession) -> str | None:
        try:
            async with session.get(url, headers=basic("prometheus", "s3cret")) as r:
                text = await r.text()
        except aiohttp.ClientConnectionError:
            return None
        for line in text.splitlines():
            if line.startswith("podresources_snapshot_timestamp_seconds "):
                return line
        return None

    try:
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session,
            aiohttp.ClientSession() as scraper,
        ):
            for _ in range(200):  # the exporter is up and the scraper's password verified
                if await snapshot_time(scraper) is not None:
                    break
                await asyncio.sleep(0.1)
            flooders = [asyncio.create_task(flood(session)) for _ in range(64)]
            seen: set[str] = set()
            try:
                for _ in range(600):  # a generous bound, not a timing assertion
                    if (line := await snapshot_time(scraper)) is not None:
                        seen.add(line)
                    async with scraper.get(f"http://127.0.0.1:{port}/readyz") as ready:
                        readiness.append(ready.status)
                    if len(seen) >= 3 and statuses.get(401):
                        break
                    await asyncio.sleep(0.1)
            finally:
                flooding.set()
                await asyncio.gather(*flooders)
        assert len(seen) >= 3, f"polls stalled under the flood: {seen}"
        assert {200} == set(readiness), "the pod went unready under the flood"
        assert set(statuses) <= {401, 429}, statuses
        assert statuses.get(401), "the flood never reached bcrypt"
    finally:
        stop.set()
        await asyncio.wait_for(server, timeout=30)


def test_an_exiting_process_does_not_wait_for_a_check_in_flight() -> None:
    """A check in flight at exit (seconds at a high bcrypt cost; any client can start
    one) used to hold the process after "stopped", past the pod's grace period: the
    executor's thread was joined at exit. A minute-long check must not hold it."""
    code = textwrap.dedent(
        """
        import asyncio, time
        from exporter.auth import PasswordChecker

        async def main():
            checker = PasswordChecker()
            checker._verify = lambda *args: time.sleep(60) or False
            users = {"alice": b"$2b$04$" + b"x" * 53}
            asyncio.get_running_loop().create_task(checker.check(users, "alice", b"pw"))
            await asyncio.sleep(0.5)  # the check is running
            checker.close()

        asyncio.run(main())
        """
    )
    # The timeout only catches the hang (the old executor waited the minute out).
    result = subprocess.run([sys.executable, "-c", code], timeout=30, capture_output=True)
    assert (result.returncode, result.stderr) == (0, b"")
