"""Key-term coverage (`ctxrag.chains.key_terms`): real jieba, real BM25 frequencies of a real knowledge base, real
text in Traditional Chinese and English."""
from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.documents import Document

from ctxrag.chains.key_terms import KeyTerms

PARAGRAPHS = [
    "黃鐵礦是鐵的二硫化物，由鐵和硫兩種元素所構成，因其淺黃銅的顏色和明亮的金屬光澤，常被誤認為黃金。",
    "長城是中國古代的軍事防禦工程，修築的歷史可上溯到西周時期，明長城東起虎山，西至嘉峪關。",
    "玉山是臺灣最高的山，主峰海拔3952公尺，位於南投縣、嘉義縣與高雄市的交界。",
    "日本的首都是東京，東京都是日本的政治、經濟與文化中心。",
    "The QL-7 drone carries a payload of 2.5 kilograms. Its battery lasts 40 minutes in the air.",
    "The Xinghe server listens on port 7420 by default; the port is set in config.yaml.",
]


@pytest.fixture(scope="module")
def terms() -> KeyTerms:
    return KeyTerms.from_texts(PARAGRAPHS)


def test_a_sentence_holding_the_question_subject_covers_it(terms: KeyTerms) -> None:
    docs = [Document(PARAGRAPHS[0]), Document(PARAGRAPHS[2])]
    cov = terms.coverage("黃鐵礦由鐵和哪一元素所構成？", docs)
    assert cov is not None and cov >= 0.8


def test_an_absent_topic_of_the_same_kind_covers_little(terms: KeyTerms) -> None:
    # the knowledge base has capitals and mountains, not the Mongol Empire: only the generic "首都" is shared
    docs = [Document(PARAGRAPHS[3]), Document(PARAGRAPHS[2])]
    cov = terms.coverage("蒙古帝國的首都在哪裡？", docs)
    assert cov is not None and cov < 0.3
    present = terms.coverage("日本的首都是哪裡？", docs)
    assert present is not None and present > cov


def test_rare_terms_weigh_more_than_common_ones() -> None:
    common = KeyTerms.from_texts(["the port of the server", "the port of the client", "the QL-7 drone"])
    weights = common.weights("Which port does the QL-7 drone use?")
    assert weights["drone"] > weights["port"] and "which" not in weights


def test_a_traditional_question_matches_a_simplified_chunk(terms: KeyTerms) -> None:
    cov = terms.coverage("玉山主峰海拔多少公尺？", [Document("玉山是台湾最高的山，主峰海拔3952公尺。")])
    assert cov is not None and cov >= 0.8


def test_the_best_single_sentence_counts_not_the_whole_chunk(terms: KeyTerms) -> None:
    # both words are in the chunk, never in one sentence
    spread = Document("The QL-7 drone was designed in 2019. Some batteries last long.")
    together = Document("The QL-7 drone battery lasts 40 minutes.")
    a = terms.coverage("How long does the QL-7 drone battery last?", [spread])
    b = terms.coverage("How long does the QL-7 drone battery last?", [together])
    assert a is not None and b is not None and b > a


def test_across_languages_it_is_not_measured(terms: KeyTerms) -> None:
    assert terms.coverage("How tall is Yushan?", [Document(PARAGRAPHS[2])]) is None
    assert terms.coverage("What?", []) is None


def test_the_frequencies_of_a_real_knowledge_base(tmp_path: Path) -> None:
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import Settings

    kb = KnowledgeBase.open("terms", Settings(home=tmp_path), create=True)
    kb.add_texts([{"text": t, "source": f"p{i}.txt"} for i, t in enumerate(PARAGRAPHS)])
    terms = KeyTerms.from_knowledge_base(kb)
    assert terms is not None
    docs = kb.as_retriever(mode="bm25", k=2).invoke("黃鐵礦由鐵和哪一元素所構成？")
    assert (terms.coverage("黃鐵礦由鐵和哪一元素所構成？", docs) or 0.0) >= 0.8
    assert (terms.coverage("蒙古帝國的首都在哪裡？", kb.as_retriever(mode="bm25", k=2).invoke("蒙古帝國的首都在哪裡？"))
            or 0.0) < 0.3


def test_bad_counts_are_refused_naming_the_value() -> None:
    with pytest.raises(ValueError, match="-1"):
        KeyTerms(str.split, {}, -1)
