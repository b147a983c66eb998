"""Prompts of the assistant's background steps: document summaries (catalog, map-reduce), routing, follow-up
rewriting and the relevance check. Each has a Chinese and an English version; all are short because the default
model is a 0.5B one that reads slowly and follows long instructions badly.

Example::

    from ctxrag.prompts.router import router_messages
    router_messages("tell me a joke", catalog="[1] Deployment guide", selected=False, lang="en")
"""
from __future__ import annotations

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

SUMMARY = {
    "en": ("Summarise the document below in one or two sentences: what it is and what it covers. "
           "Reply with the summary only.\n\nTitle: {title}\n\n{text}"),
    "zh": "用一两句话概括下面这篇文档：它是什么、讲了哪些内容。只输出摘要。\n\n标题：{title}\n\n{text}",
}

MAP = {
    "en": "Summarise this part of the document \"{title}\" in two or three sentences. Reply with the summary only.\n\n{text}",
    "zh": "用两三句话概括文档《{title}》的这一部分。只输出摘要。\n\n{text}",
}

REDUCE = {
    "en": ("These are summaries of consecutive parts of the document \"{title}\". Merge them into one summary of at most "
           "four sentences. Reply with the summary only.\n\n{text}"),
    "zh": "下面是文档《{title}》各部分的摘要。把它们合并成不超过四句话的总摘要。只输出摘要。\n\n{text}",
}

ROUTER_SYSTEM = {
    "en": (
        "You route a user's message for a knowledge-base assistant. Reply with JSON only: "
        '{{"route": ROUTE, "reason": SHORT_REASON}}. ROUTE is one of:\n'
        '- "chat": small talk, jokes, greetings, creative writing, arithmetic — needs no documents;\n'
        '- "rag": a question asking for specific facts that the knowledge base below covers;\n'
        '- "no_knowledge": a question asking for facts that the knowledge base below does not cover;\n'
        '{summary_line}'
        "Knowledge base documents:\n{catalog}"
    ),
    "zh": (
        "你负责为知识库助手判断用户消息的类型。只输出 JSON："
        '{{"route": 类型, "reason": 简短理由}}。类型取值：\n'
        '- "chat"：闲聊、笑话、问候、写作、算术等，不需要文档；\n'
        '- "rag"：询问具体事实，且下面的知识库涉及这个主题；\n'
        '- "no_knowledge"：询问具体事实，但下面的知识库没有涉及这个主题；\n'
        '{summary_line}'
        "知识库文档：\n{catalog}"
    ),
}

ROUTER_SUMMARY_LINE = {
    "en": '- "summary": asks what the selected documents say as a whole, to summarise or compare them.\n',
    "zh": '- "summary"：要求概括、总结或比较用户选中的这些文档的整体内容。\n',
}

ROUTER_USER = {
    "en": "{selected}Message: {question}\nJSON:",
    "zh": "{selected}用户消息：{question}\nJSON：",
}

ROUTER_SELECTED = {
    "en": "The user selected these documents: {titles}\n",
    "zh": "用户选中了这些文档：{titles}\n",
}

REWRITE = {
    "en": ("Rewrite the last question so that it can be understood without the conversation: resolve pronouns and "
           "fill in the omitted subject. Reply with the rewritten question only.\n\nConversation:\n{history}\n\n"
           "Last question: {question}\nRewritten question:"),
    "zh": ("把最后一个问题改写成不依赖上下文也能看懂的完整问题：替换代词，补全省略的主语。只输出改写后的问题。\n\n"
           "对话：\n{history}\n\n最后一个问题：{question}\n改写后的问题："),
}

RELEVANCE = {
    "en": ("Passage:\n{passage}\n\nQuestion: {question}\nDoes the passage contain information that helps answer the "
           "question? Reply yes or no."),
    "zh": "资料：\n{passage}\n\n问题：{question}\n这段资料是否包含有助于回答问题的信息？只回答“是”或“否”。",
}

NO_KNOWLEDGE_NOTICE = {
    "en": "The knowledge base has no material on \"{question}\".",
    "zh": "知识库中没有关于“{question}”的资料。",
    "zh-hant": "知識庫中沒有關於「{question}」的資料。",
}


def summary_messages(title: str, text: str, lang: str) -> list[BaseMessage]:
    return [HumanMessage(SUMMARY[_l(lang)].format(title=title, text=text))]


def map_messages(title: str, text: str, lang: str) -> list[BaseMessage]:
    return [HumanMessage(MAP[_l(lang)].format(title=title, text=text))]


def reduce_messages(title: str, summaries: list[str], lang: str) -> list[BaseMessage]:
    text = "\n".join(f"- {s}" for s in summaries)
    return [HumanMessage(REDUCE[_l(lang)].format(title=title, text=text))]


def router_messages(question: str, *, catalog: str, selected: bool, lang: str,
                    selected_titles: list[str] | None = None) -> list[BaseMessage]:
    lng = _l(lang)
    system = ROUTER_SYSTEM[lng].format(summary_line=ROUTER_SUMMARY_LINE[lng] if selected else "",
                                       catalog=catalog or "-")
    sel = ROUTER_SELECTED[lng].format(titles="; ".join(selected_titles or [])) if selected else ""
    return [SystemMessage(system), HumanMessage(ROUTER_USER[lng].format(selected=sel, question=question))]


def rewrite_messages(question: str, history: str, lang: str) -> list[BaseMessage]:
    return [HumanMessage(REWRITE[_l(lang)].format(history=history, question=question))]


def relevance_messages(question: str, passage: str, lang: str) -> list[BaseMessage]:
    return [HumanMessage(RELEVANCE[_l(lang)].format(question=question, passage=passage))]


def _l(lang: str) -> str:
    if lang not in ("zh", "en"):
        raise ValueError(f"unknown prompt language {lang!r}; use 'zh' or 'en'")
    return lang
