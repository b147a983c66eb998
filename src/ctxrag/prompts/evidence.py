"""The evidence request of the answer chain (`ctxrag.chains.evidence.EvidenceCheck`): before answering, the model
quotes the sentence that states the answer, as JSON (and, in the ``with_answer`` version, the short answer copied
from it), or says that no source states it. One version per language and
script (a Traditional Chinese question gets Traditional instructions, so the quote keeps the chunk's script).

Example::

    from ctxrag.prompts.evidence import evidence_instruction
    print(evidence_instruction("What port does Xinghe listen on?"))
"""
from __future__ import annotations

from ctxrag.text import detect_language, is_traditional_chinese

EVIDENCE = {
    "en": ("Question: {question}\n\nDo not answer yet. Find the sentence in the sources above that states the answer "
           "to this question. Reply with JSON: {{\"source\": the number of that source, \"quote\": that sentence "
           "copied word for word}}. If no source states the answer to this exact question, reply "
           "{{\"source\": 0, \"quote\": \"\"}}."),
    "zh": ("问题：{question}\n\n先不要回答。在上面的资料中找出写明这个问题答案的那句话。用 JSON 回复："
           "{{\"source\": 该资料的编号, \"quote\": 逐字抄写的那句话}}。如果没有任何资料写明这个问题的答案，回复 "
           "{{\"source\": 0, \"quote\": \"\"}}。"),
    "zh-hant": ("問題：{question}\n\n先不要回答。在上面的資料中找出寫明這個問題答案的那句話。用 JSON 回覆："
                "{{\"source\": 該資料的編號, \"quote\": 逐字抄寫的那句話}}。如果沒有任何資料寫明這個問題的答案，回覆 "
                "{{\"source\": 0, \"quote\": \"\"}}。"),
}

EVIDENCE_WITH_ANSWER = {
    "en": ("Question: {question}\n\nBefore answering, find the sentence in the sources above that states the answer "
           "to this question. Reply with JSON: {{\"source\": the number of that source, \"quote\": that sentence "
           "copied word for word, \"answer\": the answer in a few words copied from that sentence}}. If no source "
           "states the answer to this exact question, reply {{\"source\": 0, \"quote\": \"\", \"answer\": \"\"}}."),
    "zh": ("问题：{question}\n\n回答之前，先在上面的资料中找出写明这个问题答案的那句话。用 JSON 回复："
           "{{\"source\": 该资料的编号, \"quote\": 逐字抄写的那句话, \"answer\": 从那句话中抄出的简短答案}}。"
           "如果没有任何资料写明这个问题的答案，回复 {{\"source\": 0, \"quote\": \"\", \"answer\": \"\"}}。"),
    "zh-hant": ("問題：{question}\n\n回答之前，先在上面的資料中找出寫明這個問題答案的那句話。用 JSON 回覆："
                "{{\"source\": 該資料的編號, \"quote\": 逐字抄寫的那句話, \"answer\": 從那句話中抄出的簡短答案}}。"
                "如果沒有任何資料寫明這個問題的答案，回覆 {{\"source\": 0, \"quote\": \"\", \"answer\": \"\"}}。"),
}


def evidence_instruction(question: str, *, with_answer: bool = False) -> str:
    """The quote request for ``question``, in its language and script; ``with_answer``: the quote and then the short
    answer copied from it (`EVIDENCE_WITH_ANSWER`)."""
    lang = detect_language(question)
    key = "zh-hant" if lang == "zh" and is_traditional_chinese(question) else lang
    return (EVIDENCE_WITH_ANSWER if with_answer else EVIDENCE)[key].format(question=question)


JUDGE = {
    "en": ("Question: {question}\nSentence: {quote}\n\nDoes this sentence state the answer to this exact question? "
           "Reply yes or no."),
    "zh": "问题：{question}\n句子：{quote}\n\n这句话是否写明了这个问题的答案？只回答 yes 或 no。",
}


def judge_instruction(question: str, quote: str) -> str:
    """The yes/no request: does ``quote`` state the answer to ``question``?"""
    return JUDGE[detect_language(question)].format(question=question, quote=quote)
