"""Release requests (lock.requestRelease / lock.releaseRequested) against the live server."""

from __future__ import annotations

import threading

import support  # noqa: F401 - puts the package on sys.path
from support import TwoClientsTestCase, requires_server, unique

from dlm import DlmError


@requires_server
class ReleaseRequestTest(TwoClientsTestCase):
    client_name = "dlm-python-release-requests"

    def test_request_release_sets_the_holders_event_and_calls_back_and_releases_nothing(self) -> None:
        name = unique()
        heard: list[tuple[int, str | None]] = []
        called = threading.Event()
        with self.client.acquire(name, ttl_ms=10_000) as lease:
            lease.on_release_requested(lambda held, reason: (heard.append((held.token, reason)),
                                                             called.set()))
            self.assertFalse(lease.release_requested.is_set())
            self.assertEqual(self.other.request_release(name, reason="deploy 42"), 1)
            self.assertTrue(lease.release_requested.wait(5), "the request reached the holder")
            self.assertTrue(called.wait(5))
            self.assertEqual(lease.release_request_reason, "deploy 42")
            self.assertEqual(heard, [(lease.token, "deploy 42")])
            self.assertTrue(lease.held, "asking is not taking")
            self.assertEqual(self.other.get(name).token, lease.token)

    def test_a_free_name_notifies_nobody(self) -> None:
        self.assertEqual(self.client.request_release(unique()), 0)

    def test_a_waiting_acquire_with_request_release_asks_the_holder_who_lets_go(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=30_000)
        lease.on_release_requested(lambda held, _reason: held.release())
        granted = self.other.acquire(name, ttl_ms=10_000, wait_ms=10_000, request_release=True)
        try:
            self.assertGreater(granted.token, lease.token)
            self.assertIsNone(lease.release_request_reason)
            self.assertTrue(lease.release_requested.is_set())
        finally:
            granted.release()

    def test_a_reason_over_256_bytes_is_invalid_params_naming_reason(self) -> None:
        with self.assertRaises(DlmError) as caught:
            self.client.request_release(unique(), reason="é" * 129)
        self.assertEqual(caught.exception.code, "INVALID_PARAMS")
        self.assertEqual(caught.exception.data.get("field"), "reason")
