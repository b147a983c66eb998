"""Tokenizers: English/code splitting, jieba modes, mixed text, stopwords, stemming, named/callable specs."""
from __future__ import annotations

import jieba
import pytest

from ctxrag.errors import ConfigError
from ctxrag.stores.bm25 import (
    ChineseTokenizer, EnglishTokenizer, MixedTokenizer, load_stopwords, make_tokenizer,
)
from ctxrag.stores.bm25.tokenize import tokenizer_config


def test_empty_text_gives_no_tokens():
    for tok in (EnglishTokenizer(), ChineseTokenizer(), MixedTokenizer()):
        assert tok("") == []
        assert tok("  \n\t ,.!?。，") == []


def test_english_lowercases_and_splits_identifiers():
    tok = EnglishTokenizer()
    assert tok("getUserName") == ["getusername", "get", "user", "name"]
    assert tok("HTTPServer") == ["httpserver", "http", "server"]
    assert tok("user_name=foo.bar()") == ["user_name", "user", "name", "foo", "bar"]
    assert tok("parse2X xyz") == ["parse2x", "parse", "2", "x", "xyz"]


def test_english_without_identifier_splitting_or_keeping():
    assert EnglishTokenizer(split_identifiers=False)("getUserName") == ["getusername"]
    assert EnglishTokenizer(keep_identifiers=False)("getUserName") == ["get", "user", "name"]


def test_english_stopwords_and_custom_list():
    assert EnglishTokenizer()("The cat is on the mat") == ["cat", "mat"]
    assert EnglishTokenizer(stopwords=False)("The cat") == ["the", "cat"]
    assert EnglishTokenizer(stopwords=["cat"])("The cat") == ["the"]


def test_english_stemming():
    assert EnglishTokenizer(stem=True)("running indexes") == ["run", "index"]
    assert EnglishTokenizer()("running indexes") == ["running", "indexes"]


def test_non_ascii_words_are_not_camel_split():
    assert EnglishTokenizer()("Straße café") == ["straße", "café"]


def test_chinese_uses_jieba_and_drops_punctuation_and_stopwords():
    tok = ChineseTokenizer()
    tokens = tok("我们在北京大学学习自然语言处理。")
    expected = [t for t in jieba.lcut("我们在北京大学学习自然语言处理。") if t not in "。" and t not in load_stopwords("zh")]
    assert tokens == expected
    assert "的" not in tok("我的书的封面")


def test_chinese_search_mode_emits_sub_words():
    text = "中华人民共和国成立了"
    assert ChineseTokenizer()(text) == ["中华人民共和国", "成立"]
    assert set(ChineseTokenizer(search_mode=True)(text)) >= {"中华", "人民", "共和国", "中华人民共和国"}


def test_mixed_routes_cjk_runs_to_jieba_and_rest_to_english():
    tokens = MixedTokenizer()("调用 getUserName 函数查询用户")
    assert tokens[:4] == ["调用", "getusername", "get", "user"]
    assert "函数" in tokens and "查询" in tokens and "用户" in tokens


def test_stopword_lists_ship_with_the_package():
    assert {"the", "and", "of"} <= load_stopwords("en")
    assert {"的", "了", "是"} <= load_stopwords("zh")
    with pytest.raises(ConfigError, match="'fr'"):
        load_stopwords("fr")


@pytest.mark.parametrize("name,cls", [("english", EnglishTokenizer), ("code", EnglishTokenizer),
                                      ("chinese", ChineseTokenizer), ("jieba", ChineseTokenizer),
                                      ("mixed", MixedTokenizer), ("MIXED", MixedTokenizer)])
def test_make_tokenizer_by_name(name, cls):
    assert isinstance(make_tokenizer(name), cls)


def test_make_tokenizer_round_trips_config():
    for tok in (EnglishTokenizer(stem=True, stopwords=["x"]), ChineseTokenizer(search_mode=True),
                MixedTokenizer(keep_identifiers=False, stopwords=False)):
        again = make_tokenizer(tokenizer_config(tok))
        assert type(again) is type(tok) and tokenizer_config(again) == tokenizer_config(tok)
        assert again("getUserName 中华人民共和国 the x") == tok("getUserName 中华人民共和国 the x")


def test_make_tokenizer_accepts_callables_and_rejects_bad_specs():
    assert make_tokenizer(str.split) is str.split
    assert tokenizer_config(str.split)["name"] == "callable"
    with pytest.raises(ConfigError, match="'klingon'"):
        make_tokenizer("klingon")
    with pytest.raises(ConfigError, match="bad options"):
        make_tokenizer("english", search_mode=True)
    with pytest.raises(ConfigError, match="only apply to named"):
        make_tokenizer(str.split, stem=True)
    with pytest.raises(ConfigError, match="string"):
        EnglishTokenizer(stopwords="the")


QUESTION_WORDS = {"什么", "什麼", "哪", "哪里", "哪裡", "为什么", "為什麼", "谁", "誰", "吗", "嗎", "呢", "的", "是", "了"}


@pytest.mark.parametrize("text,content", [
    ("为什么天空是蓝色的呢？", {"天空", "蓝色"}),                 # zh-Hans
    ("為什麼天空是藍色的呢？", {"天空", "蓝色"}),                 # zh-Hant: converted, then filtered
    ("台湾的首都是哪里？谁设计了它？", {"台湾", "首都", "设计"}),
    ("臺灣的首都是哪裡？誰設計了它？", {"台湾", "首都", "设计"}),
])
def test_chinese_question_words_particles_and_punctuation_are_dropped(text, content):
    for tok in (ChineseTokenizer(), MixedTokenizer()):
        tokens = tok(text)
        assert content <= set(tokens), tokens
        assert not QUESTION_WORDS & set(tokens), tokens
        assert not any(t in "？，。" for t in tokens)


def test_traditional_and_simplified_give_the_same_tokens():
    tok = ChineseTokenizer()
    assert tok("臺灣大學圖書館開放時間為什麼調整？") == tok("台湾大学图书馆开放时间为什么调整？")
    assert tok("臺灣大學") != ChineseTokenizer(script="keep")("臺灣大學")


def test_keep_script_still_drops_traditional_stopwords():
    tokens = ChineseTokenizer(script="keep")("為什麼天空是藍色的呢？這個問題誰能回答嗎")
    assert "天空" in tokens and not QUESTION_WORDS & set(tokens) and "這個" not in tokens


def test_zh_hans_query_finds_zh_hant_passage():
    from ctxrag.stores.bm25 import BM25Index

    index = BM25Index()
    index.add(["臺灣高速鐵路於2007年通車，連接臺北與高雄。", "长江是中国最长的河流。", "The Great Wall is long."],
              ids=["hant", "hans", "en"])
    assert index.search("台湾高速铁路哪一年通车？", k=1)[0][0] == "hant"
    assert index.search("長江是哪個國家的河流？", k=1)[0][0] == "hans"


def test_script_option_is_saved_and_old_configs_keep_their_tokens():
    assert tokenizer_config(MixedTokenizer())["script"] == "simplified"
    # a config saved before the option existed rebuilds the tokenizer that built that index (no conversion)
    assert make_tokenizer({"name": "mixed", "search_mode": False, "stopwords": True}).chinese.script == "keep"
    assert make_tokenizer({"name": "chinese", "stopwords": True}).script == "keep"
    with pytest.raises(ConfigError, match="'hant'"):
        ChineseTokenizer(script="hant")
