"""Shared test setup: the package on sys.path, the server under test, the transcripts."""

from __future__ import annotations

import os
import sys
import unittest
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dlm import Client  # noqa: E402 - importable once ROOT is on sys.path

#: The server the tests run against, e.g. ws://127.0.0.1:7070/v1/ws (set by the repo's test).
DLM_URL = os.environ.get("DLM_URL", "")
#: The golden transcripts (override with DLM_TRANSCRIPTS).
TRANSCRIPTS = Path(os.environ.get("DLM_TRANSCRIPTS")
                   or ROOT.parents[1] / "packages" / "protocol" / "transcripts")

requires_server = unittest.skipUnless(DLM_URL, "set DLM_URL to a running dlm server")


def unique(prefix: str = "py") -> str:
    """A lock name no other test uses."""
    return f"{prefix}/{uuid.uuid4().hex[:12]}"


class TwoClientsTestCase(unittest.TestCase):
    """A test case with two clients of the server under test, ``client`` and ``other``, made for
    each test and closed after it. ``client_name`` names them on the server (``other`` with a
    ``-2``), so a server log tells the suites apart."""

    client_name = "dlm-python-tests"

    def setUp(self) -> None:
        self.client = Client(DLM_URL, name=self.client_name)
        self.other = Client(DLM_URL, name=f"{self.client_name}-2")

    def tearDown(self) -> None:
        self.client.close()
        self.other.close()
