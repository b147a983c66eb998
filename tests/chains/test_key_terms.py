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

EAST_GERMANY = [  # DRCD dev, article 东德 (CC BY-SA 3.0): three paragraphs; the second answers the question below
    ("歷史上東德地區90%都是新教徒，在1956到1971年間東德路德教會改變對政府的反對態度開始合作。從東德"
     "成立開始，統一社會黨即著力減少宗教對東德新一代的影響。教會因此開始開始保持同政府的距離，教會成員的減少和"
     "對青年信徒的歧視使在1956年時教會有條件地開始和政府合作。德意志民主共和國境內的羅馬天主教會和羅馬教廷"
     "保持密切的聯繫，在戰後早先幾年，這種關係是緊張的。天主教會和部分主教拒絕與東德政權合作並不認同馬克思主義"
     "學說，主教通常被史塔西嚴密監視。1945年後天主教會和從德國東部領土遷移過來的天主教會完成了合併。"),
    ("在1957年東德有10,471座普通教育學校，1988年公立學校的數量減少到5907座。1950年有15"
     "83座職業學校，而1988年為955座。在1957年有307座高級技術學校、46所高校和5個學院。198"
     "8年有237所學校、53個學院和大學。東德從1960年為所有兒童設置了從幼兒園到理工中學的十年義務教育。"
     "東德教育系統的主要特點是：八年級前所有兒童接受統一的課程教育，十年級後開始通過考試分流。教育目標重視未來"
     "的工作需要。重視數學和自然科學，而人文學科上採用統一的教學標準。教育單位負責使畢業生在社會主義社會充分就"
     "業。"),
    ("1968年在布拉格之春中，蘇聯通過華約將捷克斯洛伐克的改革扼殺在萌芽狀態。這導致東德內部希望對社會主義進"
     "行更多改革和自由的氣氛驟然下降，許多年輕人在東德主要城市進行了小規模的抗議，史塔西記錄在1968年11月"
     "有2000起「敵對行為」。1970年，統一社會黨總書記烏布利希和昂奈克之間爆發了權力鬥爭。昂奈克對東、西"
     "德的和解較為了解，計劃緩解消費品的缺乏並降低工人對於生產計劃的抱怨，並且在統一社會黨政治局批評烏布利希過"
     "於重視重工業的經濟戰略。雖然蘇共中央總書記勃列日涅夫最終持中立態度，但最終還是導致了烏布利希在1971年"
     "4月辭職。"),
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


def _east_germany(kept: tuple[int, ...]) -> list[Document]:
    return [Document(EAST_GERMANY[i], metadata={"title": "东德"}) for i in kept]


def test_predicate_terms_are_low_when_the_paragraph_that_answers_was_left_out() -> None:
    # the article's other paragraphs name its topic (key terms pass) but not what the question asks of it
    terms = KeyTerms.from_texts(EAST_GERMANY + PARAGRAPHS)
    question = "東德的義務教育需要多久？"
    near = _east_germany((0, 2))
    assert (terms.coverage(question, near) or 0.0) >= 0.25
    left_out = terms.predicate_coverage(question, near)
    kept = terms.predicate_coverage(question, _east_germany((0, 1, 2)))
    assert left_out is not None and left_out < 0.2
    assert kept is not None and kept >= 0.6


def test_predicate_terms_leave_out_the_question_words_and_the_topic(terms: KeyTerms) -> None:
    docs = [Document(PARAGRAPHS[2], metadata={"title": "玉山"}), Document(PARAGRAPHS[3], metadata={"title": "東京"})]
    # "哪一年" is what is asked (jieba keeps it whole), "玉山" the topic (the best chunk's title)
    assert terms.predicate_coverage("哪一年玉山主峰海拔3952公尺？", docs) == 1.0
    assert terms.predicate_coverage("玉山在哪一年命名？", docs) == 0.0
    assert terms.predicate_coverage("玉山？", docs) is None  # the topic alone: nothing to measure
    assert terms.predicate_coverage("How tall is Yushan?", docs) is None  # across languages
