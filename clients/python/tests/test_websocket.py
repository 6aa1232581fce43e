"""The RFC 6455 client: against the live server, and framing details against a scripted peer.

The dlm server never fragments messages or pings, so fragmentation, interleaved control frames
and long length encodings are checked against a small scripted peer on a loopback socket.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading
import unittest

import support  # noqa: F401 - puts the package on sys.path
from support import DLM_URL, requires_server

from dlm.websocket import OP_BINARY, OP_TEXT, ConnectionClosed, HandshakeError, WebSocket

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def server_frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    header = bytearray([(0x80 if fin else 0) | opcode])
    n = len(payload)
    if n < 126:
        header.append(n)
    elif n < 65536:
        header += bytes([126]) + struct.pack("!H", n)
    else:
        header += bytes([127]) + struct.pack("!Q", n)
    return bytes(header) + payload


def read_client_frame(conn: socket.socket) -> tuple[int, bytes, bool]:
    def exact(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = conn.recv(n - len(data))
            if not chunk:
                raise EOFError
            data += chunk
        return data

    first, second = exact(2)
    masked = bool(second & 0x80)
    n = second & 0x7F
    if n == 126:
        (n,) = struct.unpack("!H", exact(2))
    elif n == 127:
        (n,) = struct.unpack("!Q", exact(8))
    key = exact(4) if masked else b""
    data = exact(n)
    if masked:
        data = bytes(b ^ key[i % 4] for i, b in enumerate(data))
    return first & 0x0F, data, masked


class ScriptedPeer:
    """Accepts one connection, completes the handshake, then runs `script(conn)`."""

    def __init__(self, script) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.script = script
        self.error: BaseException | None = None
        self.request = ""
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        try:
            conn, _ = self.listener.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(4096)
                self.request = data.decode()
                key = next(line.split(":", 1)[1].strip() for line in self.request.split("\r\n")
                           if line.lower().startswith("sec-websocket-key:"))
                accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
                conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                              "Connection: Upgrade\r\n"
                              f"Sec-WebSocket-Accept: {accept}\r\n"
                              "Sec-WebSocket-Protocol: dlm.v1.json\r\n\r\n").encode())
                self.script(conn)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error
        finally:
            self.listener.close()

    def join(self) -> None:
        self.thread.join(5)
        if self.error:
            raise self.error


class Framing(unittest.TestCase):
    def test_fragments_pings_long_frames_masking_and_close(self) -> None:
        seen: dict[str, object] = {}

        def script(conn: socket.socket) -> None:
            word = "wörld".encode()
            conn.sendall(server_frame(0x9, b"hi"))
            conn.sendall(server_frame(OP_TEXT, b"hel", fin=False))
            conn.sendall(server_frame(0x9, b"mid"))  # a control frame between fragments
            conn.sendall(server_frame(0x0, b"lo " + word[:2], fin=False))  # splits "ö"
            conn.sendall(server_frame(0x0, word[2:]))
            conn.sendall(server_frame(OP_BINARY, bytes(range(256)) * 300))  # 64-bit length
            seen["pongs"] = [read_client_frame(conn)[:2], read_client_frame(conn)[:2]]
            opcode, data, masked = read_client_frame(conn)
            seen["text"] = (opcode, data.decode(), masked)
            opcode, data, masked = read_client_frame(conn)
            seen["big"] = (opcode, len(data), data[:3], masked)
            conn.sendall(server_frame(0x8, struct.pack("!H", 1000) + b"bye"))
            seen["close"] = read_client_frame(conn)[:2]

        peer = ScriptedPeer(script)
        ws = WebSocket.connect(f"ws://127.0.0.1:{peer.port}/v1/ws")
        self.assertEqual(ws.protocol, "dlm.v1.json")
        first = ws.recv()
        self.assertEqual((first.opcode, first.data), (OP_TEXT, "hello wörld"))
        second = ws.recv()
        self.assertEqual(second.opcode, OP_BINARY)
        self.assertEqual(second.data, bytes(range(256)) * 300)
        ws.send_text("masked ✓")
        ws.send_binary(b"\x01\x02\x03" * 30_000)
        with self.assertRaises(ConnectionClosed) as caught:
            ws.recv()
        self.assertEqual((caught.exception.code, caught.exception.reason), (1000, "bye"))
        peer.join()
        self.assertIn("Sec-WebSocket-Protocol: dlm.v1.json", peer.request)
        self.assertIn("Sec-WebSocket-Version: 13", peer.request)
        self.assertEqual(seen["pongs"], [(0xA, b"hi"), (0xA, b"mid")])
        self.assertEqual(seen["text"], (OP_TEXT, "masked ✓", True))
        self.assertEqual(seen["big"], (OP_BINARY, 90_000, b"\x01\x02\x03", True))
        self.assertEqual(seen["close"], (0x8, struct.pack("!H", 1000)), "the close is echoed")
        with self.assertRaises(ConnectionClosed):
            ws.recv()

    def test_a_masked_server_frame_is_a_protocol_error(self) -> None:
        def script(conn: socket.socket) -> None:
            conn.sendall(bytes([0x81, 0x82]) + b"\x00\x00\x00\x00" + b"hi")
            seen = read_client_frame(conn)
            self.assertEqual(seen[0], 0x8)
            self.assertEqual(struct.unpack("!H", seen[1][:2])[0], 1002)

        peer = ScriptedPeer(script)
        ws = WebSocket.connect(f"ws://127.0.0.1:{peer.port}/")
        with self.assertRaises(ConnectionClosed) as caught:
            ws.recv()
        self.assertEqual(caught.exception.code, 1002)
        peer.join()


@requires_server
class AgainstTheServer(unittest.TestCase):
    def test_hello_over_the_subprotocol(self) -> None:
        ws = WebSocket.connect(DLM_URL)
        self.assertEqual(ws.protocol, "dlm.v1.json")
        ws.send_text(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.hello"}))
        reply = json.loads(ws.recv().data)
        self.assertEqual(reply["result"]["protocol"], "dlm.v1")
        ws.close()
        with self.assertRaises(ConnectionClosed) as caught:
            ws.recv()
        self.assertEqual(caught.exception.code, 1000)

    def test_refusals_carry_the_http_status(self) -> None:
        with self.assertRaises(HandshakeError) as caught:
            WebSocket.connect(DLM_URL, ["chat.v2"])
        self.assertEqual(caught.exception.status, 400)
        with self.assertRaises(HandshakeError) as caught:
            WebSocket.connect(DLM_URL.replace("/v1/ws", "/nope"))
        self.assertEqual(caught.exception.status, 404)

    def test_an_oversize_frame_is_closed_with_1009(self) -> None:
        ws = WebSocket.connect(DLM_URL)
        ws.send_text("x" * 65_537)
        with self.assertRaises(ConnectionClosed) as caught:
            ws.recv()
        self.assertEqual(caught.exception.code, 1009)


if __name__ == "__main__":
    unittest.main()
