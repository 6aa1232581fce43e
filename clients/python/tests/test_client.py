"""The Client against the live server at DLM_URL."""

from __future__ import annotations

import sys
import threading
import time
import unittest

import support  # noqa: F401 - puts the package on sys.path
from support import DLM_URL, TwoClientsTestCase, requires_server, unique

from dlm import Client, DlmError, Lease, LockChange


class ClientUrlTest(unittest.TestCase):
    """No server needed: a bad URL is refused when the client is made."""

    def test_a_url_without_a_scheme_is_a_dlm_error_naming_the_field(self) -> None:
        for url, said in (
            ("localhost:7070", "did you mean ws://localhost:7070?"),
            ("127.0.0.1:7070/v1/ws", "did you mean ws://127.0.0.1:7070/v1/ws?"),
            ("ftp://host/x", "got 'ftp://host/x'"),
            ("ws://", "got 'ws://'"),
        ):
            with self.assertRaises(DlmError) as caught:
                Client(url)
            self.assertEqual(caught.exception.code, "INVALID_PARAMS", url)
            self.assertEqual(caught.exception.data, {"field": "url"})
            self.assertIn(said, caught.exception.message)


@requires_server
class ClientTest(TwoClientsTestCase):
    client_name = "dlm-python-tests"

    def test_session_is_none_until_connected_then_the_hello_result(self) -> None:
        with Client(DLM_URL) as client:
            self.assertIsNone(client.session, "the client connects lazily")
            client.get(unique())
            self.assertEqual(client.session["protocol"], "dlm.v1")
            self.assertIs(client.connect(), client.session)

    def test_connect_reports_the_session(self) -> None:
        session = self.client.connect()
        self.assertEqual(session["protocol"], "dlm.v1")
        self.assertIsInstance(session["sessionId"], str)
        self.assertGreater(session["limits"]["maxInflight"], 0)

    def test_the_url_may_omit_the_path_or_use_http(self) -> None:
        base = DLM_URL.removesuffix("/v1/ws")
        for url in (base, base.replace("ws://", "http://") + "/"):
            with Client(url) as client:
                self.assertEqual(client.connect()["protocol"], "dlm.v1")

    def test_acquire_gives_an_int_token_and_release_frees_the_lock(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=10_000)
        self.assertIsInstance(lease.token, int)
        self.assertGreater(lease.token, 0)
        self.assertEqual(lease.ttl_ms, 10_000)
        self.assertTrue(lease.owner.startswith("py-"))
        info = self.other.get(name)
        self.assertTrue(info.held)
        self.assertEqual((info.owner, info.token), (lease.owner, lease.token))
        self.assertTrue(9_000 <= info.ttl_remaining_ms <= 10_000)
        self.assertTrue(self.client.release(lease))
        self.assertFalse(self.other.get(name).held)
        self.assertFalse(lease.release(), "a second release reports the lease already ended")
        self.assertFalse(lease.lost.is_set(), "a released lease is not lost")

    def test_only_the_holder_releases_or_extends_knowing_the_token_is_not_enough(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=10_000, owner="holder-1")
        info = self.other.get(name)
        for method, params in (
            ("lock.release", {"name": name, "token": str(info.token)}),
            ("lock.extend", {"name": name, "token": str(info.token), "ttlMs": 5_000}),
        ):
            with self.assertRaises(DlmError) as caught:
                self.other.call(method, params)
            self.assertEqual(caught.exception.code, "NOT_HOLDER")
        with self.assertRaises(DlmError) as caught:
            self.other.acquire(name, ttl_ms=5_000, owner="holder-1")
        self.assertEqual(caught.exception.code, "LOCK_HELD")
        self.assertNotIn(lease._lease_key, repr(lease))
        lease.extend()
        self.assertTrue(lease.release())

    def test_the_same_owner_and_lease_key_on_another_client_get_the_same_lease(self) -> None:
        name = unique()
        key = "python-chosen-lease-key-0123456789"
        lease = self.client.acquire(name, ttl_ms=10_000, owner="holder-2", lease_key=key)
        again = self.other.acquire(name, ttl_ms=10_000, owner="holder-2", lease_key=key)
        self.assertEqual(again.token, lease.token)
        again.extend()
        self.assertTrue(again.release())
        self.assertFalse(self.client.get(name).held)

    def test_tokens_increase_per_name(self) -> None:
        name = unique()
        tokens = []
        for _ in range(3):
            lease = self.client.acquire(name, ttl_ms=5_000)
            tokens.append(lease.token)
            lease.release()
        self.assertEqual(tokens, sorted(set(tokens)))

    def test_every_acquire_is_a_fresh_owner_unless_one_is_given(self) -> None:
        name = unique()
        first = self.client.acquire(name, ttl_ms=5_000)
        with self.assertRaises(DlmError) as caught:
            self.client.acquire(name, ttl_ms=5_000)
        self.assertEqual(caught.exception.code, "LOCK_HELD")
        self.assertTrue(caught.exception.retryable)
        self.assertTrue(0 < caught.exception.data["ttlRemainingMs"] <= 5_000)
        again = self.client.acquire(name, ttl_ms=5_000, owner=first.owner)
        self.assertEqual(again.token, first.token, "the same owner re-enters with the same token")
        first.release()

    def test_try_acquire_returns_none_when_held(self) -> None:
        name = unique()
        lease = self.client.try_acquire(name, ttl_ms=5_000)
        assert lease is not None
        self.assertIsNone(self.other.try_acquire(name, ttl_ms=5_000))
        lease.release()
        later = self.other.try_acquire(name, ttl_ms=5_000)
        assert later is not None
        self.assertGreater(later.token, lease.token)
        later.release()

    def test_a_wait_is_granted_when_the_holder_releases(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=10_000)
        threading.Timer(0.3, lease.release).start()
        started = time.monotonic()
        waited = self.other.acquire(name, ttl_ms=10_000, wait_ms=5_000)
        elapsed = time.monotonic() - started
        self.assertGreaterEqual(elapsed, 0.29)
        self.assertLess(elapsed, 4.0)
        self.assertGreater(waited.token, lease.token)
        waited.release()

    def test_a_wait_that_runs_out_is_lock_held(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=10_000)
        started = time.monotonic()
        with self.assertRaises(DlmError) as caught:
            self.other.acquire(name, ttl_ms=10_000, wait_ms=300)
        self.assertGreaterEqual(time.monotonic() - started, 0.29)
        self.assertEqual(caught.exception.code, "LOCK_HELD")
        lease.release()

    def test_bad_arguments_are_invalid_params_naming_the_field(self) -> None:
        for kwargs, field in (({"ttl_ms": 5}, "ttlMs"), ({"ttl_ms": 1000, "wait_ms": -1}, "waitMs"),
                              ({"ttl_ms": 1000, "owner": ""}, "owner")):
            with self.assertRaises(DlmError) as caught:
                self.client.acquire(unique(), **kwargs)
            self.assertEqual(caught.exception.code, "INVALID_PARAMS")
            self.assertFalse(caught.exception.retryable)
            self.assertEqual(caught.exception.data["field"], field)
            self.assertEqual(caught.exception.rpc_code, -32602)
        with self.assertRaises(DlmError) as caught:
            self.client.get("")
        self.assertEqual(caught.exception.data["field"], "name")

    def test_check_says_whether_a_token_holds_the_lock_now(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=10_000)
        # Any client may ask, with the token alone, as an int or its decimal string.
        self.assertTrue(self.other.check(name, lease.token))
        self.assertTrue(self.other.check(name, str(lease.token)))
        self.assertFalse(self.other.check(name, lease.token + 1))
        lease.release()
        self.assertFalse(self.other.check(name, lease.token))
        for token in (0, "007", None):
            with self.assertRaises(DlmError) as caught:
                self.client.check(name, token)  # type: ignore[arg-type]
            self.assertEqual(caught.exception.code, "INVALID_PARAMS")
            self.assertEqual(caught.exception.data["field"], "token")

    def test_extend_moves_the_deadline_and_a_stale_lease_is_not_holder(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=400)
        lease.extend(5_000)
        self.assertEqual(lease.ttl_ms, 5_000)
        self.assertGreater(lease.remaining_ms(), 4_000)
        time.sleep(0.6)
        self.assertTrue(lease.held)
        self.assertEqual(self.other.get(name).token, lease.token)
        lease.release()
        with self.assertRaises(DlmError) as caught:
            lease.extend()
        self.assertEqual(caught.exception.code, "NOT_HOLDER")

    def test_lost_is_set_before_the_server_expires_the_lease(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=300)
        self.assertTrue(lease.lost.wait(2.0))
        # The local deadline (send time + TTL - margin) passes before the server's expiry.
        self.assertEqual(lease.lost_reason, "deadline")
        self.assertFalse(lease.held)
        with self.assertRaises(DlmError) as caught:
            lease.extend()
        self.assertEqual(caught.exception.code, "NOT_HOLDER")

    def test_after_a_stall_past_the_deadline_every_check_says_ended_at_once(self) -> None:
        def stall(seconds: float) -> None:
            # A CPU-bound stall that keeps the GIL: with a long switch interval no other thread
            # (the deadline timer's included) runs until this thread blocks again.
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                pass

        checks = {
            "lost": lambda lease: self.assertTrue(lease.lost.is_set()),
            # The event taken before the stall (as a worker keeps it), read after it.
            "lost_taken_before": lambda lease: self.assertTrue(taken_before.is_set()),
            "lost_taken_before_wait": lambda lease: self.assertTrue(taken_before.wait(0)),
            "lost_reason": lambda lease: self.assertEqual(lease.lost_reason, "deadline"),
            "held": lambda lease: self.assertFalse(lease.held),
            "remaining_ms": lambda lease: self.assertEqual(lease.remaining_ms(), 0),
            "assert_held": lambda lease: self.assertRaises(DlmError, lease.assert_held),
        }
        for label, check in checks.items():
            with self.subTest(check=label):
                lease = self.client.acquire(unique(), ttl_ms=1_000)
                lease.assert_held()
                taken_before = lease.lost
                self.assertFalse(taken_before.is_set())
                interval = sys.getswitchinterval()
                sys.setswitchinterval(1_000)
                try:
                    stall(1.5)
                    # The stall kept the deadline timer from running (a test-side look inside)...
                    self.assertFalse(lease._ended)
                    # ...so the check, asked first, can only have its answer from the clock.
                    check(lease)
                finally:
                    sys.setswitchinterval(interval)
                self.assertEqual(lease.lost_reason, "deadline")
                self.assertTrue(lease.lost.is_set())
                self.assertFalse(lease.held)
                self.assertEqual(lease.remaining_ms(), 0)
                with self.assertRaises(DlmError) as caught:
                    lease.assert_held()
                self.assertEqual(caught.exception.code, "NOT_HOLDER")

    def test_a_groups_lost_event_taken_before_a_stall_says_lost_after_it(self) -> None:
        base = unique()
        group = self.client.acquire_all([f"{base}/a", f"{base}/b"], ttl_ms=1_000)
        taken_before = group.lost
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1_000)
        try:
            # As in the test above: a stall that keeps the GIL, so no timer thread runs.
            until = time.monotonic() + 1.5
            while time.monotonic() < until:
                pass
            self.assertFalse(group.leases[0]._ended)
            self.assertTrue(taken_before.is_set())
        finally:
            sys.setswitchinterval(interval)
        self.assertFalse(group.held)

    def test_on_expiring_warns_below_a_third_of_the_ttl_while_extends_fail(self) -> None:
        lease = self.client.acquire(unique(), ttl_ms=1_500)
        told: list[tuple[float, float]] = []
        lease.on_expiring(lambda remaining: told.append((remaining, time.monotonic())))
        # A server slower than the client's request timeout: every extend fails (UNAVAILABLE).
        self.client._request_timeout = 0.0001
        with self.assertRaises(DlmError) as caught:
            lease.extend()
        self.assertEqual(caught.exception.code, "UNAVAILABLE")
        self.assertEqual(told, [])  # more than a third of the TTL is left yet
        self.assertTrue(lease.lost.wait(3.0))
        lost_at = time.monotonic()
        self.assertEqual(len(told), 1)
        remaining, at = told[0]
        self.assertGreater(remaining, 0)
        self.assertLessEqual(remaining, 500)
        self.assertLess(at, lost_at)
        self.assertEqual(lease.lost_reason, "deadline")

    def test_on_expiring_is_not_told_once_an_extend_gets_through(self) -> None:
        lease = self.client.acquire(unique(), ttl_ms=900)
        told: list[float] = []
        lease.on_expiring(told.append)
        timeout = self.client._request_timeout
        self.client._request_timeout = 0.0001
        with self.assertRaises(DlmError):
            lease.extend()
        self.client._request_timeout = timeout
        lease.extend(5_000)  # gets through before a third of the TTL is left: no warning
        time.sleep(1.0)
        self.assertTrue(lease.held)
        self.assertEqual(told, [])
        lease.release()

    def test_on_queued_tells_a_waiting_acquire_its_place_and_get_counts_waiters(self) -> None:
        name = unique()
        holder = self.client.acquire(name, ttl_ms=10_000)
        third = Client(DLM_URL, name="dlm-python-tests-3")
        try:
            told_first: list[int] = []
            told_second: list[int] = []
            errors: list[DlmError] = []

            def wait_first() -> None:
                try:
                    self.other.acquire(name, ttl_ms=10_000, wait_ms=1_500,
                                       on_queued=told_first.append)
                except DlmError as error:
                    errors.append(error)

            first = threading.Thread(target=wait_first)
            first.start()
            deadline = time.monotonic() + 3
            while not told_first and time.monotonic() < deadline:
                time.sleep(0.01)
            second = third.acquire  # the second waiter, granted at the release below
            result: list[Lease] = []
            waiter = threading.Thread(target=lambda: result.append(
                second(name, ttl_ms=10_000, wait_ms=10_000, on_queued=told_second.append)))
            waiter.start()
            while not told_second and time.monotonic() < deadline:
                time.sleep(0.01)
            info = self.client.get(name)
            self.assertEqual((info.waiters, info.waiters_scope), (2, "server"))
            first.join(5)  # its wait runs out on the server: the second moves up
            self.assertEqual([error.code for error in errors], ["LOCK_HELD"])
            while len(told_second) < 2 and time.monotonic() < deadline + 3:
                time.sleep(0.01)
            holder.release()
            waiter.join(5)
            self.assertEqual(told_first, [1])
            self.assertEqual(told_second, [2, 1])
            self.assertEqual(len(result), 1)
            result[0].release()
        finally:
            third.close()

    def test_two_concurrent_acquires_of_one_name_on_one_client_one_wins(self) -> None:
        name = unique()
        start = threading.Barrier(2)
        outcomes: list[object] = []

        def contend() -> None:
            start.wait()
            try:
                outcomes.append(self.client.acquire(name, ttl_ms=5_000))
            except DlmError as error:
                outcomes.append(error)

        threads = [threading.Thread(target=contend) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        leases = [o for o in outcomes if not isinstance(o, DlmError)]
        errors = [o for o in outcomes if isinstance(o, DlmError)]
        self.assertEqual(len(leases), 1, outcomes)
        self.assertEqual([e.code for e in errors], ["LOCK_HELD"])
        self.assertEqual(self.other.get(name).token, leases[0].token)
        leases[0].release()

    def test_lock_lost_from_the_server_sets_lost(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=5_000)
        # The holder, reconnected as another client, extends the lease short with its key; the
        # server tells that session, and this client learns of it through NOT_HOLDER when it
        # tries to extend after the expiry.
        self.other.call("lock.extend", {"name": name, "token": str(lease.token), "ttlMs": 200,
                                        "leaseKey": lease._lease_key})
        time.sleep(0.4)
        with self.assertRaises(DlmError):
            lease.extend()
        self.assertTrue(lease.lost.is_set())
        self.assertEqual(lease.lost_reason, "expired")

    def test_lock_context_keeps_the_lease_extended_and_releases_it(self) -> None:
        name = unique()
        with self.client.lock(name, ttl_ms=300) as lease:
            time.sleep(1.0)  # more than three TTLs
            self.assertFalse(lease.lost.is_set())
            info = self.other.get(name)
            self.assertTrue(info.held)
            self.assertEqual(info.token, lease.token)
        self.assertFalse(self.other.get(name).held)
        self.assertTrue(lease.released)

    def test_acquire_all_grants_every_lock_in_order_and_release_frees_them(self) -> None:
        base = unique()
        names = [f"{base}/c", f"{base}/a", f"{base}/b"]
        group = self.client.acquire_all(names, ttl_ms=10_000)
        self.assertEqual([lease.name for lease in group.leases], names)
        self.assertEqual(len({lease.owner for lease in group.leases}), 1)
        self.assertEqual(group.tokens, {lease.name: lease.token for lease in group.leases})
        for lease in group.leases:
            info = self.other.get(lease.name)
            self.assertEqual((info.held, info.token), (True, lease.token))
        self.assertTrue(group.release())
        for name in names:
            self.assertFalse(self.other.get(name).held)
        self.assertFalse(group.release(), "a second release reports the leases already ended")

    def test_acquire_all_is_all_or_nothing(self) -> None:
        base = unique()
        x, y, z = f"{base}/x", f"{base}/y", f"{base}/z"
        holder = self.other.acquire(y, ttl_ms=10_000)
        for wait_ms in (0, 300):
            with self.assertRaises(DlmError) as caught:
                self.client.acquire_all([z, y, x], ttl_ms=10_000, wait_ms=wait_ms)
            self.assertEqual(caught.exception.code, "LOCK_HELD")
            self.assertEqual(caught.exception.data["name"], y)
            self.assertFalse(self.other.get(x).held)
            self.assertFalse(self.other.get(z).held)
        holder.release()
        with self.client.acquire_all([z, y, x], ttl_ms=10_000) as group:
            self.assertGreater(group.leases[1].token, holder.token)
        self.assertFalse(self.other.get(y).held)

    def test_acquire_all_takes_a_list_and_bad_sets_are_invalid_params(self) -> None:
        with self.assertRaises(TypeError):
            self.client.acquire_all("one-name", ttl_ms=10_000)  # type: ignore[arg-type]
        name = unique()
        for names, field in (([], "locks"), ([name, name], "locks")):
            with self.assertRaises(DlmError) as caught:
                self.client.acquire_all(names, ttl_ms=10_000)
            self.assertEqual((caught.exception.code, caught.exception.data.get("field")),
                             ("INVALID_PARAMS", field))

    def test_lock_context_over_several_names_keeps_them_all_extended(self) -> None:
        base = unique()
        names = [f"{base}/b", f"{base}/a"]
        # A little longer than the one-name test's: one thread extends the leases in turn.
        with self.client.lock(names, ttl_ms=500) as group:
            time.sleep(1.6)  # more than three TTLs
            self.assertFalse(group.lost.is_set())
            for lease in group.leases:
                self.assertEqual(self.other.get(lease.name).token, lease.token)
        for name in names:
            self.assertFalse(self.other.get(name).held)

    def test_a_group_is_lost_when_any_lease_is(self) -> None:
        base = unique()
        group = self.client.acquire_all([f"{base}/a", f"{base}/b"], ttl_ms=5_000)
        second = group.leases[1]
        # As in test_lock_lost_from_the_server_sets_lost: shortened elsewhere, then gone.
        self.other.call("lock.extend", {"name": second.name, "token": str(second.token),
                                        "ttlMs": 200, "leaseKey": second._lease_key})
        time.sleep(0.4)
        with self.assertRaises(DlmError):
            second.extend()
        self.assertTrue(group.lost.is_set())
        self.assertFalse(group.leases[0].lost.is_set())
        self.assertFalse(group.release())

    def test_fenced_work_refuses_a_stale_token(self) -> None:
        name = unique()
        highest: dict[str, int] = {}

        def write(key: str, token: int) -> bool:
            if token < highest.get(key, 0):
                return False
            highest[key] = token
            return True

        first = self.client.acquire(name, ttl_ms=200)
        self.assertTrue(write("row", first.token))
        self.assertTrue(first.lost.wait(2.0))
        second = self.other.acquire(name, ttl_ms=5_000, wait_ms=2_000)
        self.assertTrue(write("row", second.token))
        self.assertFalse(write("row", first.token), "the stale holder's write is refused")
        second.release()

    def test_watch_with_a_callback_and_as_an_iterator(self) -> None:
        name = unique()
        seen: list[LockChange] = []
        got_three = threading.Event()

        def on_change(change: LockChange) -> None:
            seen.append(change)
            if len(seen) == 3:
                got_three.set()

        watch = self.client.watch(name, on_change)
        with self.client.watch(name) as iterated:
            lease = self.other.acquire(name, ttl_ms=5_000)
            lease.release()
            self.assertTrue(got_three.wait(3.0))
            changes = [iterated.get(3.0) for _ in range(3)]
        watch.stop()
        expected = [(False, None, None), (True, lease.owner, lease.token), (False, None, None)]
        self.assertEqual([(c.held, c.owner, c.token) for c in seen], expected)
        self.assertEqual([(c.held, c.owner, c.token) for c in changes if c], expected)
        self.assertIsNone(iterated.get(0.1), "a stopped watch yields nothing more")

    def test_a_watch_is_set_up_again_after_the_connection_drops(self) -> None:
        name = unique()
        with self.client.watch(name) as watch:
            self.assertEqual(watch.get(3.0), LockChange(name=name, held=False))
            self.client._conn.abort()  # the network drops; nothing else uses the client
            again = watch.get(5.0)
            self.assertEqual(again, LockChange(name=name, held=False), "the state on reconnect")
            lease = self.other.acquire(name, ttl_ms=5_000)
            change = watch.get(3.0)
            assert change is not None
            self.assertEqual((change.held, change.token), (True, lease.token))
            lease.release()
            self.assertEqual(watch.get(3.0), LockChange(name=name, held=False, holders=0))

    def test_many_threads_share_one_client(self) -> None:
        names = [unique() for _ in range(8)]
        errors: list[BaseException] = []
        results: dict[str, int] = {}

        def work(name: str) -> None:
            try:
                for _ in range(5):
                    lease = self.client.acquire(name, ttl_ms=5_000, wait_ms=5_000)
                    info = self.client.get(name)
                    assert info.token == lease.token, (info, lease)
                    results[name] = lease.token
                    lease.release()
            except BaseException as error:  # noqa: BLE001 - reported below
                errors.append(error)

        threads = [threading.Thread(target=work, args=(n,)) for n in names for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(set(results), set(names))

    def test_a_lease_survives_a_dropped_connection(self) -> None:
        name = unique()
        lease = self.client.acquire(name, ttl_ms=10_000, owner="py-reconnect-" + name)
        session = self.client.connect()["sessionId"]
        self.client._conn.abort()  # the network drops
        time.sleep(0.2)
        lease.extend()  # on a new connection
        self.assertNotEqual(self.client.connect()["sessionId"], session)
        again = self.client.acquire(name, ttl_ms=10_000, owner=lease.owner)
        self.assertEqual(again.token, lease.token, "a re-sent acquire gets the same lease back")
        self.assertTrue(lease.release())

    def test_close_releases_held_leases(self) -> None:
        name = unique()
        client = Client(DLM_URL)
        client.acquire(name, ttl_ms=10_000)
        client.close()
        self.assertFalse(self.other.get(name).held)
        with self.assertRaises(DlmError) as caught:
            client.get(name)
        self.assertEqual(caught.exception.code, "CANCELLED")

    def test_an_unreachable_server_is_unavailable(self) -> None:
        with Client("ws://127.0.0.1:9/v1/ws", connect_timeout=2.0) as client:
            with self.assertRaises(DlmError) as caught:
                client.get("x")
        self.assertEqual(caught.exception.code, "UNAVAILABLE")
        self.assertTrue(caught.exception.retryable)


if __name__ == "__main__":
    unittest.main()
