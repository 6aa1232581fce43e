"""A minimal RFC 6455 WebSocket client: enough for dlm, standard library only.

It does the opening handshake (with a subprotocol), masks what it sends, answers pings,
reassembles fragmented messages, and runs the closing handshake. It does no extensions
(no permessage-deflate): dlm servers do not use them.

One thread may call :meth:`WebSocket.recv` while others send: sending is serialized by a lock.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

__all__ = [
    "OP_BINARY",
    "OP_TEXT",
    "ConnectionClosed",
    "HandshakeError",
    "WebSocket",
    "WebSocketError",
]

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

#: Close codes that must not appear in a close frame on the wire.
_RESERVED_CLOSE_CODES = {1005, 1006, 1015}


class WebSocketError(Exception):
    """The peer broke the protocol, or the connection failed."""


class HandshakeError(WebSocketError):
    """The server refused the upgrade (``status`` is its HTTP status, 0 if it sent none)."""

    def __init__(self, message: str, status: int = 0, body: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class ConnectionClosed(WebSocketError):
    """The connection is closed: ``code`` from the close frame (1005: none, 1006: no frame)."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"connection closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason


@dataclass(frozen=True)
class Message:
    """One whole message: ``opcode`` is OP_TEXT (``data`` is str) or OP_BINARY (bytes)."""

    opcode: int
    data: str | bytes


def _mask(key: bytes, payload: bytes) -> bytes:
    if not payload:
        return payload
    n = len(payload)
    repeated = (key * (n // 4 + 1))[:n]
    # One big-integer XOR is much faster in CPython than a per-byte loop.
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(n, "big")


def _accept_key(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + _GUID).encode("ascii")).digest()).decode("ascii")


class WebSocket:
    """A client connection. Create one with :meth:`connect`."""

    def __init__(self, sock: socket.socket, protocol: str | None, buffered: bytes,
                 max_message_bytes: int) -> None:
        self._sock = sock
        #: The subprotocol the server selected, or None.
        self.protocol = protocol
        self._buffer = bytearray(buffered)
        self._send_lock = threading.Lock()
        self._max_message_bytes = max_message_bytes
        self._close_sent = False
        self._closed: ConnectionClosed | None = None

    # ------------------------------------------------------------------ opening handshake

    @classmethod
    def connect(
        cls,
        url: str,
        protocols: list[str] | tuple[str, ...] | None = ("dlm.v1.json",),
        *,
        timeout: float = 10.0,
        headers: dict[str, str] | None = None,
        max_message_bytes: int = 16 * 1024 * 1024,
        ssl_context: ssl.SSLContext | None = None,
    ) -> WebSocket:
        """Opens a connection to a ``ws://`` or ``wss://`` URL, offering ``protocols``.

        Raises :class:`HandshakeError` when the server answers anything but 101, and
        ``OSError`` when it cannot be reached.
        """
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss"):
            raise ValueError(f"not a ws:// or wss:// URL: {url}")
        secure = parts.scheme == "wss"
        host = parts.hostname or "localhost"
        port = parts.port or (443 if secure else 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")

        sock = socket.create_connection((host, port), timeout=timeout)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if secure:
                context = ssl_context or ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=host)
            key = base64.b64encode(os.urandom(16)).decode("ascii")
            host_header = host if ":" not in host else f"[{host}]"
            default_port = 443 if secure else 80
            if parts.port and parts.port != default_port:
                host_header += f":{parts.port}"
            lines = [
                f"GET {path} HTTP/1.1",
                f"Host: {host_header}",
                "Upgrade: websocket",
                "Connection: Upgrade",
                f"Sec-WebSocket-Key: {key}",
                "Sec-WebSocket-Version: 13",
            ]
            if protocols:
                lines.append(f"Sec-WebSocket-Protocol: {', '.join(protocols)}")
            for name, value in (headers or {}).items():
                lines.append(f"{name}: {value}")
            sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

            response = bytearray()
            while b"\r\n\r\n" not in response:
                chunk = sock.recv(4096)
                if not chunk:
                    raise HandshakeError("the server closed the connection during the handshake")
                response += chunk
                if len(response) > 65536:
                    raise HandshakeError("the handshake response is too large")
            head, _, rest = bytes(response).partition(b"\r\n\r\n")
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            fields = status_line.split(" ", 2)
            status = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else 0
            received: dict[str, str] = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                received[name.strip().lower()] = value.strip()
            if status != 101:
                body = rest
                length = int(received.get("content-length", "0") or 0)
                try:
                    while len(body) < length:
                        chunk = sock.recv(4096)
                        if not chunk:
                            break
                        body += chunk
                except OSError:
                    pass
                text = body.decode("utf-8", "replace")
                raise HandshakeError(f"the server refused the upgrade: HTTP {status} {text}".strip(),
                                     status, text)
            if received.get("upgrade", "").lower() != "websocket":
                raise HandshakeError("the server did not upgrade to websocket", status)
            if received.get("sec-websocket-accept") != _accept_key(key):
                raise HandshakeError("wrong Sec-WebSocket-Accept", status)
            if received.get("sec-websocket-extensions"):
                raise HandshakeError("the server chose an extension that was not offered", status)
            protocol = received.get("sec-websocket-protocol") or None
            if protocol is not None and protocol not in (protocols or ()):
                raise HandshakeError(f"the server chose subprotocol {protocol!r}, not offered",
                                     status)
            sock.settimeout(None)
            return cls(sock, protocol, rest, max_message_bytes)
        except BaseException:
            sock.close()
            raise

    # ------------------------------------------------------------------ sending

    def _send_frame(self, opcode: int, payload: bytes, fin: bool = True) -> None:
        header = bytearray([(0x80 if fin else 0) | opcode])
        n = len(payload)
        if n < 126:
            header.append(0x80 | n)
        elif n < 65536:
            header.append(0x80 | 126)
            header += struct.pack("!H", n)
        else:
            header.append(0x80 | 127)
            header += struct.pack("!Q", n)
        key = os.urandom(4)
        frame = bytes(header) + key + _mask(key, payload)
        with self._send_lock:
            if self._close_sent and opcode != OP_CLOSE:
                raise ConnectionClosed(self._closed.code if self._closed else 1006,
                                       "the closing handshake has started")
            self._sock.sendall(frame)

    def send_text(self, text: str) -> None:
        """Sends one text message (UTF-8)."""
        self._send_frame(OP_TEXT, text.encode("utf-8"))

    def send_binary(self, data: bytes) -> None:
        """Sends one binary message."""
        self._send_frame(OP_BINARY, bytes(data))

    def ping(self, data: bytes = b"") -> None:
        self._send_frame(OP_PING, data)

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Starts the closing handshake. The reader's :meth:`recv` raises ConnectionClosed
        when the server answers; :meth:`abort` drops the connection without waiting."""
        payload = b"" if code in _RESERVED_CLOSE_CODES else struct.pack("!H", code) + reason.encode()
        with self._send_lock:
            if self._close_sent:
                return
            self._close_sent = True
        try:
            self._send_frame(OP_CLOSE, payload[:125])
        except OSError:
            self.abort()

    def abort(self) -> None:
        """Drops the TCP connection at once; a blocked :meth:`recv` raises ConnectionClosed."""
        self._close_sent = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass

    # ------------------------------------------------------------------ receiving

    def _read_exact(self, n: int) -> bytes:
        while len(self._buffer) < n:
            try:
                chunk = self._sock.recv(max(65536, n - len(self._buffer)))
            except OSError:
                chunk = b""
            if not chunk:
                self.abort()
                raise self._set_closed(ConnectionClosed(1006, "the connection dropped"))
            self._buffer += chunk
        data = bytes(self._buffer[:n])
        del self._buffer[:n]
        return data

    def _set_closed(self, closed: ConnectionClosed) -> ConnectionClosed:
        if self._closed is None:
            self._closed = closed
        return self._closed

    def _fail(self, code: int, why: str) -> ConnectionClosed:
        try:
            self.close(code, why[:100])
        finally:
            self.abort()
        return self._set_closed(ConnectionClosed(code, why))

    def _read_frame(self) -> tuple[bool, int, bytes]:
        first, second = self._read_exact(2)
        fin = bool(first & 0x80)
        if first & 0x70:
            raise self._fail(1002, "reserved bits set without an extension")
        opcode = first & 0x0F
        if second & 0x80:
            raise self._fail(1002, "the server masked a frame")
        n = second & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._read_exact(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._read_exact(8))
        if opcode >= 0x8 and (n > 125 or not fin):
            raise self._fail(1002, "a control frame that is too long or fragmented")
        if n > self._max_message_bytes:
            raise self._fail(1009, "message too big")
        return fin, opcode, self._read_exact(n)

    def recv(self) -> Message:
        """Returns the next whole message, answering pings on the way.

        Raises :class:`ConnectionClosed` once the connection is closed (after the closing
        handshake, or when it dropped), on this and every later call.
        """
        if self._closed is not None:
            raise self._closed
        opcode: int | None = None
        parts: list[bytes] = []
        size = 0
        while True:
            fin, op, payload = self._read_frame()
            if op == OP_PING:
                try:
                    self._send_frame(OP_PONG, payload)
                except (OSError, ConnectionClosed):
                    pass
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                code, reason = 1005, ""
                if len(payload) >= 2:
                    (code,) = struct.unpack("!H", payload[:2])
                    reason = payload[2:].decode("utf-8", "replace")
                if not self._close_sent:
                    # Echo the close, as RFC 6455 section 5.5.1 asks.
                    self.close(code if code not in _RESERVED_CLOSE_CODES else 1000)
                self.abort()
                raise self._set_closed(ConnectionClosed(code, reason))
            if op == OP_CONTINUATION:
                if opcode is None:
                    raise self._fail(1002, "a continuation frame without a message")
            elif op in (OP_TEXT, OP_BINARY):
                if opcode is not None:
                    raise self._fail(1002, "a new message inside a fragmented one")
                opcode = op
            else:
                raise self._fail(1002, f"unknown opcode {op}")
            parts.append(payload)
            size += len(payload)
            if size > self._max_message_bytes:
                raise self._fail(1009, "message too big")
            if fin:
                data = b"".join(parts)
                if opcode == OP_TEXT:
                    try:
                        return Message(OP_TEXT, data.decode("utf-8"))
                    except UnicodeDecodeError:
                        raise self._fail(1007, "a text message that is not UTF-8") from None
                return Message(OP_BINARY, data)
