"""One WebSocket connection to a dlm server: requests correlated with replies by id."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
from typing import Any, Callable

from .errors import DlmError, from_rpc_error
from .websocket import OP_TEXT, ConnectionClosed, WebSocket, WebSocketError

__all__ = ["Connection", "dumps", "pack_frames", "FRAMES_MULTI"]

#: ``session.hello``'s ``frames`` value for multi-message frames (protocol extension).
FRAMES_MULTI = "multi"
#: The server's default frame bound (``limits.maxPayloadBytes``).
MAX_PAYLOAD_BYTES = 65_536

_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(value: Any) -> str:
    """Compact JSON, as JavaScript's JSON.stringify writes it (lone surrogates escaped)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _LONE_SURROGATE.sub(lambda m: "\\u%04x" % ord(m.group()), text)


def pack_frames(messages: list[str], max_bytes: int = MAX_PAYLOAD_BYTES) -> list[str]:
    """Multi-message frames: serialized messages packed into as few text frames as fit
    ``max_bytes`` (UTF-8). One message stays a plain object frame; several become a JSON array.
    A message larger than the bound still goes, alone. The order is kept."""
    frames: list[str] = []
    frame: list[str] = []
    size = 1  # the opening bracket; each message adds its comma or the closing bracket
    for message in messages:
        length = len(message.encode("utf-8", "surrogatepass")) + 1
        if frame and size + length > max_bytes:
            frames.append(_joined(frame))
            frame, size = [], 1
        frame.append(message)
        size += length
    if frame:
        frames.append(_joined(frame))
    return frames


def _joined(messages: list[str]) -> str:
    return messages[0] if len(messages) == 1 else "[" + ",".join(messages) + "]"


class _Pending:
    __slots__ = ("method", "params", "write", "on_result", "on_queued", "event", "result",
                 "error")

    def __init__(self, method: str, params: dict[str, Any], write: bool,
                 on_result: Callable[[Any], None] | None,
                 on_queued: Callable[[int], None] | None = None) -> None:
        self.method = method
        self.params = params
        self.write = write
        self.on_result = on_result
        self.on_queued = on_queued
        self.event = threading.Event()
        self.result: Any = None
        self.error: DlmError | None = None


class Connection:
    """A connection and its reader thread.

    ``on_frame(kind, message)`` is called on the reader thread, in frame order, for every
    server notification (``kind`` "notification"), for a ``lock.queued`` about a request whose
    caller waits and asked for it (``kind`` "queued", ``message`` = (on_queued, position)), and
    for a reply that arrived after its caller stopped waiting (``kind`` "late", ``message`` =
    (method, params, reply)). ``on_down(code)``
    is called once when the connection ends.
    """

    def __init__(self, ws: WebSocket, on_frame: Callable[[str, Any], None],
                 on_down: Callable[[int], None]) -> None:
        self._ws = ws
        self._on_frame = on_frame
        self._on_down = on_down
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._abandoned: dict[int, _Pending] = {}
        self._alive = True
        self.close_code: int | None = None
        # Multi-message frames, once the hello agreed on them: requests that callers on other
        # threads issue while one send is under way leave together in the next frame.
        self._multi = False
        self._max_frame_bytes = MAX_PAYLOAD_BYTES
        self._outbox: list[str] = []
        self._sending = False
        self._reader = threading.Thread(target=self._read, name="dlm-reader", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        return self._alive

    def use_multi_frames(self, max_frame_bytes: int = MAX_PAYLOAD_BYTES) -> None:
        """The hello agreed on multi-message frames: requests ready together go in one frame."""
        self._max_frame_bytes = max_frame_bytes
        self._multi = True

    def call(self, method: str, params: dict[str, Any], timeout: float, *, write: bool = False,
             on_result: Callable[[Any], None] | None = None,
             on_queued: Callable[[int], None] | None = None) -> tuple[Any, float]:
        """Sends a request and waits up to ``timeout`` seconds for its reply.

        Returns ``(result, sent_at)``, ``sent_at`` on ``time.monotonic()``. Raises the server's
        error as DlmError, or UNAVAILABLE (``indeterminate`` for writes that were sent) when
        there is no reply. ``on_result`` runs on the reader thread as the result arrives, before
        any later frame is handled.
        """
        pending = _Pending(method, params, write, on_result, on_queued)
        with self._lock:
            if not self._alive:
                raise DlmError("UNAVAILABLE", "the connection is closed")
            request_id = next(self._ids)
            self._pending[request_id] = pending
        frame = dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        sent_at = time.monotonic()
        try:
            self._send(frame)
        except (OSError, WebSocketError) as error:
            with self._lock:
                self._pending.pop(request_id, None)
            self._ws.abort()
            raise DlmError("UNAVAILABLE", f"could not send {method}: {error}",
                           {"indeterminate": True} if write else {}) from error
        if not pending.event.wait(timeout):
            with self._lock:
                if self._pending.pop(request_id, None) is not None:
                    self._abandoned[request_id] = pending
            if not pending.event.is_set():
                raise DlmError("UNAVAILABLE", f"no reply to {method} within {timeout:g} s",
                               {"indeterminate": True} if write else {})
        if pending.error is not None:
            raise pending.error
        return pending.result, sent_at

    def _send(self, frame: str) -> None:
        """Sends one request frame; with multi-message frames, together with the requests
        other threads queued while a send was under way (the thread that finds no send under
        way sends everything queued, until nothing is)."""
        if not self._multi:
            self._ws.send_text(frame)
            return
        with self._lock:
            self._outbox.append(frame)
            if self._sending:
                return
            self._sending = True
        try:
            while True:
                with self._lock:
                    queued, self._outbox = self._outbox, []
                    if not queued:
                        self._sending = False
                        return
                for text in pack_frames(queued, self._max_frame_bytes):
                    self._ws.send_text(text)
        except BaseException:
            with self._lock:
                self._sending = False
                self._outbox = []
            raise

    def close(self) -> None:
        """Closes the connection; pending requests fail with UNAVAILABLE."""
        self._ws.close(1000)
        # The reader ends when the server answers the close; do not wait on a silent peer.
        threading.Timer(2.0, self._ws.abort).start()

    def abort(self) -> None:
        self._ws.abort()

    def _read(self) -> None:
        code = 1006
        try:
            while True:
                message = self._ws.recv()
                if message.opcode != OP_TEXT:
                    continue
                try:
                    frame = json.loads(message.data)
                except ValueError:
                    continue
                if isinstance(frame, dict):
                    self._dispatch(frame)
                elif isinstance(frame, list):  # a multi-message frame
                    for item in frame:
                        if isinstance(item, dict):
                            self._dispatch(item)
        except ConnectionClosed as closed:
            code = closed.code
        except Exception:  # noqa: BLE001 - any failure ends this connection, never the process
            self._ws.abort()
        finally:
            self._down(code)

    def _dispatch(self, frame: dict[str, Any]) -> None:
        if "id" not in frame:
            if frame.get("method") == "lock.queued":
                self._queued(frame.get("params") or {})
            elif isinstance(frame.get("method"), str):
                self._on_frame("notification", frame)
            return
        request_id = frame.get("id")
        with self._lock:
            pending = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
            late = None
            if pending is None and isinstance(request_id, int):
                late = self._abandoned.pop(request_id, None)
        if late is not None:
            self._on_frame("late", (late.method, late.params, frame))
            return
        if pending is None:
            return
        if isinstance(frame.get("error"), dict):
            pending.error = from_rpc_error(frame["error"])
        else:
            pending.result = frame.get("result")
            if pending.on_result is not None:
                try:
                    pending.on_result(pending.result)
                except Exception:  # noqa: BLE001 - a hook's failure must not kill the reader
                    pass
        pending.event.set()

    def _queued(self, params: dict[str, Any]) -> None:
        # About one request in flight: to its caller (if it asked), not to the client's listeners.
        request_id, position = params.get("requestId"), params.get("position")
        with self._lock:
            pending = self._pending.get(request_id) if isinstance(request_id, int) else None
        if pending is not None and pending.on_queued is not None and isinstance(position, int):
            self._on_frame("queued", (pending.on_queued, position))

    def _down(self, code: int) -> None:
        with self._lock:
            self._alive = False
            self.close_code = code
            pending = list(self._pending.values())
            self._pending.clear()
            self._abandoned.clear()
        for item in pending:
            item.error = DlmError(
                "UNAVAILABLE",
                f"the connection closed ({code}) before the reply to {item.method}",
                {"indeterminate": True} if item.write else {},
            )
            item.event.set()
        self._on_down(code)
