"""The evidence check: the quote's verdicts (no model), its place in the RAG chain and the assistant (a structured fake
model, for composition), and the real local model quoting (or declining to) on a small knowledge base."""
from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_core.messages import SystemMessage
from langchain_core.runnables import Runnable, RunnableLambda

from ctxrag.chains.evidence import EvidenceCheck, EvidenceQuote, answer_found, quote_found
from ctxrag.chains.rag import build_rag_chain
from ctxrag.chains.relevance import no_knowledge_notice
from ctxrag.prompts.evidence import evidence_instruction
from structured_fake import StructuredFake

DOCS = [
    Document("The QL-7 drone carries a payload of 2.5 kilograms. Its battery lasts 40 minutes.",
             metadata={"source": "ql7.md", "title": "QL-7 drone"}),
    Document("專業版的 P1 故障在 30 分鐘內響應，標準版在 4 小時內。", metadata={"source": "support.md", "title": "支援"}),
    Document("黃鐵礦由鐵和硫兩種元素所構成，常被誤認為黃金。", metadata={"source": "minerals.md", "title": "礦物"}),
]


def _check(**kw: float) -> EvidenceCheck:
    return EvidenceCheck(StructuredFake.of(), **kw)


def test_quote_found_is_one_for_a_verbatim_quote_across_script_spacing_and_punctuation() -> None:
    assert quote_found("黄铁矿由铁和硫两种元素所构成", DOCS[2].page_content) == 1.0
    assert quote_found("the QL-7 drone carries a payload of 2.5 kilograms", DOCS[0].page_content) == 1.0
    assert quote_found("", DOCS[0].page_content) == 0.0


def test_quote_found_is_low_for_a_sentence_the_model_made_up() -> None:
    assert quote_found("The QL-7 drone weighs 2.5 kilograms.", DOCS[0].page_content) < 0.8
    assert quote_found("黃鐵礦由鐵和碳所構成。", DOCS[2].page_content) < 0.8


def test_answer_found_holds_a_copied_answer_across_script_spacing_and_case() -> None:
    assert answer_found("硫", DOCS[2].page_content) == 1.0
    assert answer_found("30分钟", DOCS[1].page_content) == 1.0  # Simplified answer, Traditional spaced sentence
    assert answer_found("2.5 Kilograms", DOCS[0].page_content) == 1.0
    assert answer_found("", DOCS[0].page_content) == 0.0


def test_answer_found_is_low_for_an_answer_the_sentence_does_not_hold() -> None:
    assert answer_found("碳", DOCS[2].page_content) == 0.0
    assert answer_found("三架", "賽丁泉天文台共有12架望遠鏡，其中最大的口徑為1公尺。") == 0.0
    assert answer_found("1943年11月", "以戰鬥機執行地面攻擊任務，在第一次世界大戰時就已經出現。") < 0.5


def test_a_real_quote_with_an_answer_it_does_not_hold_abstains() -> None:
    # the case: a real sentence of the right chunk, an invented answer beside it
    verdict = _check(min_answer=0.8).judge("黃鐵礦由鐵和哪一元素所構成？", DOCS,
                             EvidenceQuote(source=3, quote="黃鐵礦由鐵和硫兩種元素所構成", answer="碳"))
    assert not verdict.supported and verdict.found == 1.0 and verdict.answer_found == 0.0
    assert "not in the sentence it quoted" in verdict.reason
    scope = [Document("賽丁泉天文台共有12架望遠鏡，其中最大的口徑為1公尺。", metadata={"title": "賽丁泉天文台"})]
    assert not _check(min_answer=0.8).judge("在賽丁泉天文台中可以看到的望遠鏡有幾架？", scope,
                              EvidenceQuote(source=1, quote="賽丁泉天文台共有12架望遠鏡", answer="三架")).supported
    assert _check(min_answer=0.8).judge("在賽丁泉天文台中可以看到的望遠鏡有幾架？", scope,
                          EvidenceQuote(source=1, quote="賽丁泉天文台共有12架望遠鏡", answer="12架")).supported


def test_the_answer_may_lie_past_a_quote_cut_short_in_its_sentence() -> None:
    # the quote stops before the answer; the sentence it was cut from holds it
    verdict = _check(min_answer=0.8).judge("黃鐵礦由鐵和哪一元素所構成？", DOCS,
                             EvidenceQuote(source=3, quote="黃鐵礦由鐵和", answer="硫"))
    assert verdict.supported and verdict.answer_found == 1.0


def test_the_answer_test_can_be_kept_to_short_answers() -> None:
    # a description ("what does it do?") is not a copied span: with answer_test_max_chars it is not tested
    quote = "The QL-7 drone carries a payload of 2.5 kilograms."
    described = EvidenceQuote(source=1, quote=quote, answer="It lifts small parcels for delivery")
    invented = EvidenceQuote(source=1, quote=quote, answer="4 kg")
    short_only = _check(min_answer=0.8, answer_test_max_chars=12)
    assert short_only.judge("What does the QL-7 drone carry?", DOCS, described).supported
    assert not short_only.judge("How heavy a payload does the QL-7 drone carry?", DOCS, invented).supported
    assert not _check(min_answer=0.8).judge("What does the QL-7 drone carry?", DOCS, described).supported
    with pytest.raises(ValueError, match="0"):
        _check(answer_test_max_chars=0)


def test_min_answer_zero_turns_the_answer_test_off() -> None:
    verdict = _check(min_answer=0.0).judge("黃鐵礦由鐵和哪一元素所構成？", DOCS,
                                           EvidenceQuote(source=3, quote="黃鐵礦由鐵和硫兩種元素所構成", answer="碳"))
    assert verdict.supported


def test_the_key_term_stage_abstains_without_asking_for_a_quote() -> None:
    from ctxrag.chains.key_terms import KeyTerms

    terms = KeyTerms.from_texts([d.page_content for d in DOCS] + ["日本的首都是東京。", "玉山是臺灣最高的山。"])
    llm = StructuredFake.of()  # nothing scripted: a quote request would fail
    check = EvidenceCheck(llm, key_terms=terms, min_key=0.3)
    verdict = check.check("蒙古帝國的首都哈拉和林在哪裡？", DOCS, [SystemMessage("chunks")])
    assert not verdict.supported and verdict.key is not None and verdict.key < 0.3 and llm.schemas == []
    asked = StructuredFake.of({"source": 3, "quote": "黃鐵礦由鐵和硫兩種元素所構成"})
    passed = EvidenceCheck(asked, key_terms=terms, min_key=0.3).check("黃鐵礦由鐵和哪一元素所構成？", DOCS,
                                                                     [SystemMessage("chunks")])
    assert passed.supported and passed.key is not None and passed.key >= 0.3 and len(asked.schemas) == 1


def test_the_predicate_stage_abstains_without_asking_for_a_quote_when_the_answering_paragraph_is_missing() -> None:
    from ctxrag.chains.key_terms import KeyTerms
    from test_key_terms import EAST_GERMANY, PARAGRAPHS

    terms = KeyTerms.from_texts(EAST_GERMANY + PARAGRAPHS)
    question = "東德的義務教育需要多久？"
    near = [Document(EAST_GERMANY[i], metadata={"title": "东德"}) for i in (0, 2)]
    llm = StructuredFake.of()  # nothing scripted: a quote request would fail
    verdict = EvidenceCheck(llm, key_terms=terms, min_predicate=0.3).check(question, near, [SystemMessage("c")])
    assert not verdict.supported and verdict.predicate is not None and verdict.predicate < 0.3 and llm.schemas == []
    assert "predicate terms" in verdict.reason
    # off by default: the same chunks go on to the quote
    asked = StructuredFake.of({"source": 0, "quote": ""})
    EvidenceCheck(asked, key_terms=terms).check(question, near, [SystemMessage("c")])
    assert len(asked.schemas) == 1
    full = [Document(t, metadata={"title": "东德"}) for t in EAST_GERMANY]
    quoted = StructuredFake.of({"source": 2, "quote": "十年義務教育"})
    passed = EvidenceCheck(quoted, key_terms=terms, min_predicate=0.3).check(question, full, [SystemMessage("c")])
    assert passed.predicate is not None and passed.predicate >= 0.3 and len(quoted.schemas) == 1


def test_no_quote_abstains() -> None:
    verdict = _check().judge("How much does the QL-7 drone weigh?", DOCS, EvidenceQuote(source=0, quote="", answer=""))
    assert not verdict.supported and verdict.source == 0
    assert "quoted none" in verdict.reason


def test_a_quote_not_in_any_chunk_abstains_and_says_how_much_was_found() -> None:
    # the case: "weighs" stitched between two pieces of the payload sentence
    verdict = _check(min_window=1.01).judge("How much does the QL-7 drone weigh?", DOCS,
                                            EvidenceQuote(source=1, quote="The QL-7 drone weighs 2.5 kilograms.",
                                                          answer="2.5 kilograms"))
    assert not verdict.supported
    assert "not in them" in verdict.reason and verdict.found < 0.8
    assert not _check().judge("Who invented the telephone?", DOCS,
                              EvidenceQuote(source=1, quote="Bell invented the telephone in 1876.",
                                            answer="Bell")).supported


def test_a_real_quote_about_something_else_abstains_on_coverage() -> None:
    # the quote is in chunk 2, but it is about support times, not about pyrite
    others = [DOCS[0], DOCS[1]]  # no chunk about pyrite at all
    verdict = _check(min_coverage=0.5).judge("黃鐵礦由鐵和哪一元素所構成？", others,
                                             EvidenceQuote(source=2, quote="專業版的 P1 故障在 30 分鐘內響應", answer="30 分鐘"))
    assert not verdict.supported and verdict.coverage == 0.0 and verdict.window is not None and verdict.window < 0.5
    assert "about something else" in verdict.reason


def test_a_quote_of_the_wrong_sentence_passes_when_a_retrieved_sentence_holds_the_question() -> None:
    # the model quoted chunk 2, but chunk 3 has a sentence with the question's words: the quote was the wrong one
    verdict = _check(min_coverage=0.5, min_window=0.6).judge(
        "黃鐵礦由鐵和哪一元素所構成？", DOCS, EvidenceQuote(source=2, quote="專業版的 P1 故障在 30 分鐘內響應", answer="30 分鐘"))
    assert verdict.supported and verdict.window is not None and verdict.window >= 0.6
    off = _check(min_coverage=0.5, min_window=1.01).judge(
        "黃鐵礦由鐵和哪一元素所構成？", DOCS, EvidenceQuote(source=2, quote="專業版的 P1 故障在 30 分鐘內響應", answer="30 分鐘"))
    assert not off.supported


def test_the_fallback_can_be_denied_to_a_real_quote_about_something_else() -> None:
    # min_fallback_coverage: a sentence really in a chunk but sharing none of the question's words is the model's
    # choice of evidence about another thing; a quote not found in any chunk (a paraphrase) still falls back
    wrong = EvidenceQuote(source=2, quote="專業版的 P1 故障在 30 分鐘內響應", answer="30 分鐘")
    denied = _check(min_coverage=0.5, min_window=0.6, min_fallback_coverage=0.1).judge(
        "黃鐵礦由鐵和哪一元素所構成？", DOCS, wrong)
    assert not denied.supported and denied.found == 1.0 and denied.coverage == 0.0 and denied.window is None
    paraphrase = EvidenceQuote(source=3, quote="黃鐵礦的成分是鐵與硫", answer="硫")
    kept = _check(min_coverage=0.5, min_window=0.6, min_fallback_coverage=0.1).judge(
        "黃鐵礦由鐵和哪一元素所構成？", DOCS, paraphrase)
    assert kept.supported and kept.found < 0.8 and kept.window is not None and kept.window >= 0.6


def test_a_real_quote_on_a_neighbouring_subject_abstains_on_the_sentences_key_terms() -> None:
    # near topic: the knowledge base has the QL-7's payload, the question asks its weight; the quote is real and
    # shares the question's common words, but not "weigh", which no chunk holds and so weighs most
    from ctxrag.chains.key_terms import KeyTerms

    terms = KeyTerms.from_texts([d.page_content for d in DOCS] + ["The QL-9 drone has a range of 8 km.",
                                                                  "Drones carry cameras."])
    quote = EvidenceQuote(source=1, quote="The QL-7 drone carries a payload of 2.5 kilograms.", answer="2.5 kilograms")
    near = EvidenceCheck(StructuredFake.of(), min_coverage=0.0, key_terms=terms, min_sentence_key=0.5).judge(
        "How much does the QL-7 drone weigh without its battery?", DOCS, quote)
    assert not near.supported and near.sentence_key is not None and near.sentence_key < 0.5
    assert "holds too little of what the question names" in near.reason
    asked = EvidenceCheck(StructuredFake.of(), min_coverage=0.0, key_terms=terms, min_sentence_key=0.5).judge(
        "How heavy a payload does the QL-7 drone carry?", DOCS, quote)
    assert asked.supported and asked.sentence_key is not None and asked.sentence_key >= 0.5
    off = EvidenceCheck(StructuredFake.of(), min_coverage=0.0, key_terms=terms).judge(
        "How much does the QL-7 drone weigh without its battery?", DOCS, quote)
    assert off.supported and off.sentence_key is None  # min_sentence_key=0 (the class default): not measured


def test_the_sentence_standing_in_for_a_quote_needs_the_key_terms_too() -> None:
    from ctxrag.chains.key_terms import KeyTerms

    terms = KeyTerms.from_texts([d.page_content for d in DOCS] + ["日本的首都是東京。", "玉山是臺灣最高的山。"])
    made_up = EvidenceQuote(source=3, quote="黃鐵礦的成分是鐵與硫", answer="硫")  # not in the chunk: the fallback decides
    kept = EvidenceCheck(StructuredFake.of(), min_window=0.6, key_terms=terms, min_sentence_key=0.3).judge(
        "黃鐵礦由鐵和哪一元素所構成？", DOCS, made_up)
    assert kept.supported and kept.found < 0.8 and kept.sentence_key is not None and kept.sentence_key >= 0.3
    refused = EvidenceCheck(StructuredFake.of(), min_window=0.3, key_terms=terms, min_sentence_key=0.9).judge(
        "黃鐵礦由鐵和錳哪一元素所構成？", DOCS, made_up)
    assert not refused.supported and refused.sentence_key is not None and refused.sentence_key < 0.9
    assert "holds too little of what it names" in refused.reason


def test_the_default_check_swaps_the_word_coverage_for_the_sentences_key_terms_when_it_has_them(
        tmp_path: Path) -> None:
    from ctxrag.chains import evidence
    from ctxrag.kb.local import KnowledgeBase
    from ctxrag.settings import Settings

    without = evidence.default_evidence_check(StructuredFake.of())  # type: ignore[arg-type]
    assert without.key_terms is None and without.min_sentence_key == 0.0
    assert without.min_coverage == evidence.DEFAULT_MIN_COVERAGE > 0  # no key terms: the plain word coverage stays
    kb = KnowledgeBase.open("ev", Settings(home=tmp_path), create=True)
    kb.add_texts([{"text": d.page_content, "source": d.metadata["source"]} for d in DOCS])
    with_terms = evidence.default_evidence_check(StructuredFake.of(), kb)  # type: ignore[arg-type]
    assert with_terms.key_terms is not None and with_terms.min_coverage == evidence.DEFAULT_MIN_COVERAGE_WITH_KEY_TERMS
    assert with_terms.min_sentence_key == evidence.DEFAULT_MIN_SENTENCE_KEY > 0


def test_a_real_quote_on_the_question_is_supported_even_when_misnumbered() -> None:
    verdict = _check().judge("黃鐵礦由鐵和哪一元素所構成？", DOCS,
                             EvidenceQuote(source=1, quote="黃鐵礦由鐵和硫兩種元素所構成", answer="硫"))
    assert verdict.supported and verdict.source == 3 and verdict.found == 1.0
    assert verdict.coverage is not None and verdict.coverage >= 0.5


def test_across_languages_the_word_coverage_is_not_measured() -> None:
    verdict = _check(min_coverage=0.9).judge("How fast are P1 incidents answered on the Professional plan?", DOCS,
                                             EvidenceQuote(source=2, quote="專業版的 P1 故障在 30 分鐘內響應", answer="30 分鐘"))
    assert verdict.supported and verdict.coverage is None


def test_an_unreadable_reply_is_not_judged() -> None:
    verdict = _check().judge("How much does the QL-7 drone weigh?", DOCS, None)
    assert verdict.supported and "not judged" in verdict.reason


@pytest.mark.parametrize("bad", [{"min_found": 1.5}, {"min_coverage": -0.1}, {"min_window": 2.0},
                                 {"min_judge": 1.5}, {"min_answer": 1.2}, {"min_key": 2.5},
                                 {"min_fallback_coverage": 1.7}, {"min_sentence_key": 1.3},
                                 {"min_quote_words": -0.5}, {"min_predicate": 1.4}])
def test_bad_thresholds_are_refused_naming_the_value(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=str(next(iter(bad.values())))):
        _check(**bad)


def test_the_instruction_follows_the_question_language_and_script() -> None:
    assert "先不要回答" in evidence_instruction("黄铁矿由什么构成？")
    assert "資料" in evidence_instruction("黃鐵礦由鐵和哪一元素所構成？")
    assert "Do not answer yet" in evidence_instruction("How much does it weigh?")
    assert "简短答案" in evidence_instruction("黄铁矿由什么构成？", with_answer=True)
    assert "簡短答案" in evidence_instruction("黃鐵礦由鐵和哪一元素所構成？", with_answer=True)
    assert '"answer"' in evidence_instruction("How much does it weigh?", with_answer=True)


def test_the_request_keeps_the_answer_prompt_system_message() -> None:
    system = SystemMessage("instructions and [1] chunks")
    msgs = _check().messages("How much does the QL-7 drone weigh?", [system])
    assert msgs[0] is system and "QL-7" in msgs[1].content


def test_the_no_knowledge_notice_keeps_a_traditional_question_traditional() -> None:
    assert no_knowledge_notice("黃鐵礦由鐵和哪一元素所構成？").startswith("知識庫中沒有關於「")
    assert no_knowledge_notice("黄铁矿由什么构成？").startswith("知识库中没有关于“")
    assert no_knowledge_notice("What is pyrite?").startswith("The knowledge base has no material")


def _chain(llm: StructuredFake, **kw: object) -> Runnable:
    kw.setdefault("evidence", EvidenceCheck(llm, min_window=1.01))
    return build_rag_chain(RunnableLambda(lambda q: DOCS), llm, gate=False, **kw)  # type: ignore[arg-type]


def test_the_chain_abstains_without_asking_for_an_answer_when_no_chunk_states_it() -> None:
    llm = StructuredFake.of({"source": 1, "quote": "The QL-7 drone weighs 2.5 kilograms.", "answer": "2.5 kilograms"},
                            "The QL-7 drone weighs 2.5 kilograms [1].")
    out = _chain(llm).invoke("How much does the QL-7 drone weigh?")
    assert out["supported"] is False and out["sources"] == []
    assert out["answer"] == no_knowledge_notice("How much does the QL-7 drone weigh?")
    assert out["relevance"]["evidence"]["supported"] is False
    assert [s["function"]["name"] for s in llm.schemas] == ["EvidenceQuote"]  # asked once, for the quote only


def test_the_chain_answers_after_a_quote_it_finds() -> None:
    llm = StructuredFake.of({"source": 1, "quote": "The QL-7 drone carries a payload of 2.5 kilograms.",
                             "answer": "2.5 kilograms"},
                            "Its payload is 2.5 kilograms [1].")
    out = _chain(llm).invoke("What payload does the QL-7 drone carry?")
    assert out["supported"] is True and out["answer"] == "Its payload is 2.5 kilograms [1]."
    assert out["relevance"]["evidence"]["source"] == 1
    assert [s["n"] for s in out["sources"]] == [1]


def test_the_chain_streams_the_abstention_too() -> None:
    llm = StructuredFake.of({"source": 0, "quote": "", "answer": ""})
    chunks = list(_chain(llm).stream("黃鐵礦的硬度是多少？"))
    answer = "".join(c.get("answer", "") for c in chunks)
    assert answer.startswith("知識庫中沒有關於「")
    assert any(c.get("supported") is False for c in chunks)


def test_evidence_false_keeps_the_old_chain() -> None:
    llm = StructuredFake.of("The QL-7 drone weighs 2.5 kilograms [1].")
    out = _chain(llm, evidence=False).invoke("How much does it weigh?")
    assert out["supported"] is None and out["answer"].startswith("The QL-7 drone weighs")


@pytest.mark.llm
def test_the_local_model_quotes_the_sentence_that_answers_and_nothing_for_an_absent_topic(
        server_chat_model: object) -> None:
    check = EvidenceCheck(server_chat_model)  # type: ignore[arg-type]
    from ctxrag.chains.rag import answer_messages

    def verdict(question: str) -> object:
        return check.check(question, DOCS, answer_messages({"question": question, "documents": DOCS, "history": []}))

    ok = verdict("What payload does the QL-7 drone carry?")
    assert ok.supported and ok.source == 1, ok  # type: ignore[attr-defined]
    assert not verdict("Who wrote the novel Pride and Prejudice?").supported  # type: ignore[attr-defined]


@pytest.mark.llm
def test_the_local_model_through_the_default_stages_answers_the_answerable_and_abstains_on_an_absent_topic(
        server_chat_model: object) -> None:
    """Real model, real text: the key-term stage, then the quote and its short answer (checked in the quote)."""
    from ctxrag.chains.key_terms import KeyTerms
    from ctxrag.chains.rag import answer_messages

    wiki = [Document("黃鐵礦是鐵的二硫化物，由鐵和硫兩種元素所構成，因其淺黃銅的顏色和明亮的金屬光澤，常被誤認為黃金。",
                     metadata={"source": "pyrite.txt", "title": "黃鐵礦"}),
            Document("日本的首都是東京，東京都是日本的政治、經濟與文化中心，人口約一千四百萬。",
                     metadata={"source": "tokyo.txt", "title": "東京"})]
    terms = KeyTerms.from_texts([d.page_content for d in wiki])
    check = EvidenceCheck(server_chat_model, key_terms=terms, min_answer=0.8)  # type: ignore[arg-type]

    def verdict(question: str) -> object:
        return check.check(question, wiki, answer_messages({"question": question, "documents": wiki, "history": []}))

    ok = verdict("黃鐵礦由鐵和哪一元素所構成？")
    assert ok.supported and ok.source == 1 and ok.answer_found == 1.0, ok  # type: ignore[attr-defined]
    absent = verdict("蒙古帝國的首都在哪裡？")
    assert not absent.supported, absent  # type: ignore[attr-defined]


def test_a_model_without_structured_output_leaves_the_verdict_to_the_gate() -> None:
    from langchain_core.language_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage

    out = _chain(GenericFakeChatModel(messages=iter([AIMessage("It carries 2.5 kilograms [1].")]))).invoke(
        "What payload does the QL-7 drone carry?")
    assert out["supported"] is None and out["answer"] == "It carries 2.5 kilograms [1]."
    assert out["relevance"]["evidence"]["judged"] is False


def _with_logprobs(p_yes: float) -> object:
    import math

    from langchain_core.messages import AIMessage

    lp = {"content": [{"token": "yes" if p_yes >= 0.5 else "no", "logprob": 0.0, "top_logprobs": [
        {"token": "yes", "logprob": math.log(p_yes)}, {"token": "no", "logprob": math.log(1 - p_yes)}]}]}
    return AIMessage("yes" if p_yes >= 0.5 else "no", response_metadata={"logprobs": lp})


@pytest.mark.parametrize(("p_yes", "supported"), [(0.9, True), (0.2, False)])
def test_across_languages_the_model_judges_the_quote_when_asked_to(p_yes: float, supported: bool) -> None:
    llm = StructuredFake.of({"source": 2, "quote": "專業版的 P1 故障在 30 分鐘內響應", "answer": "30 分鐘"})
    llm.messages = iter([*llm.messages, _with_logprobs(p_yes)])
    question = "How fast are P1 incidents answered on the Professional plan?"
    verdict = EvidenceCheck(llm, judge="cross-language").check(question, DOCS, [SystemMessage("chunks")])
    assert verdict.supported is supported and verdict.judge == pytest.approx(p_yes)
    assert supported or "P(yes) 0.20" in verdict.reason


def test_by_default_the_judge_does_not_run_and_always_asks_it_for_every_quote() -> None:
    quote = {"source": 1, "quote": "The QL-7 drone carries a payload of 2.5 kilograms.", "answer": "2.5 kilograms"}
    question = "What payload does the QL-7 drone carry?"
    default = EvidenceCheck(StructuredFake.of(quote)).check(question, DOCS, [SystemMessage("chunks")])
    assert default.supported and default.judge is None
    cross = EvidenceCheck(StructuredFake.of({"source": 2, "quote": "專業版的 P1 故障在 30 分鐘內響應", "answer": "30 分鐘"})).check(
        "How fast are P1 incidents answered on the Professional plan?", DOCS, [SystemMessage("chunks")])
    assert cross.supported and cross.judge is None and cross.coverage is None
    llm = StructuredFake.of(quote)
    llm.messages = iter([*llm.messages, _with_logprobs(0.1)])
    always = EvidenceCheck(llm, judge="always").check(question, DOCS, [SystemMessage("chunks")])
    assert not always.supported and always.judge == pytest.approx(0.1)


def test_when_uncertain_a_yes_lets_a_low_coverage_quote_through_and_a_no_keeps_it_out() -> None:
    quote = {"source": 2, "quote": "專業版的 P1 故障在 30 分鐘內響應", "answer": "30 分鐘"}
    question = "黃鐵礦由鐵和哪一元素所構成？"  # the quote is about something else: coverage 0
    for p_yes, supported in ((0.9, True), (0.2, False)):
        llm = StructuredFake.of(quote)
        llm.messages = iter([*llm.messages, _with_logprobs(p_yes)])
        verdict = EvidenceCheck(llm, judge="uncertain", min_window=1.01).check(question, DOCS,
                                                                               [SystemMessage("chunks")])
        assert verdict.supported is supported and verdict.judge == pytest.approx(p_yes)
    never = EvidenceCheck(StructuredFake.of(quote), judge="never", min_window=1.01).check(
        question, DOCS, [SystemMessage("chunks")])
    assert not never.supported and never.judge is None


def test_a_short_answer_length_leaves_room_for_the_quote() -> None:
    from ctxrag.chains.evidence import QUOTE_MAX_TOKENS, _room_for_the_quote
    from ctxrag.models.llamacpp import LocalLlamaChatModel

    short = LocalLlamaChatModel(model_path="/nonexistent.gguf", max_tokens=48)  # never loaded here
    assert _room_for_the_quote(short).max_tokens == QUOTE_MAX_TOKENS and short.max_tokens == 48
    roomy = LocalLlamaChatModel(model_path="/nonexistent.gguf", max_tokens=512)
    assert _room_for_the_quote(roomy) is roomy


def test_a_quote_not_found_whose_own_words_no_chunk_holds_gets_no_fallback() -> None:
    # the model wrote an answer of its own: "30 秒" is in no chunk; a retrieved sentence holds the question's words,
    # but it must not stand in for an invented claim
    question = "專業版的 P1 故障多久響應？"
    invented = EvidenceQuote(source=2, quote="專業版的 P1 故障在 30 秒內響應，全年無休", answer="30 秒")
    denied = _check(min_window=0.5, min_quote_words=0.5).judge(question, DOCS, invented)
    assert not denied.supported and denied.found < 0.8 and denied.source == 0
    assert "adds to the question's are not in the retrieved chunks" in denied.reason
    off = _check(min_window=0.5).judge(question, DOCS, invented)
    assert off.supported  # off by default: the retrieved sentence stands in
    echoed = EvidenceQuote(source=2, quote="專業版的 P1 故障多久響應", answer="")  # repeats the question: no claim
    assert _check(min_window=0.5, min_quote_words=0.5).judge(question, DOCS, echoed).supported


def test_quote_words_held_counts_only_the_words_the_quote_adds() -> None:
    check = _check()
    assert check.quote_words_held("黃鐵礦由鐵和哪一元素所構成？", "黃鐵礦由鐵和硫構成", DOCS) == 1.0
    assert check.quote_words_held("黃鐵礦由鐵和哪一元素所構成？", "黃鐵礦由鐵和碳構成", DOCS) == 0.0
    assert check.quote_words_held("黃鐵礦由鐵和哪一元素所構成？", "黃鐵礦由鐵構成", DOCS) is None
    said_none = "The QL-7 drone's weight does not appear in the provided sources."
    assert check.quote_words_held("How much does the QL-7 drone weigh?", said_none, DOCS) == 0.0


def test_a_quote_longer_than_the_cap_is_cut_not_refused() -> None:
    # the grammar caps a local model's quote; an endpoint that ignores maxLength must not leave the question unjudged
    from ctxrag.chains.evidence import MAX_QUOTE_CHARS

    long = "The server listens on port 7420 by default, unless the settings file names another port."
    assert len(long) > MAX_QUOTE_CHARS
    reply = EvidenceQuote.model_validate({"source": 1, "quote": long})
    assert reply.quote == long[:MAX_QUOTE_CHARS]
    assert EvidenceQuote.model_json_schema()["properties"]["quote"]["maxLength"] == MAX_QUOTE_CHARS
    verdict = EvidenceCheck(None).judge(  # type: ignore[arg-type]
        "What port does the server listen on by default?", [Document(long)], reply)
    assert verdict.judged and verdict.supported and verdict.found == 1.0
