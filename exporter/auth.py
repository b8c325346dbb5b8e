"""Who may see what: basic auth, client certificates, rate limit and response headers.

One middleware answers for the whole HTTP surface, from the live web config:

- ``/healthz`` and ``/readyz`` are never behind auth or the rate limit: the kubelet's
  probes carry neither a password nor a client certificate.
- ``/debug/*`` can require other users than ``/metrics`` (``--web.debug-auth.file``).
- A wrong password costs the same whether the user exists or not (unknown users are
  checked against a dummy hash of the file's highest cost; a file mixing costs is logged,
  ``basic_auth_mixed_costs``, as it lets a cheaper user be told apart), and no
  credential makes a 500: over-long
  passwords and undecodable headers are refused like wrong ones; hashes were checked
  when the file was loaded.
- bcrypt runs on its own one-thread executor with a short queue; past it, a request is
  answered 429 at once. Checked credentials are answered from caches keyed by a digest
  (never the password): a right one from its own, kept while it is used (a flood of
  wrong passwords cannot push it out), a wrong one for a minute. So Prometheus' scrapes,
  once their credential was checked, never queue behind a flood of wrong passwords, and
  neither do the poller's threads.
- The queue is shared fairly between client addresses: each has at most two places in
  it and the checks are made for each address in turn, so a flood from one address
  cannot keep out a scraper whose password is not cached yet (after a restart, or an
  edit of the users).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import enum
import hashlib
import json
import math
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Mapping

import structlog
from aiohttp import hdrs, web

from exporter.outage import Throttle
from exporter.ratelimit import TokenBucket
from exporter.web import SERVER_HEADER
from exporter.webconfig import LiveWebConfig, RateLimit, TlsSettings, bcrypt_cost, normal_san

__all__ = [
    "OPEN_PATHS",
    "SERVER_HEADER",
    "PasswordChecker",
    "Verdict",
    "access_middleware",
    "response_headers",
]

log = structlog.get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
DEBUG_PREFIX = "/debug/"
# bcrypt reads at most 72 bytes; Go's bcrypt refuses longer passwords, and so do we.
MAX_PASSWORD_BYTES = 72
DEFAULT_COST = 10
CACHE_SIZE = 1024  # wrong credentials
CACHE_TTL_S = 60.0
# Right credentials: a few per node (Prometheus replicas, on-call). The digest binds the
# user's hash, so an edited or removed user never matches an old entry: the time limit,
# counted from the last use, only lets go of credentials nobody sends any more.
ALLOWED_CACHE_SIZE = 64
ALLOWED_CACHE_TTL_S = 3600.0
MAX_QUEUED_CHECKS = 8
# Of those, one client address's at most: a flood of distinct wrong passwords from one
# address held all 8 and a scraper whose password was not cached yet (a restart, an
# edit of the users) got 429 until the flood stopped. Past MAX_QUEUED_CHECKS, a client
# with fewer checks takes the newest waiting place of the client with the most.
MAX_CHECKS_PER_CLIENT = 2
OVERLOAD_LOG_INTERVAL_S = 10.0  # a flood is one log line per interval, not one per request


class Verdict(enum.Enum):
    ALLOWED = "allowed"
    DENIED = "denied"
    BUSY = "busy"


def _digest(*parts: bytes) -> bytes:
    """Length-prefixed, so (user "a:", password "b") and ("a", ":b") differ."""
    return hashlib.sha256(b"".join(len(p).to_bytes(4, "big") + p for p in parts)).digest()


class PasswordChecker:
    """bcrypt on a bounded executor of its own, behind a short-lived result cache."""

    def __init__(
        self,
        *,
        max_queued: int = MAX_QUEUED_CHECKS,
        cache_size: int = CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._worker = _DaemonWorker("bcrypt")
        self._max_queued = max_queued
        self._turns = _Turns(max_per_client=MAX_CHECKS_PER_CLIENT)
        self._denied = _ExpiringSet(size=cache_size, ttl_s=CACHE_TTL_S)
        self._allowed = _ExpiringSet(size=ALLOWED_CACHE_SIZE, ttl_s=ALLOWED_CACHE_TTL_S)
        self._clock = clock
        self._dummies: dict[int, bytes] = {}

    def close(self) -> None:
        self._worker.close()

    def _dummy(self, cost: int) -> bytes:
        """A hash of nothing anyone knows, at ``cost``: an unknown user costs a real check."""
        import bcrypt

        if cost not in self._dummies:
            self._dummies[cost] = bcrypt.hashpw(b"\0unknown user", bcrypt.gensalt(rounds=cost))
        return self._dummies[cost]

    def _verify(self, password: bytes, hashed: bytes | None, cost: int) -> bool:
        # Imported at the first check, in the checker's thread: bcrypt costs ~0.4 MiB of
        # RSS, and most nodes configure no basic auth.
        import bcrypt

        try:
            ok = bcrypt.checkpw(password, hashed or self._dummy(cost))
        except ValueError:  # a NUL byte, an odd hash: a failed login, never a 500
            return False
        return ok and hashed is not None

    async def check(
        self, users: Mapping[str, bytes], user: str, password: bytes, *, client: str = ""
    ) -> Verdict:
        """``client``: the address the request came from, whose checks take their turn
        with other addresses'."""
        hashed = users.get(user)
        if len(password) > MAX_PASSWORD_BYTES:
            return Verdict.DENIED
        key = _digest(user.encode(), hashed or b"", password)
        now = self._clock()
        if self._allowed.holds(key, now, renew=True):
            return Verdict.ALLOWED
        if self._denied.holds(key, now, renew=False):
            return Verdict.DENIED
        turn = self._turns.join(client, max_checks=self._max_queued)
        if turn is None:
            return Verdict.BUSY
        costs = [bcrypt_cost(h.decode()) or DEFAULT_COST for h in users.values()]
        try:
            if not await turn:
                return Verdict.BUSY  # a client with fewer checks took the place
            ok = await self._worker.run(
                self._verify, password, hashed, max(costs, default=DEFAULT_COST)
            )
        finally:
            self._turns.leave(client, turn)
        (self._allowed if ok else self._denied).add(key, now)
        return Verdict.ALLOWED if ok else Verdict.DENIED


class _Turns:
    """Whose bcrypt check runs next: one at a time, each client address in turn. A
    client holds at most ``max_per_client`` places (waiting or running); where all
    ``max_checks`` are taken, a client with fewer takes the newest waiting place of the
    client with the most, else it is refused."""

    def __init__(self, *, max_per_client: int) -> None:
        self._max_per_client = max_per_client
        # Waiting checks by client, the next client to run one first.
        self._waiting: OrderedDict[str, deque[asyncio.Future[bool]]] = OrderedDict()
        self._running: str | None = None

    def _held(self, client: str) -> int:
        return len(self._waiting.get(client, ())) + (self._running == client)

    def join(self, client: str, *, max_checks: int) -> asyncio.Future[bool] | None:
        """A place: True once it is this check's turn, False if a client with fewer
        checks took the place first; None where there is none."""
        held = self._held(client)
        if held >= self._max_per_client:
            return None
        taken = sum(map(len, self._waiting.values())) + (self._running is not None)
        if taken >= max_checks and not self._give_place(held):
            return None
        turn: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(client, deque()).append(turn)
        self._next()
        return turn

    def leave(self, client: str, turn: asyncio.Future[bool]) -> None:
        """``turn``'s check is done, refused, or its request went away."""
        if turn.done() and not turn.cancelled() and turn.result():
            self._running = None
        elif turn in (waiting := self._waiting.get(client, deque())):
            waiting.remove(turn)
            if not waiting:
                del self._waiting[client]
        self._next()

    def _give_place(self, held: int) -> bool:
        """Refuse the newest waiting check of the client with the most, if that is more
        than ``held``: True when a place was freed."""
        if not self._waiting:
            return False
        most = max(self._waiting, key=self._held)
        if self._held(most) <= held:
            return False
        waiting = self._waiting[most]
        turn = waiting.pop()
        if not waiting:
            del self._waiting[most]
        if not turn.done():  # else its request went away already
            turn.set_result(False)
        return True

    def _next(self) -> None:
        while self._running is None and self._waiting:
            client, waiting = next(iter(self._waiting.items()))
            turn = waiting.popleft()
            if waiting:
                self._waiting.move_to_end(client)  # the other clients first
            else:
                del self._waiting[client]
            if turn.done():
                continue  # its request went away
            self._running = client
            turn.set_result(True)


class _DaemonWorker:
    """One daemon thread running calls in turn. A ThreadPoolExecutor's thread is joined
    when the process exits: a bcrypt check in flight (seconds at a high cost, and any
    client can start one) held the exit past the pod's grace period after "stopped".
    As with an executor, a call whose request went away before its turn is not made."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def run(self, call: Callable[..., bool], *args: object) -> asyncio.Future[bool]:
        job: concurrent.futures.Future[bool] = concurrent.futures.Future()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
            self._thread.start()
        self._jobs.put((job, call, args))
        return asyncio.wrap_future(job)  # cancelling it cancels the job

    def close(self) -> None:
        self._jobs.put(None)

    def _work(self) -> None:
        while (item := self._jobs.get()) is not None:
            job, call, args = item
            if not job.set_running_or_notify_cancel():
                continue
            try:
                job.set_result(call(*args))
            except Exception as error:  # handed to the awaiting request
                job.set_exception(error)


_Job = tuple["concurrent.futures.Future[bool]", Callable[..., bool], tuple[object, ...]]


class _ExpiringSet:
    """At most ``size`` keys, each held ``ttl_s`` from when it was added (or last
    renewed); the least recently added or renewed goes first."""

    def __init__(self, *, size: int, ttl_s: float) -> None:
        self._size = size
        self._ttl_s = ttl_s
        self._until: OrderedDict[bytes, float] = OrderedDict()

    def holds(self, key: bytes, now: float, *, renew: bool) -> bool:
        until = self._until.get(key)
        if until is None or until <= now:
            return False
        if renew:
            self._until[key] = now + self._ttl_s
            self._until.move_to_end(key)
        return True

    def add(self, key: bytes, now: float) -> None:
        self._until[key] = now + self._ttl_s
        self._until.move_to_end(key)
        while len(self._until) > self._size:
            self._until.popitem(last=False)


def parse_basic_auth(header: str) -> tuple[str, bytes] | None:
    """User and password from an ``Authorization: Basic`` header; None if it is not one."""
    scheme, _, encoded = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, colon, password = decoded.partition(b":")
    if not colon:
        return None
    try:
        return user.decode("utf-8"), password
    except UnicodeDecodeError:
        return None


def _refusal(status: int, message: str, **headers: str) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps({"error": message}) + "\n",
        content_type="application/json",
        headers=headers,
    )


def _unauthorized(message: str) -> web.Response:
    return _refusal(401, message, **{"WWW-Authenticate": 'Basic realm="podresources-exporter"'})


def _client_certificate_refusal(request: web.Request, tls: TlsSettings) -> web.Response | None:
    """RequireAndVerifyClientCert and client_allowed_sans, checked on the verified peer."""
    if not (tls.client_cert_required or tls.client_allowed_sans is not None):
        return None
    transport = request.transport
    peer = transport.get_extra_info("peercert") if transport is not None else None
    if not peer:
        # No certificate cannot beat a wrong one: with SANs listed, one is required. 403,
        # not 401: a 401 must name an HTTP scheme (RFC 9110 15.5.2), and none brings a
        # TLS certificate; a client that got one would retry its headers in vain.
        return _refusal(403, "a client certificate is required")
    if tls.client_allowed_sans is None:
        return None
    presented = {
        str(value).strip() for _, value in peer.get("subjectAltName", ()) if isinstance(value, str)
    }
    if not {normal_san(v) for v in presented} & set(tls.client_allowed_sans):
        return _refusal(403, "the client certificate has none of the allowed SANs")
    return None


class _RateLimiter:
    """One bucket for the current ``rate_limit``; a changed setting starts a new one."""

    def __init__(self) -> None:
        self._setting: RateLimit | None = None
        self._bucket: TokenBucket | None = None

    def allow(self, setting: RateLimit | None) -> bool:
        if setting is None:
            return True
        if setting != self._setting or self._bucket is None:
            self._setting = setting
            self._bucket = TokenBucket(rate_per_s=1 / setting.interval_s, burst=setting.burst)
        return self._bucket.try_take()


def access_middleware(
    *,
    web_config: LiveWebConfig | None,
    debug_users: LiveWebConfig | None,
    checker: PasswordChecker,
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """The middleware for the whole app; the config files are re-read when they change."""
    limiter = _RateLimiter()
    overloaded = Throttle("basic_auth_overloaded", interval_s=OVERLOAD_LOG_INTERVAL_S, logger=log)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        config = web_config.current() if web_config is not None else None
        # The certificate and the password before the rate limit: a client refused for
        # either must not spend the tokens that the scrapers holding them need.
        # exporter-toolkit refuses a certificate in the handshake, before its limiter,
        # but limits before basic auth, to spare bcrypt's CPU; here bcrypt has its own
        # bound (one thread, MAX_QUEUED_CHECKS, 429 past it), and a known credential
        # costs a digest, so a client that cannot log in cannot lock the scraper out.
        if config is not None and config.tls is not None:
            refusal = _client_certificate_refusal(request, config.tls)
            if refusal is not None:
                return refusal
        users: Mapping[str, bytes] = config.users if config is not None else {}
        if debug_users is not None and request.path.startswith(DEBUG_PREFIX):
            users = debug_users.current().users
        if users:
            credentials = parse_basic_auth(request.headers.get("Authorization", ""))
            if credentials is None:
                return _unauthorized("authentication required")
            verdict = await checker.check(users, *credentials, client=request.remote or "")
            if verdict is Verdict.BUSY:
                overloaded.warning(path=request.path)
                return _refusal(429, "too many password checks at once", **{"Retry-After": "1"})
            if verdict is Verdict.DENIED:
                return _unauthorized("wrong user name or password")
        if config is not None and not limiter.allow(config.rate_limit):
            # Whole seconds, rounded up: when the next request can pass at the earliest.
            retry = str(math.ceil(config.rate_limit.interval_s)) if config.rate_limit else "1"
            return _refusal(429, "rate limit exceeded", **{"Retry-After": retry})
        return await handler(request)

    return middleware


def response_headers(
    web_config: LiveWebConfig | None,
) -> Callable[[web.Request, web.StreamResponse], Awaitable[None]]:
    """An ``on_response_prepare`` hook: ``Server: SERVER_HEADER`` (no versions) and
    http_server_config.headers on every response the application answers. The 400s the
    HTTP parser sends before a request exists (a malformed head, TLS on the plain port)
    carry none of the configured ones, as Go's net/http sends its own; the server's
    handler names itself on those (exporter.web)."""

    async def prepare(request: web.Request, response: web.StreamResponse) -> None:
        # Set, not left to aiohttp's default, which names Python's and aiohttp's versions.
        response.headers[hdrs.SERVER] = SERVER_HEADER
        if web_config is not None:
            for name, value in web_config.current().http.headers:
                response.headers[name] = value

    return prepare
