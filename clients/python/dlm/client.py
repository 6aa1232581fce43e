"""The dlm client: locks over one WebSocket connection, reconnecting when it drops."""

from __future__ import annotations

import logging
import queue
import random
import re
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator
from urllib.parse import urlsplit, urlunsplit

from .connection import FRAMES_MULTI, Connection
from .errors import DlmError
from .lease import Lease, LeaseGroup, drift_margin_ms
from .watch import LockChange, Watch
from .websocket import HandshakeError, WebSocket, WebSocketError

__all__ = ["Client", "LockHolder", "LockInfo", "ReadWriteLock", "Semaphore"]

_log = logging.getLogger("dlm")

#: The subprotocol and path of protocol v1.
SUBPROTOCOL = "dlm.v1.json"
WS_PATH = "/v1/ws"
VERSION = "0.1.0"


@dataclass(frozen=True)
class LockInfo:
    """A lock's current state as the server sees it (``get``)."""

    name: str
    held: bool
    #: The owner, token and lease left of the holder with the highest token.
    owner: str | None = None
    token: int | None = None
    ttl_remaining_ms: int | None = None
    #: ``"exclusive"`` or ``"shared"`` while held.
    mode: str | None = None
    #: Shared only: the limit the holders agreed on.
    limit: int | None = None
    #: Every holder, ordered by token (one when exclusive).
    holders: tuple[LockHolder, ...] = ()
    #: How many acquires wait for the lock, and across what: ``"backend"`` (every server's) or
    #: ``"server"`` (the answering server's). None from servers that predate them.
    waiters: int | None = None
    waiters_scope: str | None = None
    #: Free, but in its lock-delay (see ``acquire``'s ``lock_delay_ms``) for this long yet.
    lock_delay_remaining_ms: int | None = None


@dataclass(frozen=True)
class LockHolder:
    """One holder of a lock, as ``get`` lists it."""

    owner: str
    token: int
    ttl_remaining_ms: int


_MODES = ("exclusive", "shared")


def _lock_delay_fields(lock_delay_ms: int) -> dict[str, Any]:
    """``lockDelayMs`` as sent (nothing for 0), checked as the server checks it."""
    if isinstance(lock_delay_ms, bool) or not isinstance(lock_delay_ms, int) or lock_delay_ms < 0:
        raise DlmError("INVALID_PARAMS", "lockDelayMs must be an integer number of milliseconds >= 0",
                       {"field": "lockDelayMs"})
    return {"lockDelayMs": lock_delay_ms} if lock_delay_ms > 0 else {}


def _max_hold_fields(max_hold_ms: int | None, ttl_ms: int) -> dict[str, Any]:
    """``maxHoldMs`` as sent (nothing for None), checked as the server checks it: an integer
    number of milliseconds, at least ``ttl_ms`` (the upper bound is the server's)."""
    if max_hold_ms is None:
        return {}
    if isinstance(max_hold_ms, bool) or not isinstance(max_hold_ms, int):
        raise DlmError("INVALID_PARAMS", "maxHoldMs must be an integer number of milliseconds",
                       {"field": "maxHoldMs"})
    if max_hold_ms < ttl_ms:
        raise DlmError("INVALID_PARAMS",
                       f"maxHoldMs must be at least ttlMs ({ttl_ms} ms), got {max_hold_ms} ms",
                       {"field": "maxHoldMs"})
    return {"maxHoldMs": max_hold_ms}


def _mode_fields(mode: str | None, limit: int | None) -> dict[str, Any]:
    """``mode`` and ``limit`` as sent, checked as the server checks them (``limit`` only with
    ``"shared"``; its range against the server's ``maxHolders`` is the server's check)."""
    if mode is not None and mode not in _MODES:
        raise DlmError("INVALID_PARAMS", 'mode must be "exclusive" or "shared"', {"field": "mode"})
    if limit is not None:
        if mode != "shared":
            raise DlmError("INVALID_PARAMS", 'limit is only for mode "shared"', {"field": "limit"})
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise DlmError("INVALID_PARAMS", "limit must be an integer number of holders >= 1",
                           {"field": "limit"})
    fields: dict[str, Any] = {}
    if mode == "shared":
        fields["mode"] = "shared"
        if limit is not None:
            fields["limit"] = limit
    return fields

_SCHEMES = ("ws", "wss", "http", "https")


def _normalize_url(url: str) -> str:
    """The WebSocket URL of the server at ``url``; ``DlmError`` ``INVALID_PARAMS`` (field
    ``url``) for anything but a ws://, wss://, http:// or https:// URL with a host."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in _SCHEMES or not parts.hostname:
        # "localhost:7070" splits as scheme "localhost": say what was probably meant.
        meant = isinstance(url, str) and re.match(r"^[\w.-]+:\d+", url)
        hint = f" (no scheme: did you mean ws://{url}?)" if meant else ""
        raise DlmError("INVALID_PARAMS",
                       f"url must be a ws://, wss://, http:// or https:// URL, got {url!r}{hint}",
                       {"field": "url"})
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path if parts.path not in ("", "/") else WS_PATH
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def _token(value: Any) -> int | None:
    return int(value) if isinstance(value, str) and value.isdigit() else None


class Client:
    """A client for a dlm server.

    It connects on the first request (or :meth:`connect`), sends ``session.hello`` first on every
    connection, and opens a new connection on the next request after one drops. Leases survive
    a reconnect: the server keeps them until released or expired, and they are extended and
    released by token. Thread-safe: any number of threads may share one client; replies are
    matched to requests by id.

    ``frames="multi"`` (the default) asks the server for multi-message frames (a protocol
    extension): where it agrees, requests that threads issue while another one is being sent
    go out together in one frame, and replies may come back grouped. ``frames="single"``: one
    message per frame, as every v1 client.

    Example::

        with Client("ws://127.0.0.1:7070") as client:
            with client.lock("reports", ttl_ms=10_000, wait_ms=5_000) as lease:
                write_report(fencing_token=lease.token)
    """

    def __init__(self, url: str, *, name: str = "dlm-python",
                 auth: str | Callable[[], str] | None = None,
                 request_timeout: float = 10.0, connect_timeout: float = 10.0,
                 frames: str = FRAMES_MULTI) -> None:
        self.url = _normalize_url(url)
        #: "multi" (default): ask for multi-message frames; "single": one message per frame.
        self._frames = frames
        self._name = name
        self._auth = auth
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._connect_lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._conn: Connection | None = None
        self._session: dict[str, Any] | None = None
        self._leases: dict[tuple[str, int], set[Lease]] = {}
        self._watches: set[Watch] = set()
        self._watches_by_id: dict[str, Watch] = {}
        # Notifications for a watch id not registered yet (its lock.watch reply is in flight).
        self._unrouted: dict[str, list[LockChange]] = {}
        self._closed = False
        self._events: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._dispatcher = threading.Thread(target=self._dispatch, name="dlm-dispatch",
                                            daemon=True)
        self._dispatcher.start()

    # ------------------------------------------------------------------ connection

    @property
    def session(self) -> dict[str, Any] | None:
        """The ``session.hello`` result of the current connection, while connected.

        ``None`` before the first request (the client connects lazily: :meth:`connect` connects
        now and returns it) and after a connection dropped, until the next request.
        """
        conn = self._conn
        return self._session if conn is not None and conn.alive else None

    def connect(self) -> dict[str, Any]:
        """Connects now (instead of on the first request) and returns the session."""
        self._connection()
        session = self.session
        if session is None:
            raise DlmError("UNAVAILABLE", "the connection dropped while connecting")
        return session

    def _connection(self) -> Connection:
        if self._closed:
            raise DlmError("CANCELLED", "the client is closed")
        conn = self._conn
        if conn is not None and conn.alive:
            return conn
        with self._connect_lock:
            conn = self._conn
            if conn is not None and conn.alive:
                return conn
            try:
                ws = WebSocket.connect(self.url, [SUBPROTOCOL], timeout=self._connect_timeout)
            except HandshakeError as error:
                raise DlmError("UNAVAILABLE", f"the server refused the connection: {error}") \
                    from error
            except (OSError, WebSocketError) as error:
                raise DlmError("UNAVAILABLE", f"cannot connect to {self.url}: {error}") \
                    from error
            conn = Connection(ws, self._on_frame, self._on_down)
            params: dict[str, Any] = {"client": {"name": self._name, "version": VERSION}}
            auth = self._auth() if callable(self._auth) else self._auth
            if auth is not None:
                params["auth"] = auth
            if self._frames == FRAMES_MULTI:
                params["frames"] = FRAMES_MULTI
            try:
                session, _ = conn.call("session.hello", params, self._request_timeout)
            except DlmError:
                conn.abort()
                raise
            if session.get("frames") == FRAMES_MULTI:
                conn.use_multi_frames(session.get("limits", {}).get("maxPayloadBytes", 65_536))
            self._session = session
            self._conn = conn
            for watch in list(self._watches):
                if not watch.stopped:
                    try:
                        self._establish(conn, watch)
                    except DlmError as error:
                        _log.warning("could not watch %r again after reconnecting: %s",
                                     watch.name, error)
            return conn

    def _call(self, method: str, params: dict[str, Any], *, timeout: float | None = None,
              write: bool = False, on_result: Callable[[Any], None] | None = None,
              on_queued: Callable[[int], None] | None = None) -> tuple[Any, float]:
        conn = self._connection()
        return conn.call(method, params, self._request_timeout if timeout is None else timeout,
                         write=write, on_result=on_result, on_queued=on_queued)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Sends any request and returns its result (raises DlmError on an error reply)."""
        result, _ = self._call(method, params or {})
        return result

    def close(self) -> None:
        """Releases every lease still held (when connected), ends watches, and closes."""
        if self._closed:
            return
        with self._state_lock:
            leases = [lease for group in self._leases.values() for lease in group]
            watches = list(self._watches)
        for lease in leases:
            try:
                if self._conn is not None and self._conn.alive:
                    lease.release()
            except DlmError:
                pass
        for watch in watches:
            watch.stop()
        self._closed = True
        conn = self._conn
        if conn is not None:
            conn.close()
        self._events.put(None)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # ------------------------------------------------------------------ frames

    def _on_frame(self, kind: str, message: Any) -> None:
        # On the reader thread: hand everything to the dispatch thread, in order, so that
        # callbacks may call the client (which waits for replies the reader delivers).
        if kind == "queued":
            callback, position = message
            self._events.put(lambda: callback(position))
            return
        if kind == "late":
            method, params, reply = message
            result = reply.get("result")
            grants: list[Any] = []
            if method == "lock.acquire" and isinstance(result, dict):
                grants = [{"name": params["name"], **result}]
            elif method == "lock.acquireAll" and isinstance(result, dict):
                grants = result.get("grants") or []
            for grant in grants:
                token = _token(grant.get("token")) if isinstance(grant, dict) else None
                if token is not None:
                    self._release_in_background(grant.get("name"), token, params.get("leaseKey"))
            return
        method = message.get("method")
        params = message.get("params") or {}
        if method == "lock.lost":
            self._events.put(lambda: self._on_lost(params))
        elif method == "lock.releaseRequested":
            self._events.put(lambda: self._on_release_requested(params))
        elif method == "lock.changed":
            self._events.put(lambda: self._on_changed(params))

    def _on_down(self, code: int) -> None:
        def forget_watch_ids() -> None:
            with self._state_lock:
                watches = list(self._watches)
            for watch in watches:
                watch.watch_id = None
            self._watches_by_id.clear()
            self._unrouted.clear()

        self._events.put(forget_watch_ids)
        if not self._closed and self._watches:
            # Watches only hear of changes while connected: reconnect now rather than on the
            # next request.
            threading.Thread(target=self._reconnect_for_watches, name="dlm-reconnect",
                             daemon=True).start()

    def _reconnect_for_watches(self) -> None:
        cap = 0.1
        while not self._closed and self._watches:
            time.sleep(random.uniform(0, cap))  # full jitter
            try:
                self._connection()
                return
            except DlmError as error:
                if error.code == "CANCELLED":
                    return
            cap = min(cap * 2, 5.0)

    def _dispatch(self) -> None:
        while True:
            event = self._events.get()
            if event is None:
                return
            try:
                event()
            except Exception:  # noqa: BLE001 - a callback's failure must not stop the others
                _log.exception("a dlm callback failed")

    def _leases_named(self, params: dict[str, Any]) -> list[Lease]:
        """The leases held here that a notification's ``name`` and ``token`` are about."""
        token = _token(params.get("token"))
        if token is None:
            return []
        with self._state_lock:
            return list(self._leases.get((params.get("name"), token), ()))

    def _on_lost(self, params: dict[str, Any]) -> None:
        for lease in self._leases_named(params):
            lease._lose(str(params.get("reason", "expired")))

    def _on_release_requested(self, params: dict[str, Any]) -> None:
        reason = params.get("reason")
        for lease in self._leases_named(params):
            lease._asked(reason if isinstance(reason, str) else None)

    def _on_changed(self, params: dict[str, Any]) -> None:
        holders = params.get("holders")
        change = LockChange(name=params.get("name", ""), held=bool(params.get("held")),
                            owner=params.get("owner"), token=_token(params.get("token")),
                            mode=params.get("mode"),
                            holders=holders if isinstance(holders, int) else None)
        watch_id = params.get("watchId")
        watch = self._watches_by_id.get(watch_id)
        if watch is not None:
            watch._deliver(change)
        elif isinstance(watch_id, str):
            with self._state_lock:
                establishing = any(w.watch_id is None for w in self._watches)
            if establishing:
                self._unrouted.setdefault(watch_id, []).append(change)

    # ------------------------------------------------------------------ leases

    def _forget(self, lease: Lease) -> None:
        with self._state_lock:
            group = self._leases.get((lease.name, lease.token))
            if group is not None:
                group.discard(lease)
                if not group:
                    del self._leases[(lease.name, lease.token)]

    def _release_in_background(self, name: str, token: int, lease_key: str | None) -> None:
        def release() -> None:
            params: dict[str, Any] = {"name": name, "token": str(token)}
            if lease_key is not None:
                params["leaseKey"] = lease_key
            try:
                self._call("lock.release", params, write=True)
            except DlmError:
                pass

        if not self._closed:
            threading.Thread(target=release, name="dlm-release", daemon=True).start()

    def _clean_up_orphan(self, name: str, owner: str, lease_key: str, ttl_ms: int) -> None:
        """An acquire whose reply was lost may have been granted: find out and free it."""

        def clean() -> None:
            until = time.monotonic() + ttl_ms / 1000
            while time.monotonic() < until and not self._closed:
                try:
                    info = self.get(name)
                    if info.held and info.owner == owner and info.token is not None:
                        self._call("lock.release", {"name": name, "token": str(info.token),
                                                    "leaseKey": lease_key}, write=True)
                    return
                except DlmError as error:
                    if error.code != "UNAVAILABLE":
                        return
                time.sleep(0.2)

        threading.Thread(target=clean, name="dlm-orphan", daemon=True).start()

    def acquire(self, name: str, ttl_ms: int, wait_ms: int = 0,
                owner: str | None = None, lease_key: str | None = None, *,
                mode: str | None = None, limit: int | None = None,
                request_release: bool = False,
                on_queued: Callable[[int], None] | None = None,
                lock_delay_ms: int = 0, max_hold_ms: int | None = None) -> Lease:
        """Acquires ``name`` for ``ttl_ms``, waiting up to ``wait_ms`` (server-side, first come
        first served) while another owner holds it.

        Each call acquires as a fresh owner unless ``owner`` is given, so two threads sharing
        this client never both "hold" a lock; pass the same owner again to re-enter on purpose
        (same token, TTL refreshed) or to re-send an acquire whose reply was lost. A re-sent
        acquire must also send the same ``lease_key`` (22-128 characters of [A-Za-z0-9_-]):
        without it the server treats the owner as somebody else. By default every acquire sends
        a fresh random key (128 bits), which the lease keeps privately; re-entering with an owner
        this client already holds the lock as reuses that lease's key.

        ``mode="shared"`` takes one of up to ``limit`` shared holds (a read lock without
        ``limit``, a semaphore's permit with it; see :meth:`semaphore` and
        :meth:`read_write_lock`); every holder of a name must use the same ``limit``.

        ``lock_delay_ms`` (exclusive only, up to the server's ``maxLockDelayMs``, 60,000): when
        this lease ends by expiry or revocation, nobody is granted the name until that long
        after the end (a release ends it with none); meanwhile others get LOCK_HELD with
        ``data["lockDelayRemainingMs"]`` and :meth:`get` says ``lock_delay_remaining_ms``. Such
        a lease is not released in the background at its local deadline: the server's expiry
        starts the delay.

        ``max_hold_ms`` (exclusive only, ``ttl_ms`` up to the server's ``maxHoldMs``, 7 days): a
        cap on holding. No extend keeps the lease past its grant plus this: one that would is
        granted up to the cap only (``lease.ttl_ms`` says how much), and at the cap the lease is
        lost with ``lost_reason`` ``"maxHold"`` (the server ends it there and counts it; it is
        not released from here).

        Raises DlmError: LOCK_HELD (``data["ttlRemainingMs"]`` when known) when the lock stays
        held, UNAVAILABLE (``data["indeterminate"]`` when the request may have reached the
        server) when there is no answer, INVALID_PARAMS for a bad argument (``data["field"]``;
        ``data["limit"]``: the holders' limit when ``limit`` differs from it).

        ``request_release=True``: when the lock is held and this acquire has to wait, the server
        asks its holders to let go (as :meth:`request_release`, without a reason), once.

        ``on_queued(position)`` (on the client's dispatch thread) hears the acquire's 1-based
        place among the waiters when it starts waiting and whenever that place changes (the
        server's ``lock.queued``; the acquire is sent with ``progress: true``).
        """
        fields: dict[str, Any] = {"name": name, **_mode_fields(mode, limit),
                                  **_lock_delay_fields(lock_delay_ms),
                                  **_max_hold_fields(max_hold_ms, ttl_ms)}
        if request_release:
            fields["requestRelease"] = True
        if on_queued is not None and wait_ms > 0:
            fields["progress"] = True
        result, sent_at, key = self._send_grant_request(
            "lock.acquire", [name], fields, ttl_ms, wait_ms, owner, lease_key, on_queued)
        lease = self._lease_of(result, sent_at, wait_ms, ttl_ms, key)
        lease._release_at_deadline = lock_delay_ms == 0
        lease._max_hold = max_hold_ms is not None
        return lease

    def _send_grant_request(self, method: str, names: list[str], fields: dict[str, Any],
                            ttl_ms: int, wait_ms: int, owner: str | None,
                            lease_key: str | None,
                            on_queued: Callable[[int], None] | None = None,
                            ) -> tuple[Any, float, str]:
        """Sends an acquire (or acquireAll) of ``names``; returns its result, when it was sent,
        and the lease key it sent. The owner is made up here unless given, and so is the key:
        the secret that proves holding (the fencing token and the owner are public).
        Re-entering with an owner this client holds the locks as reuses their key."""
        chosen_owner = owner is not None
        owner = owner if owner is not None else f"py-{uuid.uuid4().hex}"
        key = lease_key if lease_key is not None else self._held_key(names, owner)
        params: dict[str, Any] = {**fields, "ttlMs": ttl_ms, "owner": owner, "leaseKey": key}
        if wait_ms != 0:
            params["waitMs"] = wait_ms
        try:
            result, sent_at = self._call(method, params, write=True,
                                         timeout=self._request_timeout + max(0, wait_ms) / 1000,
                                         on_queued=on_queued)
        except DlmError as error:
            # Only an owner this client made up is known to be nobody else's.
            if error.code == "UNAVAILABLE" and error.data.get("indeterminate") and not chosen_owner:
                for name in names:
                    self._clean_up_orphan(name, owner, key, ttl_ms)
            raise
        return result, sent_at, key

    def _lease_of(self, grant: dict[str, Any], sent_at: float, wait_ms: int, ttl_ms: int,
                  key: str) -> Lease:
        """The Lease for one grant, once it is known to be still worth having (else it is
        released in the background and UNAVAILABLE raised)."""
        name = grant["name"]
        token = int(grant["token"])
        granted_ttl_ms = int(grant["ttlMs"])
        if wait_ms > 0 and time.monotonic() - sent_at > granted_ttl_ms / 10_000:
            # The grant came at some moment during the wait, so the send time says little about
            # when the lease ends. An immediate extend gives a send time that does.
            try:
                extended, sent_at = self._call(
                    "lock.extend", {"name": name, "token": grant["token"], "ttlMs": ttl_ms,
                                    "leaseKey": key},
                    write=True)
                granted_ttl_ms = int(extended["ttlMs"])
            except DlmError as error:
                if error.code != "NOT_HOLDER":
                    self._release_in_background(name, token, key)
                    raise
                raise DlmError("UNAVAILABLE",
                               f"the lease on {name!r} ran out in transit") from error
        if time.monotonic() >= sent_at + (granted_ttl_ms - drift_margin_ms(granted_ttl_ms)) / 1000:
            self._release_in_background(name, token, key)
            raise DlmError("UNAVAILABLE",
                           f"the grant of {name!r} arrived after its lease had run out")
        lease = Lease(self, name, grant["owner"], token, granted_ttl_ms, ttl_ms, sent_at, key)
        if grant.get("mode") == "shared":
            lease.mode = "shared"
            lease.limit = grant.get("limit")
        with self._state_lock:
            self._leases.setdefault((lease.name, token), set()).add(lease)
        return lease

    def acquire_all(self, names: Iterable[str | dict[str, Any]], ttl_ms: int, wait_ms: int = 0,
                    owner: str | None = None, lease_key: str | None = None) -> LeaseGroup:
        """Acquires every lock of ``names``, all or nothing, for ``ttl_ms`` each, waiting up to
        ``wait_ms`` in all while another owner holds one of them.

        The server takes the names in one canonical order, so concurrent calls over overlapping
        sets cannot deadlock, and when one cannot be had it releases the ones it took before it
        answers: after an error none of them is held. 1 to the server's
        ``limits["maxLocksPerRequest"]`` (64) distinct names. Every lease gets its own token and
        shares one owner and one lease key; ``owner`` and ``lease_key`` work as in
        :meth:`acquire` (the same owner and key sent again get the same leases back).

        Raises DlmError: LOCK_HELD (``data["name"]``: the lock that stayed held) when the wait
        ends without them, UNAVAILABLE and CANCELLED (``data["name"]`` when the server says),
        INVALID_PARAMS for a bad argument (``data["field"]``: ``locks`` for an empty or too long
        list, or a name given twice).

        An entry may be a dict ``{"name": ..., "mode": "shared", "limit": 3}`` to take that name
        shared (as :meth:`acquire` with ``mode`` and ``limit``).

        Example::

            with client.acquire_all(["accounts/a", "accounts/b"], ttl_ms=10_000) as group:
                a, b = group.leases
                transfer(from_token=a.token, to_token=b.token)
        """
        if isinstance(names, str):
            raise TypeError("acquire_all takes a list of names, not one name: use acquire")
        locks: list[dict[str, Any]] = []
        for entry in names:
            if isinstance(entry, dict):
                locks.append({"name": entry.get("name"),
                              **_mode_fields(entry.get("mode"), entry.get("limit"))})
            else:
                locks.append({"name": entry})
        names = [lock["name"] for lock in locks]
        result, sent_at, key = self._send_grant_request(
            "lock.acquireAll", names, {"locks": locks}, ttl_ms, wait_ms, owner, lease_key)
        leases: list[Lease] = []
        grants = list(result["grants"])
        try:
            for grant in grants:
                leases.append(self._lease_of(grant, sent_at, wait_ms, ttl_ms, key))
        except DlmError:
            # All or nothing here too: what was granted goes back (the refused one already has).
            for lease in leases:
                lease._end(None)
            for grant in grants[:len(leases)] + grants[len(leases) + 1:]:
                self._release_in_background(grant["name"], int(grant["token"]), key)
            raise
        return LeaseGroup(leases)

    def _held_key(self, names: list[str], owner: str) -> str:
        """The key of the leases this client holds on ``names`` as ``owner`` (a deliberate
        re-entry), when they share one (a set has one key); else a fresh one."""
        with self._state_lock:
            keys = {lease._lease_key for (held_name, _), group in self._leases.items()
                    for lease in group
                    if held_name in names and lease.owner == owner and lease.held}
        return next(iter(keys)) if len(keys) == 1 else secrets.token_urlsafe(16)

    def try_acquire(self, name: str, ttl_ms: int, owner: str | None = None, *,
                    mode: str | None = None, limit: int | None = None,
                    lock_delay_ms: int = 0, max_hold_ms: int | None = None) -> Lease | None:
        """Acquires ``name`` if it can be had now; None when it is held (or, shared, full, or in
        its lock-delay)."""
        try:
            return self.acquire(name, ttl_ms, 0, owner, mode=mode, limit=limit,
                                lock_delay_ms=lock_delay_ms, max_hold_ms=max_hold_ms)
        except DlmError as error:
            if error.code == "LOCK_HELD":
                return None
            raise

    def release(self, lease: Lease) -> bool:
        """Same as ``lease.release()``."""
        return lease.release()

    def extend(self, lease: Lease, ttl_ms: int | None = None) -> None:
        """Same as ``lease.extend(ttl_ms)``."""
        lease.extend(ttl_ms)

    def get(self, name: str) -> LockInfo:
        """The lock's current holders, as the server sees them."""
        result, _ = self._call("lock.get", {"name": name})
        if not result.get("held"):
            return LockInfo(name=result["name"], held=False, waiters=result.get("waiters"),
                            waiters_scope=result.get("waitersScope"),
                            lock_delay_remaining_ms=result.get("lockDelayRemainingMs"))
        listed = result.get("holders") or [result]
        holders = tuple(LockHolder(owner=h.get("owner", ""), token=_token(h.get("token")) or 0,
                                   ttl_remaining_ms=int(h.get("ttlRemainingMs", 0)))
                        for h in listed)
        return LockInfo(name=result["name"], held=True, owner=result.get("owner"),
                        token=_token(result.get("token")),
                        ttl_remaining_ms=result.get("ttlRemainingMs"),
                        mode=result.get("mode", "exclusive"), limit=result.get("limit"),
                        holders=holders, waiters=result.get("waiters"),
                        waiters_scope=result.get("waitersScope"))

    def check(self, name: str, token: int | str) -> bool:
        """Whether a lease with fencing token ``token`` holds ``name`` now (for a shared name:
        ``token`` is among its holders), on any server of the deployment (``lock.check``). For a
        resource that cannot store a token but can ask before it acts. A malformed token is
        INVALID_PARAMS (field ``token``).

        Example::

            if not client.check("jobs/nightly", request_token):
                raise PermissionError("stale holder")
        """
        wire = str(token) if isinstance(token, int) and not isinstance(token, bool) else token
        result, _ = self._call("lock.check", {"name": name, "token": wire})
        return bool(result["current"])

    def request_release(self, name: str, reason: str | None = None) -> int:
        """Asks every current holder of ``name`` to let go, on any server sharing the backend
        (each holder's ``lease.release_requested`` is set); releases nothing. Returns how many
        holders were asked (0: the lock was free). ``reason``: 1-256 UTF-8 bytes
        (INVALID_PARAMS, field ``reason``, otherwise). Needs the ``lock`` permission on ``name``.
        """
        params: dict[str, Any] = {"name": name}
        if reason is not None:
            params["reason"] = reason
        result, _ = self._call("lock.requestRelease", params)
        return int(result["notified"])

    def semaphore(self, name: str, limit: int) -> Semaphore:
        """A semaphore of ``limit`` permits on ``name``: each permit is a shared lease, and at most
        ``limit`` are held at once by every client of the server's backend. Everyone using the
        name must use the same ``limit`` (another is INVALID_PARAMS, field ``limit``).

        Example::

            pool = client.semaphore("gpu-pool", 4)
            with pool.permit(ttl_ms=30_000, wait_ms=60_000) as permit:
                train(fencing_token=permit.token)
            permit = pool.try_acquire(ttl_ms=30_000)  # None when all 4 are held
        """
        return Semaphore(self, name, limit)

    def read_write_lock(self, name: str) -> ReadWriteLock:
        """A read-write lock on ``name``: any number of readers at once, or one writer. One
        first-come-first-served queue serves both, so a waiting writer is not starved.

        Example::

            config = client.read_write_lock("config")
            with config.read(ttl_ms=5_000, wait_ms=5_000):
                value = load_config()
            with config.write(ttl_ms=5_000, wait_ms=10_000) as lease:
                save_config(value, fencing_token=lease.token)
        """
        return ReadWriteLock(self, name)

    def lock(self, name: str | list[str], ttl_ms: int, wait_ms: int = 0,
             owner: str | None = None, *, mode: str | None = None,
             limit: int | None = None) -> _LockContext:
        """A context manager that acquires ``name``, keeps the lease extended in a background
        thread (every third of its TTL) while the block runs, and releases it on exit.

        Given a list of names it acquires them all or none (:meth:`acquire_all`), yields the
        :class:`LeaseGroup`, keeps every lease extended, and releases them all on exit;
        ``group.lost`` is set when any of them is lost.

        Check ``lease.lost`` (a threading.Event) in long work: it is set if the lease ends
        anyway (the server was unreachable for too long, or an operator revoked it).

        Example::

            with client.lock("ledger", ttl_ms=3_000, wait_ms=10_000) as lease:
                for batch in batches:
                    if lease.lost.is_set():
                        raise RuntimeError("lost the ledger lock")
                    ledger.write(batch, fencing_token=lease.token)
        """
        return _LockContext(self, name, ttl_ms, wait_ms, owner, mode, limit)

    # ------------------------------------------------------------------ watches

    def _establish(self, conn: Connection, watch: Watch) -> None:
        def register(result: Any) -> None:
            # On the reader thread, before any later frame: notifications for this id that
            # arrive from now on are routed. Queued as one dispatch step with the initial state.
            watch_id = result["watchId"]

            def start() -> None:
                if watch.stopped:
                    return
                watch.watch_id = watch_id
                self._watches_by_id[watch_id] = watch
                watch._deliver(LockChange(name=watch.name, held=bool(result.get("held")),
                                          token=_token(result.get("token"))))
                for change in self._unrouted.pop(watch_id, []):
                    watch._deliver(change)

            self._events.put(start)

        with self._state_lock:
            # Another thread's reconnect may be setting this watch up right now.
            if watch._establishing:
                return
            watch._establishing = True
        try:
            result, _ = conn.call("lock.watch", {"name": watch.name}, self._request_timeout,
                                  on_result=register)
        finally:
            watch._establishing = False
        if watch.stopped:
            self._unwatch_quietly(result["watchId"])

    def watch(self, name: str, callback: Callable[[LockChange], None] | None = None) -> Watch:
        """Watches ``name``: the state now, then every grant, release and expiry.

        With ``callback`` it is called with each LockChange (on the dispatch thread); without,
        iterate over the returned Watch. Stop it with ``watch.stop()`` (or ``with``).
        """
        watch = Watch(self, name, callback)
        # Connect first: a new connection sets up again the watches already registered.
        conn = self._connection()
        with self._state_lock:
            self._watches.add(watch)
        try:
            self._establish(conn, watch)
        except DlmError:
            with self._state_lock:
                self._watches.discard(watch)
            raise
        return watch

    def _unwatch_quietly(self, watch_id: str) -> None:
        conn = self._conn
        if conn is None or not conn.alive:
            return
        try:
            conn.call("lock.unwatch", {"watchId": watch_id}, self._request_timeout)
        except DlmError:
            pass

    def _stop_watch(self, watch: Watch) -> None:
        with self._state_lock:
            self._watches.discard(watch)

        def forget() -> None:
            if watch.watch_id is not None:
                self._watches_by_id.pop(watch.watch_id, None)

        self._events.put(forget)
        if watch.watch_id is not None:
            self._unwatch_quietly(watch.watch_id)


class _LockContext:
    def __init__(self, client: Client, name: str | list[str], ttl_ms: int, wait_ms: int,
                 owner: str | None, mode: str | None = None, limit: int | None = None) -> None:
        self._client = client
        self._args = (name, ttl_ms, wait_ms, owner)
        self._mode = (mode, limit)
        self._held: Lease | LeaseGroup | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Any:
        name, ttl_ms, wait_ms, owner = self._args
        if isinstance(name, str):
            mode, limit = self._mode
            self._held = self._client.acquire(name, ttl_ms, wait_ms, owner, mode=mode,
                                              limit=limit)
            leases = [self._held]
        else:
            self._held = self._client.acquire_all(name, ttl_ms, wait_ms, owner)
            leases = list(self._held.leases)
        self._thread = threading.Thread(target=self._keep_extended, args=(leases,),
                                        name="dlm-extend", daemon=True)
        self._thread.start()
        return self._held

    def _keep_extended(self, leases: list[Lease]) -> None:
        delay = min(lease.ttl_ms for lease in leases) / 3000
        while not self._stop.wait(delay):
            delay = min(lease.ttl_ms for lease in leases) / 3000
            for lease in leases:
                if not lease.held:
                    return  # lost: the block learns it from lease.lost (group.lost)
                try:
                    lease.extend()
                except DlmError as error:
                    if error.code == "NOT_HOLDER" or not lease.held:
                        return
                    # Unreachable for now: try again soon; the local deadline marks the lease
                    # lost if this goes on too long.
                    retry_in = max(0.05, min(lease.ttl_ms / 10_000, lease.remaining_ms() / 2000))
                    delay = min(delay, retry_in)

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._held is not None:
            try:
                self._held.release()
            except DlmError as error:
                _log.warning("could not release %r: %s", self._args[0], error)

    def __iter__(self) -> Iterator[Lease]:  # pragma: no cover - guards a common mistake
        raise TypeError("use `with client.lock(...) as lease:`")


class Semaphore:
    """``limit`` permits on one lock name (:meth:`Client.semaphore`). Each permit is a shared
    :class:`Lease` with its own token: release it, extend it, watch ``lost`` as any lease."""

    def __init__(self, client: Client, name: str, limit: int) -> None:
        _mode_fields("shared", limit)
        self._client = client
        self.name = name
        self.limit = limit

    def __repr__(self) -> str:
        return f"Semaphore(name={self.name!r}, limit={self.limit})"

    def acquire(self, ttl_ms: int, wait_ms: int = 0, owner: str | None = None) -> Lease:
        """Takes a permit, waiting up to ``wait_ms`` while all are held (LOCK_HELD after)."""
        return self._client.acquire(self.name, ttl_ms, wait_ms, owner, mode="shared",
                                    limit=self.limit)

    def try_acquire(self, ttl_ms: int, owner: str | None = None) -> Lease | None:
        """Takes a permit if one is free now (nobody waiting ahead); None otherwise."""
        return self._client.try_acquire(self.name, ttl_ms, owner, mode="shared", limit=self.limit)

    def permit(self, ttl_ms: int, wait_ms: int = 0, owner: str | None = None) -> _LockContext:
        """A context manager holding one permit, extended in the background, released on exit."""
        return _LockContext(self._client, self.name, ttl_ms, wait_ms, owner, "shared", self.limit)


class ReadWriteLock:
    """Readers (shared) or one writer (exclusive) on one lock name
    (:meth:`Client.read_write_lock`). ``read()`` and ``write()`` are context managers that keep
    the lease extended while the block runs and release it on exit."""

    def __init__(self, client: Client, name: str) -> None:
        self._client = client
        self.name = name

    def __repr__(self) -> str:
        return f"ReadWriteLock(name={self.name!r})"

    def read(self, ttl_ms: int, wait_ms: int = 0, owner: str | None = None) -> _LockContext:
        """Holds a read lease (shared) for the block."""
        return _LockContext(self._client, self.name, ttl_ms, wait_ms, owner, "shared")

    def write(self, ttl_ms: int, wait_ms: int = 0, owner: str | None = None) -> _LockContext:
        """Holds the write lease (exclusive) for the block."""
        return _LockContext(self._client, self.name, ttl_ms, wait_ms, owner)

    def acquire_read(self, ttl_ms: int, wait_ms: int = 0, owner: str | None = None) -> Lease:
        """A read lease to release yourself."""
        return self._client.acquire(self.name, ttl_ms, wait_ms, owner, mode="shared")

    def acquire_write(self, ttl_ms: int, wait_ms: int = 0, owner: str | None = None) -> Lease:
        """A write lease to release yourself."""
        return self._client.acquire(self.name, ttl_ms, wait_ms, owner)
