"""`BM25Index`: tokenize -> index -> score -> top-k, incremental and exact.

(Over 400 lines on purpose: the index's postings, cached weights and save/load are one data structure.)

Corpus statistics (document count, total length, per-term document frequency) are kept exact under add and
delete; per-posting weights are cached per column until the next change (see `weights`) and idf is applied at query
time (see `scoring`), so an index built in many batches with deletions in between scores exactly like one built once
from the surviving documents. Queries are evaluated by `query` (exact top-k with MaxScore pruning).
"""
from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ctxrag.errors import ConfigError, IndexCorruptError
from ctxrag.stores.bm25 import storage
from ctxrag.stores.bm25.doc_keys import DocKeys
from ctxrag.stores.bm25.query import SEEDS_PER_TERM, Accumulator, TermColumn, top_k_slots
from ctxrag.stores.bm25.scoring import BM25Params, absent_term_score, length_norm, term_idf
from ctxrag.stores.bm25.blocks import INDEX_DTYPE, PostingsBlock, merge_blocks
from ctxrag.stores.bm25.tokenize import CALLABLE_TOKENIZER, Tokenizer, make_tokenizer, tokenizer_config
from ctxrag.stores.bm25.weights import BlockWeights
from ctxrag.stores.engine.mapped import MappedFile

if TYPE_CHECKING:
    import scipy.sparse as sp  # merging only: opening and searching an index never load scipy

FORMAT = "ctxrag-bm25"
FORMAT_VERSION = 2
"""2: caller-given ids are arrays in ``bm25.npz`` (1: a JSON list in ``bm25.json``; still read)."""
READ_VERSIONS = (1, 2)
MANIFEST = "bm25.json"
ARRAYS = "bm25.npz"
_BATCH_DOCS = 100_000  # documents tokenised into ids per step: bounds the peak memory of a large build
_MAX_BLOCKS = 32


class BM25Index:
    """A BM25 index over texts (or pre-tokenised documents) with exact incremental add/delete.

    Scores equal rank_bm25's (`BM25Okapi`, `BM25Plus`, `BM25L`) for the same tokens. `search` returns the best
    `k` documents that contain at least one query term, best first, ties broken by insertion order.

    Example::

        >>> index = BM25Index(tokenizer="english")
        >>> index.add(["the cat sat", "a dog barked", "cats and dogs"], ids=["a", "b", "c"])
        >>> [doc_id for doc_id, _ in index.search("dog", k=2)]
        ['b']
        >>> index.delete(["b"])
        1
        >>> len(index)
        2
    """

    def __init__(
        self,
        tokenizer: str | dict[str, Any] | Tokenizer = "mixed",
        variant: str = "okapi",
        *,
        k1: float | None = None,
        b: float | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        show_progress: bool = True,
        **tokenizer_options: Any,
    ) -> None:
        self.tokenizer = make_tokenizer(tokenizer, **tokenizer_options)
        self.params = BM25Params.for_variant(variant, k1=k1, b=b, epsilon=epsilon, delta=delta)
        self.show_progress = show_progress
        self._vocab: dict[str, int] = _Vocabulary()
        self._df = np.zeros(0, dtype=np.int64)
        self._blocks: list[PostingsBlock] = []
        self._doc_len = np.zeros(0, dtype=np.int64)
        self._live = np.zeros(0, dtype=bool)
        self._keys = DocKeys()
        self._n_live = 0
        self._total_len = 0
        self._idf: np.ndarray | None = None  # per term, recomputed lazily after a change
        self._weights: list[BlockWeights] | None = None  # per block, filled per column on first use
        self._accumulator = Accumulator()
        self._mapped: MappedFile | None = None  # the .npz whose postings are memory-mapped (checked before a query)
        self._given: tuple[np.ndarray, float] | None = None  # (idf, avgdl) of a larger corpus: use_statistics

    # ---- building -------------------------------------------------------------------------------------------
    def add(self, texts: Sequence[str], ids: Sequence[str] | None = None) -> None:
        """Tokenise and add documents; a given id already in the index is replaced."""
        if isinstance(texts, str):
            raise ValueError("add() takes a list of texts, not one string")
        from tqdm.auto import tqdm  # building only: opening and searching an index never load it

        tokens = [self.tokenizer(t) for t in tqdm(texts, desc="bm25 tokenize", disable=not self._progress(len(texts)))]
        self.add_tokens(tokens, ids)

    def add_tokens(self, documents: Sequence[Sequence[str]], ids: Sequence[str] | None = None) -> None:
        """Add already tokenised documents (lists of tokens); a given id already in the index is replaced."""
        if ids is not None:
            if len(set(ids)) != len(ids):
                dup = next(k for k, c in Counter(ids).items() if c > 1)
                raise ValueError(f"duplicate document id {dup!r} in one add() call")
            self.delete(ids)
        n = len(documents)
        if n == 0:
            return
        self._keys.append(ids, n)
        steps = range(0, n, _BATCH_DOCS)
        from tqdm.auto import tqdm

        for start in tqdm(steps, desc="bm25 index", disable=not self._progress(n)):
            self._append_block(documents[start : start + _BATCH_DOCS])

    def _append_block(self, documents: Sequence[Sequence[str]]) -> None:
        vocab = self._vocab
        lengths = np.fromiter(map(len, documents), dtype=np.int64, count=len(documents))
        flat = list(chain.from_iterable(documents))
        # one C-level pass; unseen tokens get the next id through _Vocabulary.__missing__
        term_ids = np.fromiter(map(vocab.__getitem__, flat), dtype=INDEX_DTYPE, count=len(flat))
        del flat
        if len(vocab) > len(self._df):
            self._df = np.concatenate([self._df, np.zeros(len(vocab) - len(self._df), dtype=np.int64)])
        block = PostingsBlock.from_token_ids(term_ids, lengths, len(vocab))
        self._df += np.diff(block.indptr)
        self._blocks.append(block)
        self._doc_len = np.concatenate([self._doc_len, lengths])
        self._live = np.concatenate([self._live, np.ones(len(documents), dtype=bool)])
        self._n_live += len(documents)
        self._total_len += int(lengths.sum())
        self._merge_small_blocks()
        self._changed()

    def _merge_small_blocks(self) -> None:
        # binary-counter policy: merge while the newer block is at least as large as the older one,
        # so there are O(log n) blocks and each posting is copied O(log n) times in total
        blocks = self._blocks
        while len(blocks) > 1 and (blocks[-2].nnz <= blocks[-1].nnz or len(blocks) > _MAX_BLOCKS):
            blocks[-2:] = [merge_blocks(blocks[-2:], len(self._vocab))]

    def delete(self, ids: Iterable[str]) -> int:
        """Remove documents by id; unknown ids are ignored. Returns how many were removed."""
        ids = list(ids)
        if not ids or self._keys.explicit is None:
            return 0
        slots = self._keys.slots_of(ids)
        slots = np.unique(slots[self._live[slots]])
        if len(slots) == 0:
            return 0
        dead = np.zeros(len(self._live), dtype=bool)
        dead[slots] = True
        offset = 0
        for block in self._blocks:
            rows = dead[offset : offset + block.n_docs]
            if rows.any():
                self._df -= block.term_doc_counts(rows, len(self._df))
            offset += block.n_docs
        self._live[slots] = False
        self._keys.forget(slots)
        self._n_live -= len(slots)
        self._total_len -= int(self._doc_len[slots].sum())
        if (len(self._live) - self._n_live) * 4 > len(self._live):
            self.compact()
        self._changed()
        return len(slots)

    def compact(self) -> None:
        """Drop deleted documents from memory (scores do not change; slots are renumbered)."""
        keep = self._live
        if keep.all():
            return
        offset, blocks = 0, []
        for block in self._blocks:
            rows = keep[offset : offset + block.n_docs]
            offset += block.n_docs
            if rows.any():
                blocks.append(block.compacted(rows))
        self._blocks = [merge_blocks(blocks, len(self._vocab))] if blocks else []
        self._doc_len = self._doc_len[keep]
        self._keys.compact(keep)
        self._live = np.ones(len(self._doc_len), dtype=bool)
        self._changed()

    def consolidate(self) -> None:
        """Merge the postings blocks into one (same slots, same scores and ties): for an index that is searched
        many times and not appended to (a sealed segment, see `ctxrag.stores.bm25.segmented`), since a query reads
        each of its terms once per block. Statistics given by `use_statistics` stay."""
        if len(self._blocks) > 1:
            self._blocks = [merge_blocks(self._blocks, len(self._vocab))]
            self._idf = self._weights = None  # posting weights are cached per block

    def fork(self) -> BM25Index:
        """A copy to delete from without changing this index (a sealed segment in the next generation, see
        `ctxrag.stores.engine.segments`): postings, lengths and vocabulary are shared (never changed in place; adding to
        the copy is not supported), counts and the live mask are copied."""
        out = copy.copy(self)
        out._df, out._live = self._df.copy(), self._live.copy()
        out._keys = self._keys.fork()
        out._blocks = list(self._blocks)
        out._accumulator = Accumulator()
        out._idf = out._weights = None
        out._given = None
        return out

    def _changed(self) -> None:
        # idf and avgdl moved: every cached weight is stale (they are refilled per column as queries need them)
        self._idf = self._weights = None
        self._given = None

    def use_statistics(self, idf: np.ndarray, avgdl: float) -> None:
        """Score with the statistics of a larger corpus this index is one segment of: `idf` per term id of this
        index, `avgdl` the corpus's average length (see `ctxrag.stores.bm25.segmented`). The next add or delete
        drops them."""
        if len(idf) != len(self._vocab):
            raise ValueError(f"idf has {len(idf)} entries, the vocabulary {len(self._vocab)} terms")
        self._changed()
        self._given = (idf, avgdl)

    @property
    def vocabulary(self) -> dict[str, int]:
        """Token -> term id, in term-id order (read-only by convention)."""
        return self._vocab

    @property
    def document_frequencies(self) -> np.ndarray:
        """Live documents containing each term, by term id."""
        return self._df

    @property
    def total_length(self) -> int:
        """Tokens in the live documents."""
        return self._total_len

    def _progress(self, n: int) -> bool:
        return self.show_progress and n >= 200_000

    # ---- querying -------------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n_live

    def __contains__(self, doc_id: object) -> bool:
        if not isinstance(doc_id, str) or self._keys.explicit is None:
            return False
        slots = self._keys.slots_of([doc_id])
        return bool(len(slots)) and bool(self._live[slots[0]])

    @property
    def ids(self) -> list[str]:
        """Ids of the live documents, in insertion order (the order of `get_scores`)."""
        return self._keys.keys(np.flatnonzero(self._live))

    def iter_ids(self, block: int = 1024) -> Iterator[str]:
        """`ids` lazily, decoded `block` ids at a time (a zero-score fill reads only the first few of a large index)."""
        live = np.flatnonzero(self._live)
        for start in range(0, len(live), block):
            yield from self._keys.keys(live[start : start + block])

    def tokenize_query(self, query: str | Sequence[str]) -> list[str]:
        """Query tokens: a string goes through the index's tokenizer, a list of tokens is taken as is."""
        if isinstance(query, str):
            return self.tokenizer(query)
        return list(query)

    def get_scores(self, query: str | Sequence[str]) -> np.ndarray:
        """Score of every live document, in `ids` order (as rank_bm25's `get_scores`)."""
        if self._mapped is not None:
            self._mapped.check()
        columns, constant = self._columns(self.tokenize_query(query))
        scores = np.zeros(len(self._live))
        for column in columns:
            for offset, rows, weights in column.parts:
                scores[offset + rows.astype(np.int64)] += column.contribution(weights)
        return (scores + constant)[self._live]

    def search(
        self, query: str | Sequence[str], k: int = 10, allowed_ids: Iterable[str] | None = None, *, fill: bool = False,
        constant: bool = True,
    ) -> list[tuple[str, float]]:
        """Best `k` documents containing a query term, as ``(id, score)``, best first.

        `allowed_ids` restricts the result to those documents (a metadata filter, applied before the cut); unknown
        ids are ignored. A query with no indexed term (empty, only stopwords, unseen words) returns ``[]``, unless
        `fill`: then documents without a query term follow, in index order, with the score a document without any
        query term gets (0 for Okapi), up to `k` (LangChain's `BM25Retriever` also always returns k). Without
        `constant` scores leave out that floor (BM25+'s ``idf * delta`` per query term; a segment's caller adds
        the corpus's own).
        """
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        allowed = None
        if allowed_ids is not None:
            allowed = np.zeros(len(self._live), dtype=bool)
            allowed[self._keys.slots_of(list(allowed_ids))] = True
        tokens = self.tokenize_query(query)
        slots, scores = self.search_slots(tokens, k, allowed, constant=constant)
        if fill and len(slots) < k:
            slots, scores = self._fill(tokens, slots, scores, k, allowed)
        return list(zip(self._keys.keys(slots), scores.tolist()))

    def _fill(
        self, tokens: Sequence[str], slots: np.ndarray, scores: np.ndarray, k: int, allowed: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Append live (and allowed) slots not in `slots`, in slot order, up to `k`."""
        free = self._live.copy()
        if allowed is not None:
            free &= allowed
        free[slots] = False
        extra = np.flatnonzero(free)[: k - len(slots)]
        _, constant = self._columns(list(tokens))  # BM25+/BM25L give every document a floor; Okapi 0
        return (np.concatenate([slots, extra]).astype(np.int64),
                np.concatenate([scores, np.full(len(extra), constant, dtype=float)]))

    def search_slots(
        self, tokens: Sequence[str], k: int, allowed: np.ndarray | None = None, *, constant: bool = True
    ) -> tuple[np.ndarray, np.ndarray]:
        """`search` on tokens, returning slots and scores as arrays; `allowed` is a bool mask over slots."""
        if k <= 0:
            raise ValueError(f"k must be positive, got {k}")
        if self._mapped is not None:
            self._mapped.check()  # postings truncated under the mapping: a named error, not SIGBUS
        columns, floor = self._columns(tokens)
        if not columns:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        eligible = self._live if allowed is None else self._live & allowed
        slots, scores = top_k_slots(columns, k, eligible, self._accumulator)
        return slots, (scores + floor if constant else scores)

    def _columns(self, tokens: Sequence[str]) -> tuple[list[TermColumn], float]:
        """The query's terms as columns over every block, and what every document scores regardless of its
        terms (BM25+'s ``idf * delta`` per query term, else 0)."""
        terms = self._query_terms(tokens)
        if not terms:
            return [], 0.0
        idf, weights = self._statistics()
        constant = 0.0
        columns = []
        for term, count in terms:
            # a repeated query token counts once per repetition, as in rank_bm25
            constant += absent_term_score(float(idf[term]) * count, self.params)
            parts, best, seeds = [], 0.0, []
            offset = 0
            for block, block_weights in zip(self._blocks, weights):
                rows, values, top = block_weights.column(term)
                if len(rows):
                    parts.append((offset, rows, values))
                    best = max(best, top)
                    seeds.append(block_weights.best_rows(term, SEEDS_PER_TERM).astype(np.int64) + offset)
                offset += block.n_docs
            columns.append(TermColumn(parts, float(count), best, positive=bool(idf[term] > 0),
                                      seeds=np.concatenate(seeds) if seeds else None))
        return columns, constant

    def _query_terms(self, tokens: Sequence[str]) -> list[tuple[int, int]]:
        if isinstance(tokens, str):
            raise ValueError("tokens must be a list of strings; pass a str query to search() instead")
        out = []
        for token, count in Counter(tokens).items():
            term = self._vocab.get(token)
            if term is not None and self._df[term] > 0:
                out.append((term, count))
        return out

    def _statistics(self) -> tuple[np.ndarray, list[BlockWeights]]:
        """idf per term and the (lazily filled) posting weights per block, rebuilt after a change."""
        if self._idf is None or self._weights is None:
            if self._given is not None:
                idf, avgdl = self._given
            else:
                present = self._df > 0
                idf = np.zeros(len(self._df))
                idf[present] = term_idf(self._df[present], self._n_live, self.params)
                avgdl = self._total_len / self._n_live if self._n_live else 0.0
            norm = length_norm(self._doc_len, avgdl, self.params) if avgdl > 0 else np.ones(len(self._doc_len))
            weights, offset = [], 0
            for block in self._blocks:
                weights.append(BlockWeights(block, norm[offset : offset + block.n_docs], idf, self.params))
                offset += block.n_docs
            self._idf, self._weights = idf, weights
        return self._idf, self._weights

    # ---- merging ----------------------------------------------------------------------------------------------
    def live_postings(self) -> tuple[sp.csr_matrix, np.ndarray, list[str]]:
        """The live documents as a (documents x terms) matrix of term frequencies, their lengths and ids, in
        insertion order (columns are this index's term ids, see `vocabulary`)."""
        import scipy.sparse as sp

        n_terms = len(self._vocab)
        if not self._blocks:
            return sp.csr_matrix((0, n_terms), dtype=np.int64), np.zeros(0, dtype=np.int64), []
        matrix = sp.vstack([b.to_scipy(n_terms) for b in self._blocks], format="csr")
        return matrix[np.flatnonzero(self._live)], self._doc_len[self._live], self.ids

    def with_postings(self, matrix: sp.csr_matrix, doc_len: np.ndarray, ids: list[str], vocab: list[str]) -> BM25Index:
        """A new index with this one's tokenizer and parameters holding `matrix` (documents x terms, columns in
        `vocab` order) as one postings block."""
        import scipy.sparse as sp

        p = self.params
        index = BM25Index(self.tokenizer, p.variant.value, k1=p.k1, b=p.b, epsilon=p.epsilon, delta=p.delta,
                          show_progress=False)
        index._vocab = _Vocabulary((token, term) for term, token in enumerate(vocab))
        block = PostingsBlock._from_scipy(sp.csc_matrix(matrix), len(ids))
        index._blocks = [block] if len(ids) else []
        index._df = np.diff(block.indptr).astype(np.int64)
        index._doc_len = np.asarray(doc_len, dtype=np.int64)
        index._live = np.ones(len(ids), dtype=bool)
        index._keys.append(list(ids), len(ids))
        index._n_live = len(ids)
        index._total_len = int(index._doc_len.sum())
        return index

    # ---- persistence ----------------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> None:
        """Write ``bm25.json`` (settings, tokenizer, vocabulary) and ``bm25.npz`` (postings, lengths, ids) into
        `directory`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, np.ndarray] = {"df": self._df, "doc_len": self._doc_len, "live": self._live}
        arrays.update(self._keys.to_arrays())
        # the on-disk names of the postings blocks, "seg{i}_*" arrays and the manifest's "segments" list, are the file
        # format (versions 1 and 2, when blocks were called segments): kept so every saved index still opens
        for i, block in enumerate(self._blocks):
            arrays.update({f"seg{i}_indptr": block.indptr, f"seg{i}_indices": block.indices, f"seg{i}_tf": block.tf})
        storage.save_arrays(directory / ARRAYS, arrays)
        vocab = [""] * len(self._vocab)
        for token, term in self._vocab.items():
            vocab[term] = token
        storage.write_manifest(directory / MANIFEST, {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "params": self.params.model_dump(mode="json"),
            "tokenizer": tokenizer_config(self.tokenizer),
            "vocab": vocab,
            "ids": self._keys.to_manifest(),
            "segments": [{"n_docs": b.n_docs, "n_terms": b.n_terms, "nnz": b.nnz} for b in self._blocks],
            "n_slots": len(self._live),
            "arrays_bytes": (directory / ARRAYS).stat().st_size,
        })

    @classmethod
    def load(cls, directory: str | Path, tokenizer: Tokenizer | None = None, *, mmap: bool = True) -> BM25Index:
        """Load an index saved by `save`; postings are memory-mapped when `mmap`.

        `tokenizer` is required when the index was built with a custom callable (which cannot be saved) and
        overrides the saved tokenizer otherwise. Raises `IndexCorruptError` for missing, truncated or inconsistent
        files, never returning an empty index for a broken one.
        """
        directory = Path(directory)
        manifest = storage.read_manifest(directory / MANIFEST, FORMAT)
        if manifest.get("version") not in READ_VERSIONS:
            raise IndexCorruptError(f"{directory / MANIFEST}: unsupported version {manifest.get('version')!r}")
        try:
            saved_tokenizer = manifest["tokenizer"]
            if tokenizer is None and saved_tokenizer.get("name") == CALLABLE_TOKENIZER:
                raise ConfigError(
                    f"the index in {directory} was built with a custom tokenizer ({saved_tokenizer.get('repr')}); "
                    "pass the same callable again: BM25Index.load(directory, tokenizer=...)"
                )
            params = manifest["params"]
            index = cls(tokenizer if tokenizer is not None else saved_tokenizer, params["variant"],
                        k1=params["k1"], b=params["b"], epsilon=params["epsilon"], delta=params["delta"])
            block_meta = manifest["segments"]  # the postings blocks (see `save`)
            array_path = directory / ARRAYS
            size = array_path.stat().st_size if array_path.exists() else None
            if size != manifest["arrays_bytes"]:
                raise IndexCorruptError(f"{array_path}: size {size} bytes, manifest says {manifest['arrays_bytes']}")
            names = ["df", "doc_len", "live"] + [f"seg{i}_{p}" for i in range(len(block_meta))
                                                 for p in ("indptr", "indices", "tf")]
            arrays = storage.load_arrays(array_path, names, mmap=mmap)
            # ids are read into memory (one C-level read; lookups never touch a mapped file)
            arrays.update(storage.load_arrays(array_path, DocKeys.array_names(manifest["ids"]), mmap=False))
            index._mapped = MappedFile(array_path) if mmap else None
            index._vocab = _Vocabulary((token, term) for term, token in enumerate(manifest["vocab"]))
            index._df = np.array(arrays["df"], dtype=np.int64)
            index._doc_len = np.array(arrays["doc_len"], dtype=np.int64)
            index._live = np.array(arrays["live"], dtype=bool)
            index._blocks = [
                PostingsBlock(arrays[f"seg{i}_indptr"], arrays[f"seg{i}_indices"], arrays[f"seg{i}_tf"],
                              int(m["n_docs"]))
                for i, m in enumerate(block_meta)
            ]
            index._keys = DocKeys.from_manifest(manifest["ids"], arrays, index._live)
            _check_loaded(index, manifest, directory)
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise IndexCorruptError(f"{directory}: inconsistent BM25 index ({type(exc).__name__}: {exc})") from None
        index._n_live = int(index._live.sum())
        index._total_len = int(index._doc_len[index._live].sum())
        return index


class _Vocabulary(dict):
    """Term -> id; looking up an unseen term with ``[]`` gives it the next id (``get`` never adds)."""

    def __missing__(self, token: str) -> int:
        term = self[token] = len(self)
        return term


def _check_loaded(index: BM25Index, manifest: dict[str, Any], directory: Path) -> None:
    """Cheap structural checks (no pass over the postings), so a damaged index fails on load, not on a query."""
    n_slots = int(manifest["n_slots"])
    problems = []
    if not (len(index._live) == len(index._doc_len) == index._keys.n_slots == n_slots):
        problems.append(f"{n_slots} documents in the manifest, arrays disagree")
    if len(index._df) != len(index._vocab):
        problems.append(f"{len(index._vocab)} terms in the vocabulary, {len(index._df)} document frequencies")
    if sum(b.n_docs for b in index._blocks) != n_slots:
        problems.append("postings block sizes do not add up to the document count")
    for i, (block, meta) in enumerate(zip(index._blocks, manifest["segments"])):
        indptr = block.indptr
        if (len(indptr) != int(meta["n_terms"]) + 1 or block.n_terms > len(index._vocab) or indptr[0] != 0
                or indptr[-1] != block.nnz or len(block.tf) != block.nnz or block.nnz != int(meta["nnz"])
                or np.any(np.diff(indptr) < 0)):
            problems.append(f"postings block {i} is malformed")
    if problems:
        raise IndexCorruptError(f"{directory}: inconsistent BM25 index: {'; '.join(problems)}")
