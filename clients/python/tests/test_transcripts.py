"""Replays every golden transcript against the server at DLM_URL with the Python runner."""

from __future__ import annotations

import copy
import json
import os
import unittest

import support  # noqa: F401 - puts the package on sys.path
from support import DLM_URL, TRANSCRIPTS, requires_server

from dlm.transcripts import (
    TranscriptFailure,
    TranscriptFormatError,
    load_transcripts,
    match_pattern,
    run_transcript,
)

#: Features the server's backend does not have yet (as transcripts' ``covers`` name them,
#: comma-separated): the transcripts that cover one are not replayed.
WITHOUT = {f for f in os.environ.get("DLM_TRANSCRIPTS_WITHOUT", "").split(",") if f}
TRANSCRIPT_LIST = load_transcripts(TRANSCRIPTS) if TRANSCRIPTS.is_dir() else []
REPLAYED = [t for t in TRANSCRIPT_LIST if not WITHOUT.intersection(t.get("covers", []))]


@requires_server
class GoldenTranscripts(unittest.TestCase):
    """One test per transcript file (added below)."""

    def test_there_are_transcripts(self) -> None:
        self.assertGreaterEqual(len(TRANSCRIPT_LIST), 25, f"no transcripts in {TRANSCRIPTS}")


def _replay(transcript: dict) -> object:
    def test(self: unittest.TestCase) -> None:
        run_transcript(DLM_URL, transcript)

    test.__doc__ = f"{transcript['name']}: {transcript['description']}"
    return test


for _transcript in REPLAYED:
    setattr(GoldenTranscripts, "test_" + _transcript["name"].replace("-", "_"), _replay(_transcript))


def _by_name(name: str) -> dict:
    return copy.deepcopy(next(t for t in TRANSCRIPT_LIST if t["name"] == name))


@requires_server
class RunnerCatchesDeviations(unittest.TestCase):
    """The runner must fail when the server does not do what a transcript says."""

    def test_a_wrong_error_code(self) -> None:
        transcript = _by_name("method-not-found")
        for step in transcript["steps"]:
            if "expect" in step and "-32601" in json.dumps(step):
                step["expect"]["error"]["code"] = -32600
                break
        with self.assertRaisesRegex(TranscriptFailure, "expected -32600, got -32601"):
            run_transcript(DLM_URL, transcript, default_timeout_ms=500)

    def test_an_array_frame_on_a_connection_that_did_not_ask(self) -> None:
        transcript = _by_name("multi-frames")
        for step in transcript["steps"]:
            if "connect" in step:
                step["connect"].pop("multi", None)
        with self.assertRaisesRegex(TranscriptFailure, "did not ask for multi-message frames"):
            run_transcript(DLM_URL, transcript, default_timeout_ms=500)

    def test_a_frame_sooner_than_allowed(self) -> None:
        transcript = _by_name("lock-lost")
        for step in transcript["steps"]:
            if step.get("elapsed"):
                step["elapsed"]["min"] = 5000
        with self.assertRaisesRegex(TranscriptFailure, "before 5000"):
            run_transcript(DLM_URL, transcript)

    def test_a_frame_nobody_expected(self) -> None:
        transcript = _by_name("session-hello")
        transcript["steps"] = [s for s in transcript["steps"] if s.get("conn") != "b"]
        transcript["steps"].append({"send": {"jsonrpc": "2.0", "id": 99, "method": "session.ping"}})
        transcript["steps"].append({"sleep": 200})
        with self.assertRaisesRegex(TranscriptFailure, "no step expected"):
            run_transcript(DLM_URL, transcript)

    def test_a_wrong_close_code(self) -> None:
        transcript = _by_name("frame-size")
        for step in transcript["steps"]:
            if "expectClose" in step:
                step["expectClose"]["code"] = 1000
        with self.assertRaisesRegex(TranscriptFailure, "1009, not 1000"):
            run_transcript(DLM_URL, transcript)


class Matching(unittest.TestCase):
    def ok(self, pattern: object, actual: object, bindings: dict | None = None) -> bool:
        return match_pattern(pattern, actual, bindings or {}, "r1")[0] is not None

    def test_exact_objects_and_json_types(self) -> None:
        self.assertTrue(self.ok({"a": 1, "b": [True, None]}, {"a": 1.0, "b": [True, None]}))
        self.assertFalse(self.ok({"a": 1}, {"a": 1, "b": 2}))
        self.assertFalse(self.ok({"a": 1}, {"a": True}))
        self.assertFalse(self.ok(True, 1))

    def test_placeholders(self) -> None:
        bindings, _ = match_pattern({"t": {"$capture": "t"}}, {"t": "9007199254740993"}, {}, "r")
        assert bindings is not None
        self.assertTrue(self.ok({"$gt": "t"}, "9007199254740994", bindings))
        self.assertFalse(self.ok({"$gt": "t"}, "9007199254740993", bindings))
        self.assertTrue(self.ok({"$ref": "t"}, "9007199254740993", bindings))
        self.assertFalse(self.ok({"$any": "token"}, "042"))
        self.assertTrue(self.ok({"$between": [0, 10]}, 10))
        self.assertTrue(self.ok({"a": 1, "b": {"$optional": True, "$any": "integer"}}, {"a": 1}))
        self.assertFalse(self.ok({"a": 1, "b": {"$optional": True, "$any": "integer"}},
                                 {"a": 1, "b": "x"}))
        self.assertTrue(self.ok("{{run}}/x", "r1/x"))
        with self.assertRaises(TranscriptFormatError):
            self.ok({"$regex": "."}, "x")


if __name__ == "__main__":
    unittest.main()
