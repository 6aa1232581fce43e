"""Multi-message frames (protocol extension): asked for in session.hello, then requests that
threads issue while a send is under way leave together in one frame."""

from __future__ import annotations

import json
import threading
import unittest

import support  # noqa: F401 - puts the package on sys.path
from support import DLM_URL, requires_server, unique

from dlm import Client
from dlm.connection import pack_frames


class PackFrames(unittest.TestCase):
    def test_one_message_stays_an_object_several_become_one_array(self) -> None:
        one = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.ping"})
        two = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session.ping"})
        self.assertEqual(pack_frames([one]), [one])
        frames = pack_frames([one, two])
        self.assertEqual(len(frames), 1)
        self.assertEqual([m["id"] for m in json.loads(frames[0])], [1, 2])

    def test_cut_at_the_bound_in_utf8_bytes_and_an_oversize_message_goes_alone(self) -> None:
        big = [json.dumps({"id": i, "pad": "€" * 100}, ensure_ascii=False) for i in range(3)]
        size = len(big[0].encode())
        frames = pack_frames(big, 2 * size + 3)
        self.assertEqual([len(f.encode()) <= 2 * size + 3 for f in frames], [True, True])
        self.assertEqual(json.loads(frames[0]), [json.loads(big[0]), json.loads(big[1])])
        self.assertEqual(json.loads(frames[1]), json.loads(big[2]))
        self.assertEqual(pack_frames([big[0], "{}"], 10), [big[0], "{}"])


def _record_sends(client: Client) -> tuple[list[str], threading.Event, threading.Event]:
    """Wraps the connection's socket: every text frame sent is recorded; the first one after
    ``arm`` is set blocks until ``release`` is set (so other threads queue behind it)."""
    conn = client._connection()  # noqa: SLF001 - the test looks at the wire
    ws = conn._ws  # noqa: SLF001
    sent: list[str] = []
    arm, release = threading.Event(), threading.Event()
    original = ws.send_text

    def send_text(text: str) -> None:
        sent.append(text)
        if arm.is_set():
            arm.clear()
            release.wait(5)
        original(text)

    ws.send_text = send_text  # type: ignore[method-assign]
    return sent, arm, release


@requires_server
class MultiFrames(unittest.TestCase):
    def test_asks_in_hello_and_requests_queued_behind_a_send_leave_in_one_frame(self) -> None:
        with Client(DLM_URL, name="dlm-python-frames") as client:
            self.assertEqual(client.connect().get("frames"), "multi")
            sent, arm, release = _record_sends(client)
            names = [unique("frames") for _ in range(5)]
            leases: dict[str, object] = {}

            def take(name: str) -> None:
                leases[name] = client.acquire(name, ttl_ms=5_000)

            arm.set()
            first = threading.Thread(target=take, args=(names[0],))
            first.start()
            while arm.is_set():  # the first send is under way, and blocked
                threading.Event().wait(0.005)
            others = [threading.Thread(target=take, args=(n,)) for n in names[1:]]
            for thread in others:
                thread.start()
            threading.Event().wait(0.2)  # the four queue behind the first send
            release.set()
            for thread in [first, *others]:
                thread.join(10)
            self.assertEqual(sorted(leases), sorted(names))
            frames = [json.loads(text) for text in sent]
            self.assertEqual(frames[0]["params"]["name"], names[0])
            self.assertEqual(len(frames), 2, sent)
            self.assertEqual(sorted(m["params"]["name"] for m in frames[1]), sorted(names[1:]))
            for lease in leases.values():
                lease.release()  # type: ignore[attr-defined]

    def test_frames_single_is_one_message_per_frame(self) -> None:
        with Client(DLM_URL, name="dlm-python-single", frames="single") as client:
            self.assertNotIn("frames", client.connect())
            sent, _, _ = _record_sends(client)
            name = unique("single")
            threads = [threading.Thread(target=client.get, args=(name,)) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(10)
            self.assertEqual(len(sent), 8)
            self.assertFalse(any(isinstance(json.loads(text), list) for text in sent))


if __name__ == "__main__":
    unittest.main()
