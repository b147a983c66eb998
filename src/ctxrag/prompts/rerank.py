"""Prompts for LLM reranking, filtering and extraction, in English and Chinese, plus how a chunk is shown to a reranker.

Written for small local models (Qwen2.5 0.5B): one short instruction, the answer format stated last, nothing to
copy from a long example. Every template takes ``{query}`` and ``{document}`` (listwise: ``{passages}`` and ``{n}``).

Example::

    from ctxrag.prompts.rerank import rerank_prompt
    prompt = rerank_prompt("yes_no", query="什么是RAG？")          # language picked from the query: Chinese
    prompt.format_messages(query="什么是RAG？", document="RAG 是检索增强生成。")
"""
from __future__ import annotations

from typing import Literal

from langchain_core.documents import Document
from langchain_core.prompts import ChatPromptTemplate

from ctxrag.schema import CONTEXT
from ctxrag.text import detect_language

PromptKind = Literal["yes_no", "grade", "listwise", "extract", "filter"]
Language = Literal["auto", "zh", "en"]

NO_OUTPUT = "NO_OUTPUT"
"""What the extractor answers when no sentence of the passage helps."""

_EN: dict[str, tuple[str, str]] = {
    "yes_no": (
        "You judge whether a passage helps answer a question. Reply with one word: yes or no.",
        "Question: {query}\n\nPassage:\n{document}\n\n"
        "Does the passage contain information that helps answer the question? Answer yes or no.",
    ),
    "grade": (
        "You rate how relevant a passage is to a question. Reply with a single number from 0 to 10.",
        "Question: {query}\n\nPassage:\n{document}\n\n"
        "Rate the relevance of the passage to the question from 0 (unrelated) to 10 (answers it directly). "
        "Reply with the number only.",
    ),
    "listwise": (
        # the example is the identity order (as in RankGPT): a small model that copies it changes nothing, while
        # "[2] > [1] > [3]" was copied verbatim by Qwen2.5 0.5B whatever the passages said
        "You rank passages by how well they answer a question.",
        "Question: {query}\n\nPassages:\n{passages}\n\n"
        "Rank the {n} passages above by their relevance to the question, most relevant first, using their numbers. "
        "The output format is [] > [], e.g. [1] > [2]. Reply only with the ranking.",
    ),
    "extract": (
        # passage first and the fallback before the cue: a 0.5B model answered NO_OUTPUT to everything when the
        # prompt ended with "If no sentence helps, reply NO_OUTPUT."
        "You copy sentences from a passage, word for word.",
        "Passage:\n{document}\n\nQuestion: {query}\n\n"
        "Copy the sentences of the passage that help answer the question, word for word. "
        f"If none of them helps, write {NO_OUTPUT} instead.\n\nSentences:",
    ),
    "filter": (
        "You judge whether a passage is relevant to a question. Reply with one word: yes or no.",
        "Question: {query}\n\nPassage:\n{document}\n\nIs the passage relevant to the question? Answer yes or no.",
    ),
}

_ZH: dict[str, tuple[str, str]] = {
    "yes_no": (
        "你负责判断一段文字是否有助于回答问题。只回答一个字：是 或 否。",
        "问题：{query}\n\n段落：\n{document}\n\n这段文字是否包含有助于回答该问题的信息？只回答“是”或“否”。",
    ),
    "grade": (
        "你负责给段落与问题的相关程度打分。只回答一个 0 到 10 之间的数字。",
        "问题：{query}\n\n段落：\n{document}\n\n"
        "请给这段文字与问题的相关程度打分，0 表示无关，10 表示直接回答了问题。只回答数字。",
    ),
    "listwise": (
        "你负责按照与问题的相关程度给段落排序。",
        "问题：{query}\n\n段落：\n{passages}\n\n"
        "请把上面的 {n} 个段落按与问题的相关程度从高到低排序，用编号表示，最相关的在前。"
        "输出格式为 [] > []，例如 [1] > [2]。只回答排序结果。",
    ),
    "extract": (
        "你负责从段落中逐字摘录句子。",
        "段落：\n{document}\n\n问题：{query}\n\n"
        f"请逐字摘录段落中有助于回答问题的句子。如果没有任何句子有帮助，就写 {NO_OUTPUT}。\n\n句子：",
    ),
    "filter": (
        "你负责判断一段文字是否与问题相关。只回答一个字：是 或 否。",
        "问题：{query}\n\n段落：\n{document}\n\n这段文字与问题相关吗？只回答“是”或“否”。",
    ),
}

_TEMPLATES = {"en": _EN, "zh": _ZH}


def prompt_language(language: Language | str, text: str) -> Literal["zh", "en"]:
    """The prompt language: ``zh``/``en`` as given, or detected from ``text`` (the query) when ``auto``."""
    if language == "auto":
        return detect_language(text)
    if language in ("zh", "en"):
        return language  # type: ignore[return-value]
    raise ValueError(f"unknown prompt language {language!r}; choose auto, zh or en")


def rerank_prompt(kind: PromptKind | str, language: Language | str = "auto", query: str = "") -> ChatPromptTemplate:
    """The chat prompt of one kind (yes_no, grade, listwise, extract, filter) in the given or detected language."""
    lang = prompt_language(language, query)
    table = _TEMPLATES[lang]
    if kind not in table:
        raise ValueError(f"unknown rerank prompt kind {kind!r}; choose one of: {', '.join(table)}")
    system, human = table[kind]
    return ChatPromptTemplate.from_messages([("system", system), ("human", human)])


def rerank_text(doc: Document, include_context: bool = True, max_chars: int | None = None) -> str:
    """The text a reranker or judge sees for a chunk: its contextual-retrieval context (if any) then the chunk.

    ``max_chars`` cuts long chunks so a small model's window holds the prompt.
    """
    context = doc.metadata.get(CONTEXT) if include_context else None
    text = f"{context}\n\n{doc.page_content}" if context else doc.page_content
    if max_chars is not None and len(text) > max_chars:
        text = text[:max_chars]
    return text


def numbered_passages(texts: list[str]) -> str:
    """``[1] first\\n[2] second`` for listwise prompts."""
    return "\n".join(f"[{i}] {' '.join(t.split())}" for i, t in enumerate(texts, start=1))
