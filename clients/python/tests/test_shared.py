"""Semaphores and read-write locks (shared modes) against the live server at DLM_URL."""

from __future__ import annotations

import threading
import time
import unittest

import support  # noqa: F401 - puts the package on sys.path
from support import TwoClientsTestCase, requires_server, unique

from dlm import DlmError, LockChange


@requires_server
class SharedModesTest(TwoClientsTestCase):
    client_name = "dlm-python-shared"

    def test_a_semaphore_admits_limit_holders_and_a_waiter_gets_a_released_permit(self) -> None:
        name = unique()
        pool = self.client.semaphore(name, 2)
        first = pool.acquire(ttl_ms=10_000)
        second = pool.acquire(ttl_ms=10_000)
        self.assertEqual((first.mode, first.limit), ("shared", 2))
        self.assertGreater(second.token, first.token)
        self.assertIsNone(self.other.semaphore(name, 2).try_acquire(ttl_ms=10_000),
                          "a third permit while two are held")
        info = self.other.get(name)
        self.assertEqual((info.mode, info.limit), ("shared", 2))
        self.assertEqual([h.token for h in info.holders], [first.token, second.token])
        self.assertEqual((info.owner, info.token), (second.owner, second.token))
        got: list[object] = []
        waiter = threading.Thread(
            target=lambda: got.append(self.other.semaphore(name, 2).acquire(ttl_ms=10_000,
                                                                            wait_ms=5_000)))
        waiter.start()
        time.sleep(0.3)
        self.assertEqual(got, [], "the waiter waits while both permits are held")
        released_at = time.monotonic()
        self.assertTrue(first.release())
        waiter.join(5)
        self.assertEqual(len(got), 1)
        self.assertLess(time.monotonic() - released_at, 2.0)
        third = got[0]
        self.assertGreater(third.token, second.token)  # type: ignore[attr-defined]
        third.release()  # type: ignore[attr-defined]
        second.release()

    def test_a_semaphore_with_another_limit_is_refused_with_the_holders_limit(self) -> None:
        name = unique()
        with self.client.semaphore(name, 2).permit(ttl_ms=10_000):
            with self.assertRaises(DlmError) as raised:
                self.other.semaphore(name, 3).acquire(ttl_ms=10_000)
        self.assertEqual(raised.exception.code, "INVALID_PARAMS")
        self.assertEqual(raised.exception.data.get("field"), "limit")
        self.assertEqual(raised.exception.data.get("limit"), 2)
        self.assertFalse(self.other.get(name).held, "the permit was released on exit")

    def test_bad_limits_are_refused_before_anything_is_sent(self) -> None:
        for limit in (0, -1, 1.5, True, "2"):
            with self.assertRaises(DlmError) as raised:
                self.client.semaphore(unique(), limit)  # type: ignore[arg-type]
            self.assertEqual((raised.exception.code, raised.exception.data.get("field")),
                             ("INVALID_PARAMS", "limit"), repr(limit))
        with self.assertRaises(DlmError) as raised:
            self.client.acquire(unique(), ttl_ms=1_000, limit=2)
        self.assertEqual(raised.exception.data.get("field"), "limit")
        with self.assertRaises(DlmError) as raised:
            self.client.acquire(unique(), ttl_ms=1_000, mode="read")
        self.assertEqual(raised.exception.data.get("field"), "mode")
        with self.assertRaises(DlmError) as raised:
            self.client.semaphore(unique(), 10_001).acquire(ttl_ms=1_000)
        self.assertEqual(raised.exception.data.get("field"), "limit", "above maxHolders")

    def test_readers_share_and_a_waiting_writer_goes_before_later_readers(self) -> None:
        name = unique()
        rw = self.client.read_write_lock(name)
        other_rw = self.other.read_write_lock(name)
        reader = rw.acquire_read(ttl_ms=10_000)
        second_reader = other_rw.acquire_read(ttl_ms=10_000)
        self.assertEqual(reader.mode, "shared")
        self.assertEqual(len(self.client.get(name).holders), 2)
        order: list[str] = []

        def write() -> None:
            with other_rw.write(ttl_ms=10_000, wait_ms=5_000) as lease:
                order.append("writer")
                self.assertEqual(lease.mode, "exclusive")
                time.sleep(0.2)

        def late_read() -> None:
            with rw.read(ttl_ms=10_000, wait_ms=5_000):
                order.append("late reader")

        writer = threading.Thread(target=write)
        writer.start()
        time.sleep(0.3)
        late = threading.Thread(target=late_read)
        late.start()
        time.sleep(0.3)
        self.assertEqual(order, [], "the writer waits for the readers; the late reader for it")
        reader.release()
        second_reader.release()
        writer.join(5)
        late.join(5)
        self.assertEqual(order, ["writer", "late reader"])

    def test_acquire_all_with_a_shared_entry_and_watch_counts_holders(self) -> None:
        name, other_name = unique(), unique()
        changes: list[LockChange] = []
        watch = self.other.watch(name, changes.append)
        group = self.client.acquire_all(
            [{"name": name, "mode": "shared", "limit": 3}, other_name], ttl_ms=10_000)
        shared, exclusive = group.leases
        self.assertEqual((shared.mode, shared.limit), ("shared", 3))
        self.assertEqual((exclusive.mode, exclusive.limit), ("exclusive", None))
        permit = self.other.semaphore(name, 3).acquire(ttl_ms=10_000)
        group.release()
        permit.release()
        deadline = time.monotonic() + 5
        while len(changes) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        watch.stop()
        # The state when the watch began, then two grants and two ends.
        self.assertEqual([(c.held, c.holders) for c in changes[1:]],
                         [(True, 1), (True, 2), (True, 1), (False, 0)])
        self.assertEqual([c.mode for c in changes[1:3]], ["shared", "shared"])


if __name__ == "__main__":
    unittest.main()
