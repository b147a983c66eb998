"""The hop request of the multi-hop answer chain (`ctxrag.chains.multihop.MultiHopAnswer`): given the question, the
facts kept from earlier hops and the passages this hop retrieved, the model replies as JSON with the fact the passages
add and either the answer or the next sub-question to search for. One version per language; the last hop's asks for
the best answer instead of a next question. Without a plan or notes (``bridge``), one request per hop asks for the
one name or fact still missing, a short search string, or the answer (`bridge_messages`). With decomposition, one request splits the question into simple
sub-questions up front (`plan_messages`) and one answers each from its own search results (`sub_answer_messages`).

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

PLAN = {
    "en": ("Split the question into the simple questions that answer it, in order, each asking for one fact. The "
           "first asks about a name the question gives; each later one writes #1, #2 for the answers of the earlier "
           "ones.\nExamples: \"Where was the author of Dune born?\" -> {{\"questions\": [\"Who is the author of "
           "Dune?\", \"Where was #1 born?\"]}}. \"What is the capital of the country where the director of Heat "
           "was born?\" -> {{\"questions\": [\"Who is the director of Heat?\", \"In which country was #1 born?\", "
           "\"What is the capital of #2?\"]}}.\n\nQuestion: {question}\nReply with JSON."),
    "zh": ("把问题拆成依次回答的简单问题，每个只问一条事实。第一个问题问题目中给出的名称；后面的问题用 #1、#2 指代前面问题的答案。\n"
           "例如：“《沙丘》的作者出生在哪里？” -> {{\"questions\": [\"《沙丘》的作者是谁？\", \"#1 出生在哪里？\"]}}。"
           "“《盗火线》导演出生的国家的首都是哪里？” -> {{\"questions\": [\"《盗火线》的导演是谁？\", \"#1 出生在哪个国家？\", "
           "\"#2 的首都是哪里？\"]}}。\n\n问题：{question}\n用 JSON 回复。"),
}

SUB_ANSWER = {
    "en": ("Search results:\n{passages}\n\nQuestion: {question}\n\nReply with JSON. \"answer\": the answer in a few "
           "words, copied from the search results (\"\" if they do not give it)."),
    "zh": ("检索结果：\n{passages}\n\n问题：{question}\n\n用 JSON 回复。\"answer\"：用几个词写出答案，从检索结果中抄写"
           "（结果中没有则为 \"\"）。"),
}

BRIDGE = {
    "en": ("Question: {question}\n\nSearched so far: {searched}\n\nSearch results:\n{passages}\n\n"
           "Reply with JSON. \"missing\": the one name or fact the question needs that the search results do not "
           "give yet, as a short search of a few words with the names the results give (\"\" if the results answer "
           "the question). \"answer\": the answer in a few words if the results give it; \"\" if not.\n"
           "Example: for \"Where was the author of Dune born?\" and the result \"Dune is a novel by Frank "
           "Herbert.\", reply {{\"missing\": \"Frank Herbert birthplace\", \"answer\": \"\"}}."),
    "zh": ("问题：{question}\n\n已检索：{searched}\n\n检索结果：\n{passages}\n\n"
           "用 JSON 回复。\"missing\"：回答问题还缺少、检索结果尚未给出的一个名称或事实，写成几个词的简短检索，用上结果中的名称"
           "（结果已能回答问题则为 \"\"）。\"answer\"：结果能给出答案时，用几个词写出答案；不能则为 \"\"。\n"
           "例如：问题“《沙丘》的作者出生在哪里？”，结果“《沙丘》是弗兰克·赫伯特的小说。”，"
           "回复 {{\"missing\": \"弗兰克·赫伯特 出生地\", \"answer\": \"\"}}。"),
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


def bridge_messages(question: str, searched: list[str], passages: str) -> list[BaseMessage]:
    """The request of one hop without a plan (`MultiHopAnswer.bridge`): ``searched`` the searches made so far,
    ``passages`` every search result read so far (numbered); the reply names the one thing still missing, or the
    answer."""
    lang = detect_language(question)
    listed = "; ".join(searched) or NO_FACTS[lang]
    text = BRIDGE[lang].format(question=question, searched=listed, passages=passages or NO_PASSAGES[lang])
    return [SystemMessage(SYSTEM[lang]), HumanMessage(text)]


def plan_messages(question: str) -> list[BaseMessage]:
    """The request that splits ``question`` into simple sub-questions (``#n`` names the answer of the n-th)."""
    lang = detect_language(question)
    return [SystemMessage(SYSTEM[lang]), HumanMessage(PLAN[lang].format(question=question))]


def sub_answer_messages(question: str, passages: str) -> list[BaseMessage]:
    """The request that answers one simple (sub-)question from ``passages`` (numbered search results) in a few
    words copied from them."""
    lang = detect_language(question)
    text = SUB_ANSWER[lang].format(question=question, passages=passages or NO_PASSAGES[lang])
    return [SystemMessage(SYSTEM[lang]), HumanMessage(text)]
