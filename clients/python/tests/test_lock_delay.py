"""Lock-delay (``lock_delay_ms``) against the live server at DLM_URL."""

from __future__ import annotations

import time
import unittest

import support  # noqa: F401 - puts the package on sys.path
from support import TwoClientsTestCase, requires_server, unique

from dlm import DlmError


@requires_server
class LockDelayTest(TwoClientsTestCase):
    client_name = "dlm-python-lock-delay"

    def test_an_expired_lease_holds_its_name_back_for_its_lock_delay(self) -> None:
        name = unique("delay")
        first = self.client.acquire(name, 300, lock_delay_ms=1500)
        ended_at = time.monotonic() + 0.3
        time.sleep(0.5)
        with self.assertRaises(DlmError) as refused:
            self.other.acquire(name, 5000)
        self.assertEqual(refused.exception.code, "LOCK_HELD")
        self.assertGreater(refused.exception.data["lockDelayRemainingMs"], 0)
        self.assertIsNone(self.other.try_acquire(name, 5000))
        info = self.other.get(name)
        self.assertFalse(info.held)
        self.assertGreater(info.lock_delay_remaining_ms or 0, 0)
        second = self.other.acquire(name, 5000, wait_ms=5000)
        self.assertGreaterEqual(time.monotonic() - ended_at, 1.45)
        self.assertGreater(second.token, first.token)
        second.release()

    def test_a_release_ends_the_lease_with_no_delay(self) -> None:
        name = unique("delay-release")
        lease = self.client.acquire(name, 5000, lock_delay_ms=1500)
        lease.release()
        self.other.acquire(name, 5000).release()

    def test_a_bad_lock_delay_is_refused_naming_the_field(self) -> None:
        for bad in (-1, 1.5, True):
            with self.assertRaises(DlmError) as refused:
                self.client.acquire(unique("delay-bad"), 5000, lock_delay_ms=bad)  # type: ignore[arg-type]
            self.assertEqual(refused.exception.data["field"], "lockDelayMs")
        with self.assertRaises(DlmError) as over:
            self.client.acquire(unique("delay-over"), 5000, lock_delay_ms=60_001)
        self.assertEqual((over.exception.code, over.exception.data["field"]),
                         ("INVALID_PARAMS", "lockDelayMs"))


if __name__ == "__main__":
    unittest.main()
