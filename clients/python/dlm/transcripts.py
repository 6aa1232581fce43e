"""A runner for dlm's golden transcripts (``packages/protocol/transcripts/*.json``).

It replays a transcript against a live server over this package's WebSocket client, with the
same semantics as the TypeScript runner (``@dlm/transcripts``); the format is
described in ``packages/protocol/transcripts/README.md``. Unlike the TypeScript runner it does
not check frames against the JSON Schemas (the standard library has no validator): it checks
the transcripts' patterns only.

    from dlm.transcripts import load_transcripts, run_transcript

    for transcript in load_transcripts("packages/protocol/transcripts"):
        run_transcript("ws://127.0.0.1:7070/v1/ws", transcript)
"""

from __future__ import annotations

import json
import os
import random
import re
import string
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .connection import dumps
from .websocket import OP_TEXT, ConnectionClosed, HandshakeError, WebSocket, WebSocketError

__all__ = [
    "TranscriptFailure",
    "TranscriptFormatError",
    "load_transcripts",
    "match_pattern",
    "run_transcript",
]

DEFAULT_TIMEOUT_MS = 5000
#: Timer granularity: a frame may be timestamped up to this much before a nominal deadline.
TIMING_SLACK_MS = 1
_PLACEHOLDER_KEYS = {"$capture", "$ref", "$any", "$gt", "$between", "$optional"}
_TOKEN = re.compile(r"[1-9][0-9]{0,18}")
_MAX_TOKEN = 2**63 - 1
_ACTIONS = ("connect", "send", "sendText", "sendBinary", "expect", "expectNone", "expectClose",
            "close", "sleep", "mark")


class TranscriptFormatError(Exception):
    """A mistake in a transcript itself (as opposed to a server that does not match it)."""


class TranscriptFailure(AssertionError):
    """The server did not behave as the transcript says."""

    def __init__(self, transcript: str, step_index: int, message: str) -> None:
        where = "end" if step_index < 0 else str(step_index)
        super().__init__(f"{transcript}, step {where}: {message}")
        self.transcript = transcript
        self.step_index = step_index


def load_transcripts(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every ``*.json`` transcript in ``directory``, sorted by file name."""
    out = []
    for path in sorted(Path(directory).glob("*.json")):
        if path.name.endswith(".schema.json"):
            continue
        transcript = json.loads(path.read_text(encoding="utf-8"))
        for key in ("name", "description", "covers", "steps"):
            if key not in transcript:
                raise TranscriptFormatError(f"{path.name}: missing {key}")
        out.append(transcript)
    return out


# ---------------------------------------------------------------------- matching

def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def _is_placeholder(value: Any) -> bool:
    if not isinstance(value, dict) or not value:
        return False
    if not all(key.startswith("$") for key in value):
        return False
    unknown = set(value) - _PLACEHOLDER_KEYS
    if unknown:
        raise TranscriptFormatError(f"unknown placeholder key {sorted(unknown)[0]}")
    return True


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_token(value: Any) -> bool:
    return isinstance(value, str) and _TOKEN.fullmatch(value) is not None and int(value) <= _MAX_TOKEN


def _has_type(value: Any, kind: str) -> bool:
    checks = {
        "string": lambda v: isinstance(v, str),
        "number": _is_number,
        "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
        or (isinstance(v, float) and v.is_integer()),
        "boolean": lambda v: isinstance(v, bool),
        "null": lambda v: v is None,
        "object": _is_object,
        "array": lambda v: isinstance(v, list),
        "token": _is_token,
        "value": lambda v: True,
    }
    if kind not in checks:
        raise TranscriptFormatError(f"unknown $any type {kind!r}")
    return checks[kind](value)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values (true is not 1; 1 is 1.0)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _is_number(a) or _is_number(b):
        return _is_number(a) and _is_number(b) and a == b
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(json_equal, a, b))
    if isinstance(a, dict):
        return (isinstance(b, dict) and a.keys() == b.keys()
                and all(json_equal(a[k], b[k]) for k in a))
    return type(a) is type(b) and a == b


def _big(value: Any) -> int | None:
    if isinstance(value, str) and re.fullmatch(r"0|[1-9][0-9]*", value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return None


def _bound(bindings: dict[str, Any], name: Any) -> Any:
    if not isinstance(name, str) or name not in bindings:
        raise TranscriptFormatError(f"{name!r} is not bound (capture it first)")
    return bindings[name]


def _show(value: Any, limit: int = 120) -> str:
    text = dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


_MISSING = object()


def _match(pattern: Any, actual: Any, bindings: dict[str, Any], run: str, path: str) -> str | None:
    at = path or "/"
    if _is_placeholder(pattern):
        if actual is _MISSING:
            return f"{at}: missing"
        if "$ref" in pattern and not json_equal(actual, _bound(bindings, pattern["$ref"])):
            return f"{at}: {_show(actual)} is not {pattern['$ref']}"
        if "$any" in pattern and not _has_type(actual, pattern["$any"]):
            return f"{at}: {_show(actual)} is not a {pattern['$any']}"
        if "$gt" in pattern:
            than = _big(_bound(bindings, pattern["$gt"]))
            if than is None:
                raise TranscriptFormatError(f"{pattern['$gt']} is not an integer")
            value = _big(actual)
            if value is None or value <= than:
                return f"{at}: {_show(actual)} is not greater than {pattern['$gt']} ({than})"
        if "$between" in pattern:
            bounds = pattern["$between"]
            if not (isinstance(bounds, list) and len(bounds) == 2 and all(map(_is_number, bounds))):
                raise TranscriptFormatError("$between needs [min, max]")
            if not _is_number(actual) or not bounds[0] <= actual <= bounds[1]:
                return f"{at}: {_show(actual)} is not in [{bounds[0]}, {bounds[1]}]"
        if "$capture" in pattern:
            if not isinstance(pattern["$capture"], str):
                raise TranscriptFormatError("$capture needs a name")
            bindings[pattern["$capture"]] = actual
        return None
    if actual is _MISSING:
        return f"{at}: missing"
    if isinstance(pattern, list):
        if not isinstance(actual, list) or len(actual) != len(pattern):
            return f"{at}: expected an array of {len(pattern)}, got {_show(actual)}"
        for i, (p, a) in enumerate(zip(pattern, actual)):
            why = _match(p, a, bindings, run, f"{path}/{i}")
            if why:
                return why
        return None
    if isinstance(pattern, dict):
        if not isinstance(actual, dict):
            return f"{at}: expected an object, got {_show(actual)}"
        for key, item in pattern.items():
            if key not in actual:
                if _is_placeholder(item) and item.get("$optional") is True:
                    continue
                return f"{path}/{key}: missing"
            why = _match(item, actual[key], bindings, run, f"{path}/{key}")
            if why:
                return why
        for key in actual:
            if key not in pattern:
                return f"{path}/{key}: unexpected member"
        return None
    expected = pattern.replace("{{run}}", run) if isinstance(pattern, str) else pattern
    if json_equal(expected, actual):
        return None
    return f"{at}: expected {_show(expected)}, got {_show(actual)}"


def match_pattern(pattern: Any, actual: Any, bindings: dict[str, Any],
                  run: str) -> tuple[dict[str, Any] | None, str | None]:
    """``(new_bindings, None)`` when ``actual`` matches, else ``(None, why)``. The input
    bindings are left alone, so a failed match binds nothing."""
    trial = dict(bindings)
    why = _match(pattern, actual, trial, run, "")
    return (trial, None) if why is None else (None, why)


def substitute(value: Any, bindings: dict[str, Any], run: str) -> Any:
    """A sent value with ``{"$ref": name}`` replaced by the bound value and ``{{run}}`` by the
    run id."""
    if isinstance(value, str):
        return value.replace("{{run}}", run)
    if isinstance(value, list):
        return [substitute(item, bindings, run) for item in value]
    if _is_placeholder(value):
        if set(value) != {"$ref"}:
            raise TranscriptFormatError('only {"$ref": ...} may appear in a sent frame')
        return _bound(bindings, value["$ref"])
    if isinstance(value, dict):
        return {key: substitute(item, bindings, run) for key, item in value.items()}
    return value


# ---------------------------------------------------------------------- connections

@dataclass
class _Received:
    frame: Any
    at: float
    consumed: bool = False


@dataclass
class _Conn:
    name: str
    ws: WebSocket | None = None
    received: list[_Received] = field(default_factory=list)
    closed: tuple[int, float] | None = None
    problems: list[str] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)
    reader: threading.Thread | None = None

    #: The connection speaks multi-message frames (the ``connect`` step's ``multi``): an
    #: array frame counts as its messages. Without it an array frame is a problem.
    multi: bool = False

    def read(self, ws: WebSocket) -> None:
        code = 1006
        try:
            while True:
                message = ws.recv()
                at = time.monotonic() * 1000
                with self.cond:
                    if message.opcode != OP_TEXT:
                        self.problems.append("the server sent a binary frame")
                    else:
                        try:
                            frame = json.loads(message.data)
                        except ValueError:
                            self.problems.append(f"the server sent a frame that is not JSON: "
                                                 f"{message.data[:200]}")
                        else:
                            for item in self._messages(frame):
                                if not isinstance(item, dict) or item.get("jsonrpc") != "2.0":
                                    self.problems.append(
                                        f"not a JSON-RPC 2.0 frame: {_show(item)}")
                                self.received.append(_Received(item, at))
                    self.cond.notify_all()
        except ConnectionClosed as closed:
            code = closed.code
        except (OSError, WebSocketError):
            pass
        with self.cond:
            self.closed = (code, time.monotonic() * 1000)
            self.cond.notify_all()

    def _messages(self, frame: Any) -> list[Any]:
        """A frame's messages: itself, or on a multi-message connection an array's members."""
        if not isinstance(frame, list):
            return [frame]
        if not self.multi:
            self.problems.append("the server sent an array frame on a connection that did not "
                                 f"ask for multi-message frames: {_show(frame)}")
            return []
        if not frame:
            self.problems.append("the server sent an empty array frame")
        return frame

    def unconsumed(self) -> list[_Received]:
        return [item for item in self.received if not item.consumed]


def _random_run_id() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(random.SystemRandom().choice(alphabet) for _ in range(12))


def run_transcript(url: str, transcript: dict[str, Any], *, run: str | None = None,
                   default_timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
    """Replays ``transcript`` against the server at ``url`` (``ws://host:port/v1/ws``).

    Raises TranscriptFailure saying which step went wrong and what arrived instead. Every
    connection the transcript opened is closed when it ends, whatever the outcome.
    """
    name = transcript["name"]
    run = run or _random_run_id()
    conns: dict[str, _Conn] = {}
    marks: dict[str, float] = {}
    bindings: dict[str, Any] = {}
    index = 0

    def fail(message: str) -> None:
        raise TranscriptFailure(name, index, message)

    def conn_of(step: dict[str, Any]) -> _Conn:
        key = step.get("conn", "a")
        if key not in conns:
            conns[key] = _Conn(key)
        return conns[key]

    def open_ws(conn: _Conn) -> WebSocket:
        if conn.ws is None or conn.closed is not None:
            fail(f"connection {conn.name} is not open")
        assert conn.ws is not None
        return conn.ws

    def now() -> float:
        return time.monotonic() * 1000

    def check_problems(conn: _Conn) -> None:
        if conn.problems:
            fail("; ".join(conn.problems))

    def check_elapsed(elapsed: dict[str, Any] | None, at: float, what: str) -> None:
        if not elapsed:
            return
        since = elapsed["since"]
        if since not in marks:
            raise TranscriptFormatError(f"no mark {since}")
        ms = at - marks[since]
        if "min" in elapsed and ms + TIMING_SLACK_MS < elapsed["min"]:
            fail(f"{what} arrived {ms:.1f} ms after {since}, before {elapsed['min']}")
        if "max" in elapsed and ms > elapsed["max"]:
            fail(f"{what} arrived {ms:.1f} ms after {since}, after {elapsed['max']}")

    def connect(conn: _Conn, spec: dict[str, Any]) -> None:
        if conn.ws is not None and conn.closed is None:
            fail(f"connection {conn.name} is already open")
        left = conn.unconsumed()
        if left:
            fail(f"connection {conn.name} is reopened with frames no step expected: "
                 f"{_show(left[0].frame)}")
        parts = urlsplit(url)
        target = urlunsplit((parts.scheme, parts.netloc, spec.get("path", parts.path),
                             parts.query, ""))
        protocols = spec.get("protocols", ["dlm.v1.json"])
        expect_status = spec.get("expectStatus")
        try:
            ws = WebSocket.connect(target, protocols or None, timeout=default_timeout_ms / 1000)
        except HandshakeError as error:
            if expect_status is None:
                fail(f"the upgrade was refused with HTTP {error.status}")
            if error.status != expect_status:
                fail(f"the upgrade was refused with HTTP {error.status}, not {expect_status}")
            return
        except OSError as error:
            fail(f"could not connect: {error}")
            return
        if expect_status is not None:
            ws.abort()
            fail(f"the upgrade succeeded; expected HTTP {expect_status}")
        if "expectProtocol" in spec and ws.protocol != spec["expectProtocol"]:
            ws.abort()
            fail(f"the server picked subprotocol {ws.protocol!r}, not {spec['expectProtocol']!r}")
        conn.ws = ws
        conn.closed = None
        conn.received = []
        conn.multi = spec.get("multi") is True
        conn.reader = threading.Thread(target=conn.read, args=(ws,), daemon=True,
                                       name=f"transcript-{conn.name}")
        conn.reader.start()

    def send(conn: _Conn, data: str | bytes, times: int, mark: str | None) -> None:
        ws = open_ws(conn)
        if mark is not None:
            marks[mark] = now()
        for _ in range(times):
            try:
                if isinstance(data, bytes):
                    ws.send_binary(data)
                else:
                    ws.send_text(data)
            except (OSError, WebSocketError) as error:
                fail(f"could not send on {conn.name}: {error}")

    def expect_frames(conn: _Conn, step: dict[str, Any]) -> None:
        nonlocal bindings
        timeout = step.get("timeoutMs", default_timeout_ms)
        deadline = now() + timeout
        times = step.get("times", 1)
        for n in range(times):
            found: _Received | None = None
            with conn.cond:
                while True:
                    for item in conn.unconsumed():
                        matched, _ = match_pattern(step["expect"], item.frame, bindings, run)
                        if matched is not None:
                            bindings = matched
                            found = item
                            break
                    if found is not None or conn.problems:
                        break
                    left = deadline - now()
                    if left <= 0:
                        break
                    conn.cond.wait(left / 1000)
                check_problems(conn)
                if found is None:
                    pending = "".join(
                        f"\n  {_show(item.frame, 300)} "
                        f"({match_pattern(step['expect'], item.frame, bindings, run)[1]})"
                        for item in conn.unconsumed()[:5])
                    closed = (f" The connection closed with {conn.closed[0]}."
                              if conn.closed else "")
                    fail(f"{n} of {times} frames matching {_show(step['expect'], 300)} arrived in "
                         f"{timeout} ms.{closed} Unconsumed frames:{pending or ' none'}")
                assert found is not None
                found.consumed = True
            check_elapsed(step.get("elapsed"), found.at, f"the frame {_show(found.frame)}")

    def wait_closed(conn: _Conn, timeout_ms: float) -> bool:
        deadline = now() + timeout_ms
        with conn.cond:
            while conn.closed is None:
                left = deadline - now()
                if left <= 0:
                    return False
                conn.cond.wait(left / 1000)
        return True

    def perform(step: dict[str, Any]) -> None:
        # `mark` is also an option of the send steps: the first action in _ACTIONS order wins.
        action = next((key for key in _ACTIONS if key in step), None)
        if action is None:
            raise TranscriptFormatError(f"a step without an action: {_show(step)}")
        conn = conn_of(step)
        if action == "connect":
            connect(conn, step["connect"])
        elif action == "send":
            text = dumps(substitute(step["send"], bindings, run))
            pad = step.get("padToBytes")
            if pad is not None:
                size = len(text.encode("utf-8"))
                if size > pad:
                    raise TranscriptFormatError(f"the frame is already {size} bytes")
                text += " " * (pad - size)
            send(conn, text, step.get("times", 1), step.get("mark"))
        elif action == "sendText":
            spec = step["sendText"]
            text = spec.replace("{{run}}", run) if isinstance(spec, str) \
                else spec["repeat"] * spec["count"]
            send(conn, text, step.get("times", 1), step.get("mark"))
        elif action == "sendBinary":
            send(conn, bytes.fromhex(step["sendBinary"]), step.get("times", 1), step.get("mark"))
        elif action == "expect":
            expect_frames(conn, step)
        elif action == "expectNone":
            deadline = now() + step["forMs"]
            hit: _Received | None = None
            with conn.cond:
                while True:
                    hit = next((item for item in conn.unconsumed() if match_pattern(
                        step["expectNone"], item.frame, bindings, run)[0] is not None), None)
                    left = deadline - now()
                    if hit is not None or conn.problems or left <= 0:
                        break
                    conn.cond.wait(left / 1000)
            check_problems(conn)
            if hit is not None:
                fail(f"a frame arrived that should not have: {_show(hit.frame)}")
        elif action == "expectClose":
            if conn.ws is None:
                fail(f"connection {conn.name} was never opened")
            if not wait_closed(conn, step.get("timeoutMs", default_timeout_ms)):
                fail(f"the server did not close connection {conn.name}")
            assert conn.closed is not None
            code, at = conn.closed
            expected = step["expectClose"].get("code")
            if expected is not None and code != expected:
                fail(f"the connection closed with code {code}, not {expected}")
            check_elapsed(step.get("elapsed"), at, "the close")
        elif action == "close":
            open_ws(conn).close(step["close"].get("code", 1000))
            if not wait_closed(conn, default_timeout_ms):
                fail(f"connection {conn.name} did not finish closing")
        elif action == "sleep":
            time.sleep(step["sleep"] / 1000)
        else:
            marks[step["mark"]] = now()

    try:
        for index, step in enumerate(transcript["steps"]):  # noqa: B007 - fail() reads index
            perform(step)
            conn = conns.get(step.get("conn", "a"))
            if conn is not None:
                check_problems(conn)
        index = -1
        for conn in conns.values():
            check_problems(conn)
            left = conn.unconsumed()
            if left:
                fail(f"connection {conn.name} received frames no step expected:"
                     + "".join(f"\n  {_show(item.frame, 300)}" for item in left))
    finally:
        for conn in conns.values():
            if conn.ws is not None:
                conn.ws.abort()
