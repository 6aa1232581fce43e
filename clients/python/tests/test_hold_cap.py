"""A cap on holding (``max_hold_ms``) against the live server at DLM_URL."""

from __future__ import annotations

import time
import unittest

import support  # noqa: F401 - puts the package on sys.path
from support import TwoClientsTestCase, requires_server, unique

from dlm import DlmError


@requires_server
class HoldCapTest(TwoClientsTestCase):
    client_name = "dlm-python-hold-cap"

    def test_an_extend_past_the_cap_is_granted_up_to_it_and_the_lease_ends_there(self) -> None:
        name = unique("hold-cap")
        started = time.monotonic()
        lease = self.client.acquire(name, 500, max_hold_ms=1500)
        lease.extend(10_000)
        self.assertLessEqual(lease.ttl_ms, 1500)
        self.assertTrue(lease.lost.wait(3))
        self.assertEqual(lease.lost_reason, "maxHold")
        self.assertGreaterEqual(time.monotonic() - started, 1.3)
        second = self.other.acquire(name, 5000, wait_ms=3000)
        self.assertGreater(second.token, lease.token)
        second.release()

    def test_a_bad_max_hold_is_refused_naming_the_field(self) -> None:
        for bad in (4999, 1.5, True):
            with self.assertRaises(DlmError) as refused:
                self.client.acquire(unique("hold-bad"), 5000, max_hold_ms=bad)  # type: ignore[arg-type]
            self.assertEqual((refused.exception.code, refused.exception.data["field"]),
                             ("INVALID_PARAMS", "maxHoldMs"))
        with self.assertRaises(DlmError) as over:
            self.client.acquire(unique("hold-over"), 5000, max_hold_ms=604_800_001)
        self.assertEqual(over.exception.data["field"], "maxHoldMs")


if __name__ == "__main__":
    unittest.main()
