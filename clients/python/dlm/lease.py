"""A held lock, with its local deadline and lost-lease signal."""

from __future__ import annotations

import math
import threading
import time
from typing import TYPE_CHECKING, Callable, TypeVar

from .errors import DlmError

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Lease", "LeaseGroup", "drift_margin_ms"]

_Self = TypeVar("_Self", bound="_ReleasedOnExit")


def drift_margin_ms(ttl_ms: int) -> int:
    """How much earlier than the server a client considers a lease over: max(10 ms, 1%)."""
    return max(10, math.ceil(ttl_ms * 0.01))


class _ClockedEvent(threading.Event):
    """A :class:`threading.Event` whose every look (``is_set()``, ``wait()``) first asks
    ``check`` to set it by the clock: an event taken before a stall past the lease's deadline
    says lost when read after it, though the deadline timer thread has not run yet."""

    def __init__(self, check: Callable[[], None]) -> None:
        super().__init__()
        self._check = check

    def is_set(self) -> bool:
        self._check()
        return super().is_set()

    isSet = is_set  # noqa: N815 - threading.Event's old spelling, kept consistent

    def wait(self, timeout: float | None = None) -> bool:
        self._check()
        return super().wait(timeout)


class _ReleasedOnExit:
    """A context manager whose exit calls ``release()`` (errors there are not raised)."""

    def release(self) -> bool:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.release()
        except DlmError:
            pass


class Lease(_ReleasedOnExit):
    """A lock this client holds.

    ``token`` is the fencing token (an ``int``): pass it to the resource you protect, which
    must refuse tokens lower than the highest it has seen.

    ``lost`` is a :class:`threading.Event` set as soon as this process must stop relying on the
    lease: when the server says it ended (``lock.lost``, or NOT_HOLDER on extend) and, before the
    server would expire it, when the local deadline passes. The local deadline is counted on
    ``time.monotonic()`` from when the acquire (or the last successful extend) was *sent*, plus
    the granted TTL, minus a drift margin of max(10 ms, 1% of the TTL). ``lost_reason`` is then
    ``"deadline"``, ``"expired"``, ``"revoked"`` or ``"maxHold"`` (it reached the cap on holding
    it was acquired with: the server ended it, or an extend was granted up to the cap and the
    local deadline passed).

    Every look at the lease (``lost``, ``lost_reason``, ``held``, ``remaining_ms()``,
    ``assert_held()``, and ``is_set()`` or ``wait()`` on a ``lost`` event taken earlier) answers
    from the clock at that moment: a thread that stalled past the
    deadline (a long C call holding the GIL, a paused process) learns it on its first look,
    before the deadline timer thread has run.

    ``release_requested`` is a :class:`threading.Event` set when someone asks this holder to let
    go (``Client.request_release``, or a waiting acquire with ``request_release=True``), on any
    server sharing the backend; ``release_request_reason`` is the reason given, if any, and
    callbacks added with :meth:`on_release_requested` are called (on the client's dispatch
    thread) each time. Nothing is released by it: letting go is the holder's call.

    A lease is also a context manager that releases it on exit.

    The lease key (the secret that proves holding, sent with every extend and release so that
    they work after a reconnect to another server) is kept in a private attribute and left out
    of ``repr``: the token and owner are public, the key must not end up in logs.
    """

    def __init__(self, client: Client, name: str, owner: str, token: int, ttl_ms: int,
                 requested_ttl_ms: int, sent_at: float, lease_key: str) -> None:
        self._client = client
        self.name = name
        self.owner = owner
        self.token = token
        #: ``"exclusive"`` or ``"shared"`` (a reader, a semaphore's permit).
        self.mode = "exclusive"
        #: Shared only: the most holders the name admits at once.
        self.limit: int | None = None
        self._lease_key = lease_key
        self.ttl_ms = ttl_ms
        self._requested_ttl_ms = requested_ttl_ms
        self._lost = _ClockedEvent(self._check_deadline)
        self._lost_reason: str | None = None
        self._lock = threading.Lock()
        self._extend_lock = threading.Lock()
        self._ended = False
        self._released = False
        self._deadline = 0.0
        # False for a lease asked with a lock-delay: its end is left to the server's expiry.
        self._release_at_deadline = True
        # Acquired with a cap on holding; capped: an extend was granted up to it.
        self._max_hold = False
        self._capped = False
        self._timer: threading.Timer | None = None
        # Told once when the lease is lost (a LeaseGroup's own ``lost``).
        self._on_lost: list[Callable[[], None]] = []
        self._release_requested = threading.Event()
        self._release_request_reason: str | None = None
        self._on_release_requested: list[Callable[[Lease, str | None], None]] = []
        # ``on_expiring`` callbacks, and the warning's state since the last successful extend.
        self._on_expiring: list[Callable[[float], None]] = []
        self._expiring_told = False
        self._expiring_timer: threading.Timer | None = None
        self._arm(sent_at, ttl_ms)

    def __repr__(self) -> str:
        state = "released" if self._released else f"lost:{self._lost_reason}" if self._ended else "held"
        shared = f", mode='shared', limit={self.limit}" if self.mode == "shared" else ""
        return (f"Lease(name={self.name!r}, token={self.token}, ttl_ms={self.ttl_ms}{shared}, "
                f"{state})")

    @property
    def lost(self) -> threading.Event:
        """Set once the lease is lost (by the clock when its deadline has passed): the event
        asks the clock at each ``is_set()`` and ``wait()``, so one taken before a stall past the
        deadline says lost when read after it, before the deadline timer has run."""
        self._check_deadline()
        return self._lost

    @property
    def release_requested(self) -> threading.Event:
        """Set once someone asked this holder to let go (the lease is still held)."""
        return self._release_requested

    @property
    def release_request_reason(self) -> str | None:
        """The reason given with the latest release request, if one came with a reason."""
        return self._release_request_reason

    def on_release_requested(self, callback: Callable[[Lease, str | None], None]) -> None:
        """Calls ``callback(lease, reason)`` on each release request for this lease."""
        self._on_release_requested.append(callback)

    def _asked(self, reason: str | None) -> None:
        if self._ended:
            return
        self._release_request_reason = reason
        self._release_requested.set()
        for callback in list(self._on_release_requested):
            try:
                callback(self, reason)
            except Exception:  # noqa: BLE001 - a callback's failure must not stop the dispatch
                pass

    @property
    def lost_reason(self) -> str | None:
        """``"deadline"``, ``"expired"`` or ``"revoked"`` once lost; None while held or released."""
        self._check_deadline()
        return self._lost_reason

    @property
    def held(self) -> bool:
        """True until the lease is released or lost (by the clock at this moment)."""
        self._check_deadline()
        return not self._ended

    def assert_held(self) -> None:
        """Raises DlmError NOT_HOLDER unless the lease is held at this moment, by the clock.

        Call it right before a write the lease protects, next to passing its fencing token.
        """
        self._check_deadline()
        if self._ended:
            raise DlmError("NOT_HOLDER", f"the lease on {self.name!r} has ended "
                           f"({'released' if self._released else self._lost_reason})")

    @property
    def released(self) -> bool:
        return self._released

    def remaining_ms(self) -> float:
        """Milliseconds left before the local deadline; 0 once the lease has ended."""
        self._check_deadline()
        if self._ended:
            return 0.0
        return max(0.0, (self._deadline - time.monotonic()) * 1000)

    def _arm(self, sent_at: float, granted_ttl_ms: int) -> None:
        with self._lock:
            if self._ended:
                return
            self.ttl_ms = granted_ttl_ms
            self._deadline = sent_at + (granted_ttl_ms - drift_margin_ms(granted_ttl_ms)) / 1000
            # An extend got through: the warning is armed again by the next failing one.
            self._expiring_told = False
            if self._expiring_timer is not None:
                self._expiring_timer.cancel()
                self._expiring_timer = None
            if self._timer is not None:
                self._timer.cancel()
            self._timer = threading.Timer(max(0.0, self._deadline - time.monotonic()),
                                          self._on_deadline)
            self._timer.daemon = True
            self._timer.start()

    def _check_deadline(self) -> None:
        # The deadline timer thread may not have run yet (a stall): the clock decides.
        if not self._ended and time.monotonic() >= self._deadline:
            self._on_deadline()

    def _on_deadline(self) -> None:
        with self._lock:
            if self._ended or time.monotonic() < self._deadline:
                return
        # At its cap on holding the server ends it there, and counts it: not released from here.
        if self._capped:
            self._lose("maxHold")
            return
        # Nobody here relies on the lease any more, but the server may hold it a little longer:
        # free it for the next holder.
        if self._lose("deadline") and self._release_at_deadline:
            self._client._release_in_background(self.name, self.token, self._lease_key)

    def _end(self, lost_reason: str | None) -> bool:
        """Ends the lease, once (False when it had already ended): lost for ``lost_reason``, or
        released when that is None. Stops the timer, and the client forgets the lease."""
        with self._lock:
            if self._ended:
                return False
            self._ended = True
            if lost_reason is None:
                self._released = True
            else:
                self._lost_reason = lost_reason
            if self._timer is not None:
                self._timer.cancel()
            if self._expiring_timer is not None:
                self._expiring_timer.cancel()
        self._client._forget(self)
        return True

    def _lose(self, reason: str) -> bool:
        if not self._end(reason):
            return False
        self._lost.set()
        for listener in self._on_lost:
            listener()
        return True

    def on_expiring(self, callback: Callable[[float], None]) -> None:
        """Calls ``callback(remaining_ms)`` (on a timer thread, or the thread whose extend failed)
        when the lease's validity left falls below a third of its TTL while its extends are
        failing (one failed since the last that succeeded): once per deadline, a warning that the
        lease will be lost unless an extend gets through.

        Example::

            lease.on_expiring(lambda ms: log.warning("lock ends in %d ms", ms))
        """
        self._on_expiring.append(callback)

    def _extend_failed(self) -> None:
        # Warn now when less than a third of the TTL is left, else when it will be.
        with self._lock:
            if self._ended or self._expiring_told or self._expiring_timer is not None:
                return
            due_in = self._deadline - self.ttl_ms / 3000 - time.monotonic()
            if due_in > 0:
                self._expiring_timer = threading.Timer(due_in, self._tell_expiring)
                self._expiring_timer.daemon = True
                self._expiring_timer.start()
                return
        self._tell_expiring()

    def _tell_expiring(self) -> None:
        self._check_deadline()
        with self._lock:
            if self._ended or self._expiring_told:
                return
            self._expiring_told = True
            self._expiring_timer = None
            remaining = max(0.0, (self._deadline - time.monotonic()) * 1000)
        for callback in list(self._on_expiring):
            try:
                callback(remaining)
            except Exception:  # noqa: BLE001 - a callback's error must not stop the lease
                pass

    def extend(self, ttl_ms: int | None = None) -> None:
        """Restarts the lease at ``ttl_ms`` (default: the TTL it was acquired with) from now.

        Raises DlmError NOT_HOLDER when the lease has ended (and then ``lost`` is set), or
        UNAVAILABLE when the server could not be reached (the lease may still run out).
        """
        ttl = self._requested_ttl_ms if ttl_ms is None else ttl_ms
        # One extend at a time, so the deadline always comes from the newest one the server saw.
        with self._extend_lock:
            self.assert_held()
            try:
                result, sent_at = self._client._call(
                    "lock.extend", {"name": self.name, "token": str(self.token), "ttlMs": ttl,
                                    "leaseKey": self._lease_key},
                    write=True)
            except DlmError as error:
                if error.code == "NOT_HOLDER":
                    self._lose("expired")
                else:
                    self._extend_failed()
                raise
            if ttl_ms is not None:
                self._requested_ttl_ms = ttl_ms
            granted = int(result["ttlMs"])
            # Granted less than asked: only up to the cap on holding.
            if self._max_hold and granted < ttl:
                self._capped = True
            self._arm(sent_at, granted)

    def release(self) -> bool:
        """Releases the lock: True when this call freed it, False when the lease had already
        ended (released, expired, revoked). Raises UNAVAILABLE when the server could not be
        reached; the lease then ends by itself when its TTL runs out."""
        if not self._end(None):
            return False
        try:
            self._client._call("lock.release", {"name": self.name, "token": str(self.token),
                                                "leaseKey": self._lease_key},
                               write=True)
        except DlmError as error:
            if error.code == "NOT_HOLDER":
                return False
            raise
        return True


class LeaseGroup(_ReleasedOnExit):
    """The leases of one :meth:`Client.acquire_all`, taken all or nothing.

    ``leases`` are in the order the names were given, each with its own fencing token. ``lost``
    is a :class:`threading.Event` set as soon as any of them is lost (by the clock too, as each
    lease's own ``lost``): work that needs every lock stops then. A group is a context manager
    that releases every lease on exit.
    """

    def __init__(self, leases: list[Lease]) -> None:
        self.leases: tuple[Lease, ...] = tuple(leases)
        self._lost = _ClockedEvent(self._check_deadlines)
        for lease in self.leases:
            lease._on_lost.append(self._lost.set)

    def __repr__(self) -> str:
        return f"LeaseGroup({list(self.leases)!r})"

    @property
    def lost(self) -> threading.Event:
        """Set once any lease of the group is lost (asked of the clock at each look)."""
        self._check_deadlines()
        return self._lost

    def _check_deadlines(self) -> None:
        for lease in self.leases:
            lease._check_deadline()

    @property
    def held(self) -> bool:
        """True while every lease of the group is held (by the clock at this moment)."""
        return all(lease.held for lease in self.leases)

    @property
    def tokens(self) -> dict[str, int]:
        """Each lock's fencing token, by name."""
        return {lease.name: lease.token for lease in self.leases}

    def release(self) -> bool:
        """Releases every lease (all of them, even when one fails): True when this call freed
        every one, False when some had already ended. Raises the first UNAVAILABLE after trying
        them all; those leases end by themselves when their TTL runs out."""
        freed = True
        failure: DlmError | None = None
        for lease in self.leases:
            try:
                freed = lease.release() and freed
            except DlmError as error:
                failure = failure or error
        if failure is not None:
            raise failure
        return freed
