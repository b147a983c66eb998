"""Subject-predicate-object triplets: robust parsing of LLM replies, LLM extraction at ingest, and import of
triplets extracted elsewhere (a JSON list of triplets per passage, or HippoRAG's OpenIE result file).

Example::

    from ctxrag.graph.triplets import parse_triplets, TripletExtractor
    parse_triplets('Sure! {"triplets": [["Euler", "student of", "Johann Bernoulli"],]}')
    # [Triplet(subject='Euler', predicate='student of', object='Johann Bernoulli')]
    extractor = TripletExtractor(llm=make_chat_model())        # any BaseChatModel
    extractor.extract("Leonhard Euler studied under Johann Bernoulli in Basel.")
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, Field

from ctxrag.errors import LoadError
from ctxrag.models.parsing import extract_json
from ctxrag.models.structured import structured_reply
from ctxrag.prompts.graph import Language, triplet_prompt
from ctxrag.stores.graph.triplet import Triplet, coerce_triplet, coerce_triplets

log = logging.getLogger(__name__)

_LIST_KEYS = ("triplets", "triples", "relations", "facts", "三元组")


class TripletList(BaseModel):
    """The extractor's reply (its structured-output schema): ``{"triplets": [[subject, predicate, object], ...]}``."""

    triplets: list[Annotated[list[str], Field(min_length=3, max_length=3)]]


def parse_triplets(reply: str) -> list[Triplet]:
    """Triplets from an LLM reply: JSON buried in prose or code fences, single quotes and trailing commas repaired.

    Accepts ``{"triplets": [...]}`` (or ``triples``/``relations``/``facts``), a bare list of triplets, or a single
    triplet object. Raises ValueError quoting the reply when it holds no JSON at all.
    """
    value = extract_json(reply)
    if isinstance(value, dict):
        for key in _LIST_KEYS:
            if isinstance(value.get(key), list):
                return coerce_triplets(value[key], where="LLM reply")
        single = coerce_triplet(value)
        return [single] if single else []
    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):
            single = coerce_triplet(value)  # one bare triplet
            return [single] if single else []
        return coerce_triplets(value, where="LLM reply")
    return []


class TripletExtractor:
    """Extracts triplets from a passage with a chat model, in the passage's language (Chinese or English).

    The reply is a `TripletList` through structured output (grammar-constrained on the local model); with
    ``structured=False``, or a model without structured output, JSON is parsed from its text (`parse_triplets`).
    A reply that holds no JSON is retried (the model is shown its reply and asked for JSON only) up to `max_retries`
    times; after that the passage gets no triplets and a warning is logged, so ingest never stops on a bad reply.

    Example::

        extractor = TripletExtractor(llm=make_chat_model(), max_retries=1)
        extractor("丹尼尔·伯努利是约翰·伯努利的儿子。")
    """

    def __init__(
        self, llm: BaseChatModel, *, max_retries: int = 1, max_chars: int = 2000, language: Language = "auto",
        structured: bool = True,
    ) -> None:
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if max_chars < 1:
            raise ValueError(f"max_chars must be >= 1, got {max_chars}")
        self.llm = llm
        self.max_retries = max_retries
        self.max_chars = max_chars
        self.language = language
        self.structured = structured
        self.failures = 0
        """Passages whose replies never parsed."""

    def extract(self, text: str) -> list[Triplet]:
        """The triplets of one passage ([] when the model never produced parseable JSON)."""
        passage = text[: self.max_chars]
        if not passage.strip():
            return []
        messages: list[BaseMessage] = triplet_prompt(self.language, passage).format_messages(passage=passage)
        reply = ""
        for attempt in range(self.max_retries + 1):
            answer = structured_reply(self.llm, TripletList, messages, structured=self.structured)
            if answer.parsed is not None:
                return coerce_triplets(answer.parsed.triplets, where="LLM reply")
            reply = answer.text
            try:
                return parse_triplets(reply)
            except ValueError:
                log.debug("triplet reply %d did not parse: %.200r", attempt + 1, reply)
                messages = [
                    *messages,
                    AIMessage(reply),
                    HumanMessage('That was not valid JSON. Reply only with {"triplets": [["subject", "predicate", "object"], ...]}.'),
                ]
        self.failures += 1
        log.warning("no triplets: %d replies without JSON for passage %.80r (last reply %.120r)",
                    self.max_retries + 1, passage, reply)
        return []

    def __call__(self, text: str) -> list[Triplet]:
        return self.extract(text)


def load_triplets_json(path: str | Path) -> list[list[Triplet]]:
    """Triplets per passage from a JSON file holding a list (one entry per passage) of lists of triplets.

    Each triplet is ``["s", "p", "o"]`` or ``{"subject":..., "predicate":..., "object":...}``; malformed ones are
    skipped with a warning. Raises `LoadError` when the file is missing, not JSON, or not a list of lists.
    """
    data = _read_json(path)
    if not isinstance(data, list) or not all(isinstance(x, list) for x in data):
        raise LoadError(path, "expected a JSON list with one list of triplets per passage")
    return [coerce_triplets(items, where=f"{path}[{i}]") for i, items in enumerate(data)]


def load_openie_file(path: str | Path) -> list[tuple[str, list[Triplet]]]:
    """``(passage, triplets)`` per document of a HippoRAG OpenIE result file (``{"docs": [{passage, extracted_triples}]}``),
    in file order. Triplets that are not exactly three strings are skipped with a warning."""
    data = _read_json(path)
    docs = data.get("docs") if isinstance(data, dict) else None
    if not isinstance(docs, list):
        raise LoadError(path, "expected an object with a 'docs' list (HippoRAG OpenIE format)")
    out: list[tuple[str, list[Triplet]]] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or "extracted_triples" not in doc:
            raise LoadError(path, f"docs[{i}] has no 'extracted_triples'")
        passage = doc.get("passage") or f"{doc.get('title', '')}\n{doc.get('text', '')}"
        out.append((passage, coerce_triplets(doc["extracted_triples"], where=f"{path} docs[{i}]")))
    return out


def _read_json(path: str | Path) -> Any:
    p = Path(path)
    if not p.is_file():
        raise LoadError(p, "no such file")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise LoadError(p, f"not valid JSON: {exc}") from exc
