"""The hop request of the multi-hop answer chain (`ctxrag.chains.multihop.MultiHopAnswer`): given the question, the
facts kept from earlier hops and the passages this hop retrieved, the model replies as JSON with the fact the passages
add and either the answer or the next sub-question to search for. One version per language; the last hop's asks for
the best answer instead of a next question.

Example::

    from ctxrag.prompts.multihop import hop_messages
    msgs = hop_messages("When was the singer of Hello born?", ["Hello is sung by Adele."],
                        "[2] Adele\\nAdele was born in 1988.", last=False)
    print(msgs[1].content)
"""
from __future__ import annotations

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from ctxrag.text import detect_language

SYSTEM = {
    "en": "You answer a question that needs several facts, one search at a time. Reply with JSON only.",
    "zh": "你要回答一个需要多条事实的问题，每次检索一步。只用 JSON 回复。",
}

HOP = {
    "en": ("Question: {question}\n\nFacts found so far:\n{facts}\n\nSearch results:\n{passages}\n\n"
           "Reply with JSON. \"fact\": copy the one sentence of the search results that helps answer the question "
           "(\"\" if none). \"next_question\": if the facts do not give the answer yet, the one simple question to "
           "search for next, with the names the facts give; \"\" if they do. \"answer\": if the facts give the "
           "answer, the answer in a few words; \"\" if not.\nExample: for \"Where was the author of Dune born?\" and "
           "the result \"Dune is a novel by Frank Herbert.\", reply {{\"fact\": \"Dune is a novel by Frank "
           "Herbert.\", \"next_question\": \"Where was Frank Herbert born?\", \"answer\": \"\"}}."),
    "zh": ("问题：{question}\n\n已找到的事实：\n{facts}\n\n检索结果：\n{passages}\n\n"
           "用 JSON 回复。\"fact\"：抄写检索结果中最有助于回答问题的一句话（没有则为 \"\"）。"
           "\"next_question\"：如果事实还不能给出答案，写下一步要检索的一个简单问题，用上事实中的名称；能给出则为 \"\"。"
           "\"answer\"：如果事实能给出答案，用几个词写出答案；不能则为 \"\"。\n例如：问题“《沙丘》的作者出生在哪里？”，"
           "结果“《沙丘》是弗兰克·赫伯特的小说。”，回复 {{\"fact\": \"《沙丘》是弗兰克·赫伯特的小说。\", "
           "\"next_question\": \"弗兰克·赫伯特出生在哪里？\", \"answer\": \"\"}}。"),
}

LAST_HOP = {
    "en": ("Question: {question}\n\nFacts found so far:\n{facts}\n\nSearch results:\n{passages}\n\n"
           "Reply with JSON. \"fact\": copy the one sentence of the search results that helps answer the question "
           "(\"\" if none). \"answer\": your best answer to the question in a few words, from the facts."),
    "zh": ("问题：{question}\n\n已找到的事实：\n{facts}\n\n检索结果：\n{passages}\n\n"
           "用 JSON 回复。\"fact\"：抄写检索结果中最有助于回答问题的一句话（没有则为 \"\"）。"
           "\"answer\"：根据这些事实，用几个词给出问题的最佳答案。"),
}

NO_FACTS = {"en": "(none yet)", "zh": "（暂无）"}
NO_PASSAGES = {"en": "(nothing new found)", "zh": "（没有新的结果）"}


def hop_messages(question: str, facts: list[str], passages: str, *, last: bool) -> list[BaseMessage]:
    """The request of one hop, in the question's language: ``facts`` kept so far, ``passages`` this hop's numbered
    search results (already formatted); ``last``: the final hop, which asks for the best answer."""
    lang = detect_language(question)
    listed = "\n".join(f"- {f}" for f in facts) or NO_FACTS[lang]
    text = (LAST_HOP if last else HOP)[lang].format(question=question, facts=listed,
                                                    passages=passages or NO_PASSAGES[lang])
    return [SystemMessage(SYSTEM[lang]), HumanMessage(text)]
