"""jieba's dictionary loaded by first-character shards: the same tokens as jieba's fully loaded dictionary (the
reference), one cache file written once and read afterwards, rebuilt when stale, and jieba's global tokenizer used
once the application has touched it (custom words apply as before)."""
from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ctxrag.resource_paths import demo_corpus
from ctxrag.stores.bm25.jieba_dictionary import ShardedDictionary, jieba_module

REPO = Path(__file__).resolve().parents[3]
TEXTS = [
    "",
    "星河知识库的默认端口是多少？",
    "我们在北京大学学习自然语言处理。",
    "中华人民共和国成立了",
    "臺灣的首都是哪裡？",  # Traditional, as the tokenizer gets it with script="keep"
    "用 BM25Index 检索中文和English文本，版本 2.4",
    "龘靐齉爩",  # rare characters: no dictionary entries, jieba's HMM decides
]


@pytest.fixture(scope="module")
def reference() -> object:
    tokenizer = jieba_module().Tokenizer()
    tokenizer.initialize()
    return tokenizer


def _corpus_texts() -> list[str]:
    texts = list(TEXTS)
    for path in sorted(demo_corpus().iterdir()):
        if path.suffix in {".md", ".txt", ".html", ".jsonl"}:
            texts.extend(p for p in path.read_text(encoding="utf-8").split("\n\n") if p.strip())
    return texts


def test_same_tokens_as_the_fully_loaded_dictionary(tmp_path: Path, reference: object) -> None:
    shards = ShardedDictionary(tmp_path / "dict-shards.marshal")
    for text in _corpus_texts():
        segmenter = shards.segmenter(text)
        assert segmenter.lcut(text) == reference.lcut(text), text
        assert segmenter.lcut_for_search(text) == reference.lcut_for_search(text), text
    assert segmenter.total == reference.total


def test_loads_only_the_shards_a_text_needs(tmp_path: Path, reference: object) -> None:
    segmenter = ShardedDictionary(tmp_path / "dict-shards.marshal").segmenter("端口")
    assert segmenter.FREQ and all(word[0] in "端口" for word in segmenter.FREQ)
    assert {w: f for w, f in reference.FREQ.items() if w[0] in "端口"} == segmenter.FREQ


def test_cache_is_written_once_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "jieba" / "dict-shards.marshal"
    ShardedDictionary(cache).segmenter("端口")
    assert cache.is_file()

    def no_build(*args: object) -> None:
        raise AssertionError("rebuilt although the cache file is current")

    monkeypatch.setattr(ShardedDictionary, "_build", no_build)
    assert ShardedDictionary(cache).segmenter("默认端口").lcut("默认端口") == ["默认", "端口"]


@pytest.mark.parametrize("content", [b"not marshal", marshal.dumps({"source": ["another jieba"], "total": 1,
                                                                  "shards": {}})])
def test_a_damaged_or_stale_cache_is_rebuilt(tmp_path: Path, content: bytes, reference: object) -> None:
    cache = tmp_path / "dict-shards.marshal"
    cache.write_bytes(content)
    assert ShardedDictionary(cache).segmenter("默认端口").lcut("默认端口") == reference.lcut("默认端口")
    with open(cache, "rb") as f:
        assert marshal.load(f)["total"] == reference.total


def test_an_unwritable_cache_folder_keeps_the_shards_in_memory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    assert ShardedDictionary(blocker / "dict-shards.marshal").segmenter("端口").lcut("默认端口") == ["默认", "端口"]
    assert not (blocker / "dict-shards.marshal").exists()


def _run(code: str, models_cache: Path) -> dict:
    env = {**os.environ, "CTXRAG_MODELS_CACHE": str(models_cache), "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_tokenizer_uses_shards_under_the_models_cache_and_leaves_jieba_global_untouched(tmp_path: Path) -> None:
    code = ("import json, jieba\nfrom ctxrag.stores.bm25 import ChineseTokenizer\n"
            "tokens = ChineseTokenizer()('星河知识库的默认端口')\n"
            "print(json.dumps({'tokens': tokens, 'global_loaded': jieba.dt.initialized}))")
    out = _run(code, tmp_path)
    assert out == {"tokens": ["星河", "知识库", "默认", "端口"], "global_loaded": False}
    assert (tmp_path / "jieba" / "dict-shards.marshal").is_file()


def test_custom_words_added_to_jieba_apply_as_before(tmp_path: Path) -> None:
    code = ("import json, jieba\nfrom ctxrag.stores.bm25 import ChineseTokenizer\n"
            "jieba.add_word('默认端口')\n"
            "print(json.dumps({'tokens': ChineseTokenizer()('星河知识库的默认端口')}))")
    assert _run(code, tmp_path)["tokens"] == ["星河", "知识库", "默认端口"]
