"""Watching a lock's changes, by callback or by iteration."""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:
    from .client import Client

__all__ = ["LockChange", "Watch"]


@dataclass(frozen=True)
class LockChange:
    """A lock's state after a change (or when the watch started): ``token`` is an int."""

    name: str
    held: bool
    owner: str | None = None
    token: int | None = None
    #: A grant's mode (``"exclusive"`` or ``"shared"``); None for an end.
    mode: str | None = None
    #: How many hold the lock after the change, when the server says.
    holders: int | None = None


_STOP = object()


class Watch:
    """A running watch of one lock.

    With a callback, ``callback(change)`` is called on the client's dispatch thread (it may call
    the client). Without one, iterate: ``for change in watch: ...`` blocks for each change and
    ends after :meth:`stop`. The first change is the state when the watch started. After a
    reconnect the watch is set up again and reports the state at that moment (changes while
    disconnected are not replayed).
    """

    def __init__(self, client: Client, name: str,
                 callback: Callable[[LockChange], None] | None) -> None:
        self._client = client
        self.name = name
        self._callback = callback
        self._queue: queue.Queue[object] = queue.Queue()
        self.watch_id: str | None = None
        self._establishing = False
        self._stopped = threading.Event()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _deliver(self, change: LockChange) -> None:
        if self._stopped.is_set():
            return
        if self._callback is not None:
            self._callback(change)
        else:
            self._queue.put(change)

    def get(self, timeout: float | None = None) -> LockChange | None:
        """The next change, waiting up to ``timeout`` seconds; None on timeout or once stopped."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            return None
        if item is _STOP:
            self._queue.put(_STOP)
            return None
        return item  # type: ignore[return-value]

    def __iter__(self) -> Iterator[LockChange]:
        while True:
            item = self._queue.get()
            if item is _STOP:
                self._queue.put(_STOP)
                return
            yield item  # type: ignore[misc]

    def stop(self) -> None:
        """Ends the watch (never raises)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._queue.put(_STOP)
        self._client._stop_watch(self)

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
