"""Evaluation datasets: a corpus, queries with their gold corpus ids, optional contexts; one adapter per published layout.
(Over 400 lines on purpose: the four adapters share the dataset type, the strict readers and the gold check.)

Adapters (``load_dataset(format, paths)`` picks one):

- ``anthropic``: Anthropic's contextual-retrieval folder (``codebase_chunks.json``, ``evaluation_set.jsonl``, optional
  ``contexts_*.jsonl``). Gold chunks are given as (document uuid, original_index). The cookbook's Pass@k compares the
  *stripped chunk text*, so chunks with identical text (licence headers) count as each other; the adapter records
  that in ``EvalDataset.equivalence`` (``match="id"`` turns it off).
- ``squad``: SQuAD-format files (several are pooled; Chinese CMRC/DRCD files work too): corpus = every paragraph,
  query = every question, gold = its own paragraph, answer = its first answer.
- ``beir``: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv`` (graded relevance kept for nDCG).
- ``musique``: the HippoRAG MuSiQue folder (``*_corpus.json`` + questions file): gold = supporting paragraphs.

Bad input fails early: a malformed JSONL line names file and line; gold ids missing from the corpus are collected in
``missing_gold`` (with a warning) instead of silently scoring as misses; a dataset without queries or corpus is an error.

One module (a little over 400 lines) on purpose: the four adapters share the dataset types, readers and gold checks,
and are easiest to compare side by side.

Example::

    from ctxrag.evaluation.datasets import load_dataset
    ds = load_dataset("anthropic", ["../shared/data/contextual-retrieval"])
    len(ds.corpus), len(ds.queries), ds.queries[0].gold_ids
"""
from __future__ import annotations

import csv
import hashlib
import json
import logging
import random
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ctxrag.errors import ConfigError, LoadError

log = logging.getLogger(__name__)

FORMATS = ("anthropic", "squad", "beir", "musique")


@dataclass
class CorpusItem:
    """One retrievable unit (a chunk or paragraph)."""

    id: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalQuery:
    """One question; ``gold_ids`` are corpus ids, ``relevance`` optional grades (BEIR qrels) for nDCG."""

    id: str
    text: str
    gold_ids: list[str]
    answer: str | None = None
    relevance: dict[str, float] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalDataset:
    """A corpus, queries and optional contexts (corpus id -> context text for contextual retrieval).

    ``equivalence`` maps corpus ids to a match key: ids with the same key count as the same item when scoring.
    ``missing_gold`` lists (query id, gold id) pairs whose gold id is not in the corpus; ``dropped_queries`` the
    queries left with no gold at all (they are not scored).
    """

    name: str
    corpus: dict[str, CorpusItem]
    queries: list[EvalQuery]
    contexts: dict[str, str] | None = None
    equivalence: dict[str, str] | None = None
    missing_gold: list[tuple[str, str]] = field(default_factory=list)
    dropped_queries: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        where = ", ".join(self.paths) or self.name
        if not self.corpus:
            raise LoadError(where, "empty dataset: the corpus has no items")
        if not self.queries:
            raise LoadError(where, "empty dataset: no queries with gold ids in the corpus")

    def fingerprint(self) -> str:
        """Hash of corpus ids and texts (cache key for indexes built over it)."""
        h = hashlib.sha256()
        for cid in sorted(self.corpus):
            h.update(cid.encode("utf-8") + b"\x00" + self.corpus[cid].text.encode("utf-8") + b"\x01")
        return h.hexdigest()[:16]

    def sample(self, n: int | None, seed: int = 0) -> EvalDataset:
        """The same corpus with ``n`` queries drawn at random (all when n is None or >= the count)."""
        if n is None or n >= len(self.queries):
            return self
        if n < 1:
            raise ConfigError(f"sample={n} must be >= 1")
        rng = random.Random(seed)
        picked = sorted(rng.sample(range(len(self.queries)), n))
        return replace(self, queries=[self.queries[i] for i in picked])

    def with_contexts(self, contexts: dict[str, str] | None) -> EvalDataset:
        """A copy carrying these contexts (ids not in the corpus are warned about and dropped)."""
        if contexts is None:
            return replace(self, contexts=None)
        unknown = [cid for cid in contexts if cid not in self.corpus]
        if unknown:
            warnings.warn(f"{len(unknown)} context ids are not in the corpus of {self.name} (e.g. {unknown[:3]})", stacklevel=2)
        return replace(self, contexts={k: v for k, v in contexts.items() if k in self.corpus})


# ---------------------------------------------------------------- readers


def read_json(path: Path) -> Any:
    """Parse a JSON file; errors name the file and the line."""
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise LoadError(path, "no such file") from None
    except UnicodeDecodeError as e:
        raise LoadError(path, f"not UTF-8 text ({e})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise LoadError(path, f"line {e.lineno}: invalid JSON: {e.msg}") from None


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) per non-blank line; a malformed line raises LoadError naming file and line."""
    path = Path(path)
    try:
        fh = open(path, encoding="utf-8-sig")
    except FileNotFoundError:
        raise LoadError(path, "no such file") from None
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise LoadError(path, f"line {lineno}: invalid JSON: {e.msg} (column {e.colno})") from None
            if not isinstance(obj, dict):
                raise LoadError(path, f"line {lineno}: expected a JSON object, got {type(obj).__name__}")
            yield lineno, obj


def _need(obj: dict[str, Any], key: str, path: Path, where: str) -> Any:
    if key not in obj:
        raise LoadError(path, f"{where}: missing field {key!r}")
    return obj[key]


def check_gold(name: str, corpus: dict[str, CorpusItem], queries: list[EvalQuery], paths: list[str],
               **kw: Any) -> EvalDataset:
    """Build the dataset, moving gold ids that are not in the corpus to ``missing_gold`` (warned, never scored)."""
    missing: list[tuple[str, str]] = []
    dropped: list[str] = []
    kept: list[EvalQuery] = []
    for q in queries:
        good = [g for g in dict.fromkeys(q.gold_ids) if g in corpus]
        missing.extend((q.id, g) for g in dict.fromkeys(q.gold_ids) if g not in corpus)
        if not good:
            dropped.append(q.id)
            continue
        rel = {g: v for g, v in q.relevance.items() if g in corpus} if q.relevance else q.relevance
        kept.append(replace(q, gold_ids=good, relevance=rel))
    if missing:
        msg = (f"{name}: {len(missing)} gold ids are not in the corpus (e.g. {missing[:3]}); "
               f"they are reported, not scored; {len(dropped)} queries had no gold left and are skipped")
        warnings.warn(msg, stacklevel=3)
        log.warning(msg)
    return EvalDataset(name=name, corpus=corpus, queries=kept, missing_gold=missing, dropped_queries=dropped,
                       paths=paths, **kw)


# ---------------------------------------------------------------- contexts


def load_contexts(path: Path, key_of: dict[tuple[str, int], str] | None = None) -> dict[str, str]:
    """Read a contexts JSONL: one ``{"chunk_id": ..., "context": ...}`` per line.

    With ``key_of`` (Anthropic layout), lines carrying ``original_uuid`` + ``original_index`` are matched by those.
    """
    out: dict[str, str] = {}
    for lineno, obj in read_jsonl(path):
        context = obj.get("context")
        if not isinstance(context, str):
            raise LoadError(path, f"line {lineno}: missing string field 'context'")
        cid: str | None = None
        if key_of is not None and "original_uuid" in obj and "original_index" in obj:
            cid = key_of.get((str(obj["original_uuid"]), int(obj["original_index"])))
        if cid is None:
            raw = obj.get("chunk_id", obj.get("id"))
            if raw is None:
                raise LoadError(path, f"line {lineno}: missing field 'chunk_id'")
            cid = str(raw)
        out[cid] = context
    if not out:
        raise LoadError(path, "empty contexts file")
    return out


# ---------------------------------------------------------------- anthropic


def load_anthropic(path: str | Path, contexts: str | Path | bool | None = None, match: str = "content") -> EvalDataset:
    """Anthropic's contextual-retrieval folder.

    ``contexts``: a contexts JSONL path, ``True`` for the first ``contexts*.jsonl`` in the folder, None/False for none.
    ``match``: ``"content"`` (cookbook: stripped text equality) or ``"id"`` ((uuid, index) identity only).
    """
    folder = Path(path)
    if folder.is_file():
        folder = folder.parent
    if match not in ("content", "id"):
        raise ConfigError(f"match={match!r}: choose 'content' or 'id'")
    chunks_path, queries_path = folder / "codebase_chunks.json", folder / "evaluation_set.jsonl"
    docs = read_json(chunks_path)
    if not isinstance(docs, list):
        raise LoadError(chunks_path, "expected a list of documents")
    corpus: dict[str, CorpusItem] = {}
    key_of: dict[tuple[str, int], str] = {}
    for i, doc in enumerate(docs):
        where = f"document {i}"
        uuid = str(_need(doc, "original_uuid", chunks_path, where))
        for ch in _need(doc, "chunks", chunks_path, where):
            index = int(_need(ch, "original_index", chunks_path, where))
            cid = str(ch.get("chunk_id") or f"{uuid}_{index}")
            text = str(_need(ch, "content", chunks_path, f"{where} chunk {index}"))
            corpus[cid] = CorpusItem(cid, text, {"doc_id": doc.get("doc_id", uuid), "original_uuid": uuid,
                                                 "original_index": index})
            key_of[(uuid, index)] = cid
    queries: list[EvalQuery] = []
    for lineno, obj in read_jsonl(queries_path):
        gold: list[str] = []
        for pair in _need(obj, "golden_chunk_uuids", queries_path, f"line {lineno}"):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise LoadError(queries_path, f"line {lineno}: golden chunk {pair!r} is not [doc_uuid, index]")
            gold.append(key_of.get((str(pair[0]), int(pair[1])), f"{pair[0]}_{pair[1]}"))
        queries.append(EvalQuery(f"q{lineno}", str(_need(obj, "query", queries_path, f"line {lineno}")), gold,
                                 answer=obj.get("answer")))
    equivalence = None
    if match == "content":
        equivalence = {cid: hashlib.sha256(item.text.strip().encode("utf-8")).hexdigest()
                       for cid, item in corpus.items()}
    ds = check_gold("anthropic", corpus, queries, [str(folder)], equivalence=equivalence)
    if contexts is True:
        found = sorted(folder.glob("contexts*.jsonl"))
        if not found:
            raise LoadError(folder, "no contexts*.jsonl file in the folder")
        contexts = found[0]
    if contexts:
        ds = ds.with_contexts(load_contexts(Path(contexts), key_of))
        ds.extra["contexts_file"] = str(contexts)
    ds.extra["key_of"] = key_of
    return ds


def anthropic_contexts_file(path: str | Path) -> Path | None:
    """The contexts file shipped in an Anthropic-layout folder (``contexts_*.jsonl``), if any."""
    folder = Path(path)
    folder = folder.parent if folder.is_file() else folder
    found = sorted(folder.glob("contexts*.jsonl"))
    return found[0] if found else None


# ---------------------------------------------------------------- squad


def load_squad(paths: Sequence[str | Path]) -> EvalDataset:
    """SQuAD-format files pooled: every paragraph is a corpus item, every question a query whose gold is its paragraph."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    corpus: dict[str, CorpusItem] = {}
    queries: list[EvalQuery] = []
    seen_q: set[str] = set()
    for fi, p in enumerate(paths):
        path = Path(p)
        data = read_json(path)
        articles = data.get("data") if isinstance(data, dict) else None
        if not isinstance(articles, list):
            raise LoadError(path, "not SQuAD format: expected a top-level object with a 'data' list")
        for ai, art in enumerate(articles):
            title = str(art.get("title", ""))
            for pi, para in enumerate(_need(art, "paragraphs", path, f"data[{ai}]")):
                where = f"data[{ai}].paragraphs[{pi}]"
                pid = f"{fi}:{ai}:{pi}"
                corpus[pid] = CorpusItem(pid, str(_need(para, "context", path, where)),
                                         {"title": title, "source": str(path), "doc_id": f"{fi}:{ai}"})
                for qi, qa in enumerate(para.get("qas", [])):
                    qid = str(qa.get("id", f"{pid}:{qi}"))
                    if qid in seen_q:
                        qid = f"{fi}:{qid}"
                    seen_q.add(qid)
                    answers = [a.get("text") for a in qa.get("answers", []) if isinstance(a, dict) and a.get("text")]
                    queries.append(EvalQuery(qid, str(_need(qa, "question", path, f"{where}.qas[{qi}]")), [pid],
                                             answer=answers[0] if answers else None,
                                             metadata={"answers": answers}))
    return check_gold("squad", corpus, queries, [str(p) for p in paths])


# ---------------------------------------------------------------- beir


def load_beir(path: str | Path, split: str = "test") -> EvalDataset:
    """A BEIR folder: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``),
    ``qrels/<split>.tsv`` (``query-id corpus-id score``, header optional). Queries without qrels are left out."""
    folder = Path(path)
    corpus_path, queries_path, qrels_path = folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels" / f"{split}.tsv"
    corpus: dict[str, CorpusItem] = {}
    for lineno, obj in read_jsonl(corpus_path):
        cid = str(_need(obj, "_id", corpus_path, f"line {lineno}"))
        title, text = str(obj.get("title") or ""), str(_need(obj, "text", corpus_path, f"line {lineno}"))
        corpus[cid] = CorpusItem(cid, f"{title}\n{text}" if title else text, {"title": title})
    qtext: dict[str, str] = {}
    for lineno, obj in read_jsonl(queries_path):
        qtext[str(_need(obj, "_id", queries_path, f"line {lineno}"))] = str(_need(obj, "text", queries_path, f"line {lineno}"))
    if not qrels_path.is_file():
        raise LoadError(qrels_path, f"no qrels file for split {split!r}")
    qrels: dict[str, dict[str, float]] = {}
    with open(qrels_path, encoding="utf-8", newline="") as fh:
        for lineno, row in enumerate(csv.reader(fh, delimiter="\t"), start=1):
            if not row or not "".join(row).strip():
                continue
            if lineno == 1 and row[0].strip().lower() in ("query-id", "query_id", "qid"):
                continue
            if len(row) < 3:
                raise LoadError(qrels_path, f"line {lineno}: expected 3 tab-separated fields, got {row!r}")
            try:
                score = float(row[2])
            except ValueError:
                raise LoadError(qrels_path, f"line {lineno}: score {row[2]!r} is not a number") from None
            qrels.setdefault(row[0].strip(), {})[row[1].strip()] = score
    queries: list[EvalQuery] = []
    for qid, rel in qrels.items():
        if qid not in qtext:
            raise LoadError(qrels_path, f"query id {qid!r} is not in {queries_path.name}")
        positive = {c: s for c, s in rel.items() if s > 0}
        if positive:
            queries.append(EvalQuery(qid, qtext[qid], list(positive), relevance=positive))
    return check_gold(f"beir:{folder.name}", corpus, queries, [str(folder)])


# ---------------------------------------------------------------- musique


def load_musique(path: str | Path) -> EvalDataset:
    """The HippoRAG MuSiQue folder: corpus from ``*_corpus.json`` (``title``, ``text``), questions from the other
    ``musique*.json``; gold = paragraphs with ``is_supporting``, matched by ``title + "\\n" + text``.
    ``extra["openie_file"]`` points at the OpenIE triplets file when present (for the graph retriever)."""
    folder = Path(path)
    folder = folder.parent if folder.is_file() else folder
    corpus_files = sorted(folder.glob("*_corpus.json"))
    if not corpus_files:
        raise LoadError(folder, "no *_corpus.json file (MuSiQue layout)")
    corpus_path = corpus_files[0]
    questions_path = corpus_path.with_name(corpus_path.name.replace("_corpus.json", ".json"))
    corpus: dict[str, CorpusItem] = {}
    id_of: dict[str, str] = {}
    items = read_json(corpus_path)
    if not isinstance(items, list):
        raise LoadError(corpus_path, "expected a list of {title, text}")
    for i, item in enumerate(items):
        title, text = str(_need(item, "title", corpus_path, f"item {i}")), str(_need(item, "text", corpus_path, f"item {i}"))
        key = f"{title}\n{text}"
        cid = f"p{i}"
        corpus[cid] = CorpusItem(cid, key, {"title": title, "index": i})
        id_of.setdefault(key, cid)
    questions = read_json(questions_path)
    if not isinstance(questions, list):
        raise LoadError(questions_path, "expected a list of questions")
    queries: list[EvalQuery] = []
    for i, q in enumerate(questions):
        gold = []
        for para in _need(q, "paragraphs", questions_path, f"question {i}"):
            if para.get("is_supporting"):
                key = f"{para.get('title', '')}\n{para.get('paragraph_text', '')}"
                gold.append(id_of.get(key, f"missing:{para.get('title', '')}"))
        queries.append(EvalQuery(str(q.get("id", i)), str(_need(q, "question", questions_path, f"question {i}")), gold,
                                 answer=q.get("answer"), metadata={"answer_aliases": q.get("answer_aliases", [])}))
    ds = check_gold("musique", corpus, queries, [str(folder)])
    openie = sorted(folder.glob("openie_*.json"))
    if openie:
        ds.extra["openie_file"] = str(openie[0])
    return ds


def load_dataset(format: str, paths: Sequence[str | Path] | str | Path, **kw: Any) -> EvalDataset:
    """Load ``paths`` with the adapter named ``format`` (one of FORMATS); ``kw`` go to the adapter."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    fmt = str(format).strip().lower()
    if fmt not in FORMATS:
        raise ConfigError(f"unknown dataset format {format!r}; choose one of: {', '.join(FORMATS)}")
    if not paths:
        raise ConfigError(f"--format {fmt} needs at least one path")
    for p in paths:
        if not Path(p).exists():
            raise LoadError(p, "no such file or folder")
    if fmt == "squad":
        return load_squad(paths, **kw)
    if len(paths) != 1:
        raise ConfigError(f"--format {fmt} takes one folder, got {len(paths)} paths")
    loaders: dict[str, Callable[..., EvalDataset]] = {"anthropic": load_anthropic, "beir": load_beir,
                                                      "musique": load_musique}
    loader = loaders[fmt]
    return loader(paths[0], **kw)
