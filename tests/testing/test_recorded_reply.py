"""`ctxrag.testing.recorded_reply`: an in-process reply decoded once per (model, request), then read back."""
from __future__ import annotations

from pathlib import Path

import pytest

from ctxrag.testing.recorded_reply import IN_PROCESS_PATH, MissingReplyError, recorded_reply
from ctxrag.testing.reply_cache import CacheMode, ReplyCache, read_used

REQUEST = {"messages": [{"type": "human", "content": "hi"}], "max_tokens": 4}


@pytest.fixture
def gguf(tmp_path: Path) -> Path:
    path = tmp_path / "m.gguf"
    path.write_bytes(b"a stand-in model file: only its sha256 is read")
    return path


class Decoder:
    def __init__(self, text: str) -> None:
        self.text, self.calls = text, 0

    def __call__(self) -> str:
        self.calls += 1
        return self.text


def test_a_reply_is_decoded_once_then_read_back_and_logged_for_prune(tmp_path: Path, gguf: Path) -> None:
    cache, log, decode = tmp_path / "replies", tmp_path / "used.log", Decoder("hello")
    assert recorded_reply(cache, gguf, 4096, REQUEST, decode, used_log=log) == "hello"
    assert recorded_reply(cache, gguf, 4096, REQUEST, Decoder("other"), used_log=log) == "hello"
    assert decode.calls == 1
    [key] = ReplyCache(cache).keys()
    entry = ReplyCache(cache).get(key)
    assert entry is not None and (entry["path"], entry["request"], entry["text"]) == (IN_PROCESS_PATH, REQUEST, "hello")
    assert read_used([log]) == {"miss": {key}, "hit": {key}}


def test_another_request_model_or_n_ctx_is_another_reply(tmp_path: Path, gguf: Path) -> None:
    cache = tmp_path / "replies"
    recorded_reply(cache, gguf, 4096, REQUEST, Decoder("a"))
    other = tmp_path / "other.gguf"
    other.write_bytes(b"another model")
    assert recorded_reply(cache, gguf, 4096, {**REQUEST, "max_tokens": 5}, Decoder("b")) == "b"
    assert recorded_reply(cache, other, 4096, REQUEST, Decoder("c")) == "c"
    assert recorded_reply(cache, gguf, 2048, REQUEST, Decoder("d")) == "d"
    assert len(ReplyCache(cache).keys()) == 4


def test_record_decodes_again_and_off_records_nothing(tmp_path: Path, gguf: Path) -> None:
    cache = tmp_path / "replies"
    recorded_reply(cache, gguf, 4096, REQUEST, Decoder("old"))
    assert recorded_reply(cache, gguf, 4096, REQUEST, Decoder("new"), mode=CacheMode.RECORD) == "new"
    assert recorded_reply(cache, gguf, 4096, REQUEST, Decoder("x")) == "new"
    live = tmp_path / "live"
    assert recorded_reply(live, gguf, 4096, REQUEST, Decoder("live"), mode=CacheMode.OFF) == "live"
    assert not live.exists()


def test_replay_only_names_the_missing_key_and_decodes_nothing(tmp_path: Path, gguf: Path) -> None:
    decode = Decoder("never")
    with pytest.raises(MissingReplyError, match="no recorded in-process reply for key [0-9a-f]{64}"):
        recorded_reply(tmp_path / "replies", gguf, 4096, REQUEST, decode, mode=CacheMode.REPLAY_ONLY)
    assert decode.calls == 0
