"""Prompts for Graph RAG, in English and Chinese: triplet extraction at ingest, question-entity extraction and
relation reranking at query time (a one-shot prompt: reasoning first, then the useful relations as JSON).

The reranking prompt follows the method of Milvus's "Graph RAG with Milvus": the model sees numbered relation
sentences and returns ``{"thought_process": ..., "useful_relationships": ["[11] ...", ...]}``.

Example::

    from ctxrag.prompts.graph import triplet_prompt, relation_rerank_messages
    triplet_prompt("en").format_messages(passage="Leonhard Euler studied under Johann Bernoulli.")
    relation_rerank_messages("Who taught Euler?", ["Euler student of Johann Bernoulli"], top_n=3)
"""
from __future__ import annotations

from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate

from ctxrag.text import detect_language

Language = Literal["auto", "zh", "en"]

PROMPT_VERSION = "graph-1"

_TRIPLETS_EN = (
    "You extract knowledge-graph triplets from text. Reply with JSON only.",
    "Extract the facts of the passage as subject-predicate-object triplets. Use full names for people, places and "
    "things (never pronouns), keep each predicate short, and copy names as written in the passage.\n\n"
    'Example passage: "Marie Curie, born in Warsaw, won the Nobel Prize in Physics in 1903."\n'
    'Example reply: {{"triplets": [["Marie Curie", "born in", "Warsaw"], '
    '["Marie Curie", "won", "Nobel Prize in Physics"], ["Marie Curie", "won Nobel Prize in", "1903"]]}}\n\n'
    "Passage:\n{passage}\n\n"
    'Reply only with JSON of the form {{"triplets": [["subject", "predicate", "object"], ...]}}.',
)

_TRIPLETS_ZH = (
    "你从文本中抽取知识图谱三元组。只用 JSON 回答。",
    "把下面这段文字中的事实抽取为 主语-谓语-宾语 三元组。人名、地名和事物用全称（不要用代词），谓语尽量简短，"
    "名称照原文书写。\n\n"
    "示例文字：“居里夫人出生于华沙，1903年获得诺贝尔物理学奖。”\n"
    '示例回答：{{"triplets": [["居里夫人", "出生于", "华沙"], ["居里夫人", "获得", "诺贝尔物理学奖"], '
    '["居里夫人", "获奖年份", "1903年"]]}}\n\n'
    "文字：\n{passage}\n\n"
    '只用如下形式的 JSON 回答：{{"triplets": [["主语", "谓语", "宾语"], ...]}}',
)

_ENTITIES_EN = (
    "You find the named entities in a question. Reply with JSON only.",
    "List the named entities (people, places, organisations, works, things with a name) mentioned in the question, "
    "as written in it.\n\n"
    'Example question: "When was the mother of the leader of the Third Crusade born?"\n'
    'Example reply: {{"entities": ["Third Crusade"]}}\n\n'
    "Question: {question}\n\n"
    'Reply only with JSON of the form {{"entities": ["...", ...]}}.',
)

_ENTITIES_ZH = (
    "你找出问题中的命名实体。只用 JSON 回答。",
    "列出问题中提到的命名实体（人物、地点、组织、作品或其他有名称的事物），照问题中的写法。\n\n"
    "示例问题：“第三次十字军东征领袖的母亲是哪一年出生的？”\n"
    '示例回答：{{"entities": ["第三次十字军东征"]}}\n\n'
    "问题：{question}\n\n"
    '只用如下形式的 JSON 回答：{{"entities": ["...", ...]}}',
)

_RERANK_SYSTEM_EN = (
    "I will give you a question and a numbered list of relationship descriptions. Select the {top_n} relationships "
    "most useful for answering the question. Reply with a JSON object holding your thought process and the selected "
    "relationships, most relevant first."
)
_RERANK_SYSTEM_ZH = (
    "我会给你一个问题和一组编号的关系描述。请选出对回答问题最有用的 {top_n} 条关系。"
    "用一个 JSON 对象回答，包含你的思考过程和选出的关系，最相关的排在前面。"
)

_SHOT_QUESTION_EN = "When was the mother of the leader of the Third Crusade born?"
_SHOT_RELATIONS_EN = [
    "Eleanor born in 1122",
    "Eleanor married King Louis VII of France",
    "Eleanor was Duchess of Aquitaine",
    "Eleanor took part in the Second Crusade",
    "Eleanor mother of Richard the Lionheart",
    "Henry II father of Richard the Lionheart",
    "Richard the Lionheart King of England",
    "Richard the Lionheart led the Third Crusade",
]
_SHOT_ANSWER_EN = (
    '{"thought_process": "First find who led the Third Crusade: Richard the Lionheart [8]. Then his mother: '
    'Eleanor [5]. Then when Eleanor was born [1].", '
    '"useful_relationships": ["[8] Richard the Lionheart led the Third Crusade", '
    '"[5] Eleanor mother of Richard the Lionheart", "[1] Eleanor born in 1122"]}'
)
_SHOT_QUESTION_ZH = "第三次十字军东征领袖的母亲是哪一年出生的？"
_SHOT_RELATIONS_ZH = [
    "埃莉诺 出生于 1122年",
    "埃莉诺 嫁给 法国国王路易七世",
    "埃莉诺 是 阿基坦女公爵",
    "埃莉诺 母亲 狮心王理查",
    "亨利二世 父亲 狮心王理查",
    "狮心王理查 是 英格兰国王",
    "狮心王理查 领导 第三次十字军东征",
]
_SHOT_ANSWER_ZH = (
    '{"thought_process": "先找第三次十字军东征的领袖：狮心王理查 [7]。再找他的母亲：埃莉诺 [4]。最后找埃莉诺的出生年份 [1]。", '
    '"useful_relationships": ["[7] 狮心王理查 领导 第三次十字军东征", "[4] 埃莉诺 母亲 狮心王理查", "[1] 埃莉诺 出生于 1122年"]}'
)


def _pick(language: Language, text: str) -> Literal["zh", "en"]:
    if language == "auto":
        return detect_language(text)
    if language not in ("zh", "en"):
        raise ValueError(f"language must be 'auto', 'zh' or 'en', got {language!r}")
    return language


def triplet_prompt(language: Language = "en", text: str = "") -> ChatPromptTemplate:
    """Prompt taking ``{passage}``; with ``language="auto"`` the language is picked from `text`."""
    system, human = _TRIPLETS_ZH if _pick(language, text) == "zh" else _TRIPLETS_EN
    return ChatPromptTemplate.from_messages([("system", system), ("human", human)])


def entity_prompt(language: Language = "en", text: str = "") -> ChatPromptTemplate:
    """Prompt taking ``{question}``; returns ``{"entities": [...]}``."""
    system, human = _ENTITIES_ZH if _pick(language, text) == "zh" else _ENTITIES_EN
    return ChatPromptTemplate.from_messages([("system", system), ("human", human)])


def format_relations(relations: list[str]) -> str:
    """Number relation sentences ``[1] ...`` one per line, as the reranking prompt shows them."""
    return "\n".join(f"[{i}] {text}" for i, text in enumerate(relations, start=1))


def relation_rerank_messages(
    question: str, relations: list[str], *, top_n: int = 3, language: Language = "auto"
) -> list[BaseMessage]:
    """One-shot messages asking which of `relations` (numbered from 1) help answer `question`."""
    zh = _pick(language, question) == "zh"
    system = (_RERANK_SYSTEM_ZH if zh else _RERANK_SYSTEM_EN).format(top_n=top_n)
    q_label, r_label = ("问题：", "关系描述：") if zh else ("Question:", "Relationship descriptions:")
    shot_q, shot_r, shot_a = (
        (_SHOT_QUESTION_ZH, _SHOT_RELATIONS_ZH, _SHOT_ANSWER_ZH)
        if zh
        else (_SHOT_QUESTION_EN, _SHOT_RELATIONS_EN, _SHOT_ANSWER_EN)
    )

    def user(q: str, rels: list[str]) -> str:
        return f"{q_label}\n{q}\n\n{r_label}\n{format_relations(rels)}\n"

    return [
        SystemMessage(system),
        HumanMessage(user(shot_q, shot_r)),
        AIMessage(shot_a),
        HumanMessage(user(question, relations)),
    ]
