"""Snapping a short answer to the span of the chunk it was read from (the short answer style)."""
import pytest
from langchain_core.documents import Document

from ctxrag.chains.extractive import (chinese_numerals, clean_phrase, fit_to_question, names_one_of, restates_question,
                                     snap)

DOCS = [Document("The pump moves 40 L/min."), Document("Port 9321 is the default."), Document("9321 again")]


def test_the_phrase_itself_is_found_in_the_first_chunk_holding_it() -> None:
    assert snap("9321", DOCS) == snap("「9321」。", DOCS) == snap("9321 [3]", DOCS)  # quotes, markers ignored
    found = snap("9321", DOCS)
    assert found is not None and (found.text, found.n, found.f1) == ("9321", 2, 1.0)
    found = snap("the PUMP moves", DOCS)  # case folded, the source's own case returned
    assert found is not None and (found.text, found.n) == ("The pump moves", 1)


def test_simplified_answer_comes_back_in_the_traditional_source_script() -> None:
    docs = [Document("雪山位於臺中。"), Document("南郡王劉義宣於是起兵反抗，兵敗被殺。")]
    found = snap("刘义宣", docs)
    assert found is not None and (found.text, found.n, found.f1) == ("劉義宣", 2, 1.0)


def test_a_near_phrase_snaps_to_the_best_overlapping_span() -> None:
    docs = [Document("長江是中國最長的河流。"), Document("臺灣最高的山是玉山，海拔3952公尺。")]
    found = snap("海拔3952米", docs)  # one character differs from the source
    assert found is not None and found.n == 2 and found.text == "海拔3952"
    assert 0.6 <= found.f1 < 1
    found = snap("Mount Everest", [Document("The highest mountain is Everest, in Nepal.")])
    assert found is not None and found.text == "Everest"


def test_nothing_close_enough_is_not_snapped() -> None:
    assert snap("8080", DOCS) is None
    assert snap("[2]", DOCS) is None and snap("  ", DOCS) is None  # nothing left to look for
    assert snap("完全不同的答案", [Document("臺灣最高的山是玉山")]) is None
    # a wrong year sharing two characters with a short span of the source is no match (seen on DRCD: "年5")
    assert snap("1945年", [Document("直到2007年5月，擁有宙斯盾驅逐艦的國家只有4個。")]) is None
    with pytest.raises(ValueError, match="min_f1"):
        snap("9321", DOCS, min_f1=0)


def test_clean_phrase_drops_lead_in_markers_and_quotes() -> None:
    assert clean_phrase("答案：「玉山」 [2]") == "玉山"
    assert clean_phrase("Answer: William Shakespeare.") == "William Shakespeare"


# made-up sentences (not from any benchmark)
SRC = [Document("風城市有3所大學與700家工廠，人口在全國排第7名，2003年7月升格為市。"), Document("綠島隸屬於臺東縣，距臺東市33公里。")]


@pytest.mark.parametrize("answer, question, expected", [
    ("3", "風城市有幾所大學？", "3所"),                    # the measure word the question asks with
    ("7", "風城市人口在全國排第幾名？", "第7名"),            # 第..名, and not the 7 inside 700
    ("2003年7月", "風城市在哪一年升格為市？", "2003年"),      # a full date cut to the year asked for
    ("2003年7月", "風城市在何時升格為市？", "2003年7月"),     # not asked for a year: kept
    ("臺東", "綠島隸屬於哪一個縣所管轄？", "臺東縣"),          # the type named after 哪一個
    ("33", "綠島距臺東市多少公里？", "33公里"),              # a two-character type when it is one word
    ("700", "風城市有多少家工廠？", "700家"),
    ("3", "How many universities?", "3"),                  # English questions are left alone
])
def test_a_chinese_span_is_fitted_to_what_the_question_asks(answer: str, question: str, expected: str) -> None:
    found = snap(answer, SRC, question=question)
    assert found is not None and found.text == expected, found


def test_fitting_never_takes_a_function_word_or_a_non_word_pair() -> None:
    text = "政治家的目的是改善福祉。"
    assert fit_to_question(text, 0, 3, "哪一種政治人物的目的是改善福祉？") == (0, 3)  # 人物 is not what follows
    assert fit_to_question(text, 0, 3, "何時的政治家？") == (0, 3)  # 時 is no answer type
    assert fit_to_question("元嘉年間的詩風", 0, 2, "元嘉體為哪個年號間的詩風？") == (0, 2)  # 年號 whole, not 年


def test_a_number_in_digits_finds_its_chinese_spelling_but_not_inside_a_longer_number() -> None:
    # DRCD: the model wrote "30" for a source saying 三十年 (多少年 keeps the 年)
    found = snap("30", [Document("王世杰稱，此條約可換三十年的和平。")], question="此條約可換多少年的和平?")
    assert found is not None and found.text == "三十年"
    assert snap("3", [Document("共有三百人。")]) is None  # 三 of 三百 is part of a longer number
    assert chinese_numerals("1905") == ["一千九百零五", "一九〇五"] and chinese_numerals("12a") == []


def test_a_span_gets_the_other_half_of_a_bracket_it_opens() -> None:
    docs = [Document("1876年，英國和清廷簽訂中英《煙臺條約》，規定英國可派駐領事。")]
    found = snap("中英《煙臺條約》", docs, question="英國和清廷簽訂哪一條約?")  # the closing 》 is stripped as an edge
    assert found is not None and found.text == "中英《煙臺條約》"


def test_restating_the_question_is_told_from_a_long_answer_phrase() -> None:
    q = "What movie stars Morgan Freeman, Robert De Niro and the producer of The Game?"
    assert restates_question("Robert De Niro, Morgan Freeman, Michael Douglas", q)
    assert not restates_question("Last Vegas", q)  # short: never a restatement
    assert not restates_question("the Treaty on the Functioning of the European Union", "Which treaty is it?")
    assert not restates_question("遠程觀通距離和反應時間有了極大的提高", "北海艦隊目前已具備什麼能力?")


@pytest.mark.parametrize("answer, names, expected", [
    ("", ["Mexico"], None),                                                   # no phrase names nothing
    ("Mexico [3]", ["Sonora", "Mexico political party"], "Mexico political party"),
    ("British Hong Kong", ["British Hong Kong independence"], "British Hong Kong independence"),
    ("Mex", ["Mexico"], None),                                               # whole words only
    ("New York state", ["Rochester, New York"], None),                       # every word, in a run
    ("the Finnish markka", ["Finland markka"], None),
    ("墨西哥", ["墨西哥的政黨"], "墨西哥的政黨"),                             # CJK: folded script, a substring
])
def test_names_one_of_finds_the_search_that_holds_the_answer(answer: str, names: list[str],
                                                             expected: str | None) -> None:
    assert names_one_of(answer, names) == expected
