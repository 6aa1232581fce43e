"""dlm's errors: one exception class with a stable string ``code``, as in every dlm client."""

from __future__ import annotations

from typing import Any

__all__ = ["ERROR_CODES", "DlmError", "from_rpc_error"]

#: Every error code: its JSON-RPC number on the wire and whether retrying can help.
ERROR_CODES: dict[str, tuple[int, bool]] = {
    "PARSE_ERROR": (-32700, False),
    "INVALID_REQUEST": (-32600, False),
    "METHOD_NOT_FOUND": (-32601, False),
    "INVALID_PARAMS": (-32602, False),
    "INTERNAL": (-32603, False),
    "LOCK_HELD": (1001, True),
    "NOT_HOLDER": (1002, False),
    "UNAVAILABLE": (1003, True),
    "UNAUTHENTICATED": (1004, False),
    "FORBIDDEN": (1005, False),
    "LIMIT_EXCEEDED": (1006, True),
    "CANCELLED": (1007, False),
    "HELLO_REQUIRED": (1008, False),
}


class DlmError(Exception):
    """A failure dlm reports. Match on ``code`` (``LOCK_HELD``, ``NOT_HOLDER``, ...).

    ``retryable`` says whether the same request may succeed later. ``data`` holds the
    extra facts the server sent, under their wire names: ``field`` (INVALID_PARAMS),
    ``ttlRemainingMs`` (LOCK_HELD), ``indeterminate`` (UNAVAILABLE: the write may or may
    not have happened).
    """

    def __init__(self, code: str, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.retryable = ERROR_CODES.get(code, (0, False))[1]
        self.data: dict[str, Any] = dict(data or {})

    @property
    def rpc_code(self) -> int:
        """The JSON-RPC error number of ``code``."""
        return ERROR_CODES.get(self.code, (-32603, False))[0]

    def __repr__(self) -> str:
        return f"DlmError({self.code!r}, {self.message!r}, {self.data!r})"


def from_rpc_error(error: dict[str, Any]) -> DlmError:
    """The DlmError for a JSON-RPC error object received from a server."""
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    code = data.get("code")
    if code not in ERROR_CODES:
        number = error.get("code")
        code = next((name for name, (rpc, _) in ERROR_CODES.items() if rpc == number), "INTERNAL")
    extra = {key: value for key, value in data.items() if key not in ("code", "retryable")}
    return DlmError(code, str(error.get("message", "")), extra)
