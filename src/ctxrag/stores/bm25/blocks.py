"""Stage 2 of BM25: postings. A `PostingsBlock` is an immutable document-by-term matrix of raw term frequencies in
CSC form (one column of postings per term), built with scipy.sparse from token ids.

A `BM25Index` holds its postings as a list of blocks in document order plus tombstones: adding documents appends a
small block, deleting marks slots dead, and blocks are merged and compacted in the background of those calls, so
nothing is ever rebuilt from the text. (Blocks live inside one index in memory and in its ``bm25.npz``; the
*segments* of `ctxrag.stores.engine.segments` are something else: immutable index folders that generations share.)

>>> block = PostingsBlock.from_token_ids(np.array([0, 1, 0, 2], dtype=np.int32), np.array([3, 1]), n_terms=3)
>>> rows, tf = block.postings(0)
>>> rows.tolist(), tf.tolist()
([0], [2])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import scipy.sparse as sp  # building and merging need scipy; opening and searching an index never do

INDEX_DTYPE = np.int32
TF_DTYPE = np.int32


@dataclass(frozen=True)
class PostingsBlock:
    """Term frequencies of `n_docs` consecutive documents: column ``t`` holds ``indices[indptr[t]:indptr[t+1]]``
    (rows, ascending) and ``tf`` (their counts). Terms with id ``>= n_terms`` do not occur in this block."""

    indptr: np.ndarray
    indices: np.ndarray
    tf: np.ndarray
    n_docs: int

    @property
    def n_terms(self) -> int:
        return len(self.indptr) - 1

    @property
    def nnz(self) -> int:
        return len(self.indices)

    def postings(self, term: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows (local document numbers) containing `term`, and the term's frequency in each."""
        if term >= self.n_terms:
            return self.indices[:0], self.tf[:0]
        start, end = self.indptr[term], self.indptr[term + 1]
        return self.indices[start:end], self.tf[start:end]

    @classmethod
    def from_token_ids(cls, term_ids: np.ndarray, doc_lengths: np.ndarray, n_terms: int) -> PostingsBlock:
        """Build from the concatenated token ids of consecutive documents and each document's token count."""
        import scipy.sparse as sp

        n_docs = len(doc_lengths)
        row_ptr = np.zeros(n_docs + 1, dtype=np.int64)
        np.cumsum(doc_lengths, out=row_ptr[1:])
        # one entry per token; summing duplicates in each row yields term frequencies, tocsc() transposes the layout
        by_doc = sp.csr_matrix(
            (np.ones(len(term_ids), dtype=TF_DTYPE), term_ids, row_ptr), shape=(n_docs, n_terms)
        )
        by_doc.sum_duplicates()
        return cls._from_scipy(by_doc.tocsc(), n_docs)

    @classmethod
    def _from_scipy(cls, matrix: sp.csc_matrix, n_docs: int) -> PostingsBlock:
        matrix.sort_indices()
        return cls(
            indptr=matrix.indptr.astype(np.int64, copy=False),
            indices=matrix.indices.astype(INDEX_DTYPE, copy=False),
            tf=matrix.data.astype(TF_DTYPE, copy=False),
            n_docs=n_docs,
        )

    def to_scipy(self, n_terms: int | None = None) -> sp.csc_matrix:
        """This block as a scipy CSC matrix, widened to `n_terms` columns (newer terms are empty columns)."""
        import scipy.sparse as sp

        indptr = self.indptr
        if n_terms is not None and n_terms > self.n_terms:
            indptr = np.concatenate([indptr, np.full(n_terms - self.n_terms, indptr[-1], dtype=indptr.dtype)])
        return sp.csc_matrix((self.tf, self.indices, indptr), shape=(self.n_docs, len(indptr) - 1), copy=False)

    def term_doc_counts(self, rows: np.ndarray, n_terms: int) -> np.ndarray:
        """For each term, how many of the given rows (bool mask over this block's rows) contain it."""
        entries = np.flatnonzero(rows[self.indices])
        if not len(entries):
            return np.zeros(n_terms, dtype=np.int64)
        # the column of each selected entry by binary search over indptr: a few tombstones in a large block cost
        # their own postings, not a column number materialised for every posting of the block
        columns = np.searchsorted(self.indptr, entries, side="right") - 1
        return np.bincount(columns, minlength=n_terms)

    def compacted(self, keep: np.ndarray) -> PostingsBlock:
        """A copy without the rows where `keep` (bool mask over rows) is False; row order is kept."""
        kept_entries = keep[self.indices]
        new_row = (np.cumsum(keep) - 1).astype(INDEX_DTYPE)
        kept_before = np.zeros(self.nnz + 1, dtype=np.int64)
        np.cumsum(kept_entries, out=kept_before[1:])
        return PostingsBlock(
            indptr=kept_before[self.indptr],
            indices=new_row[self.indices[kept_entries]],
            tf=np.ascontiguousarray(self.tf[kept_entries]),
            n_docs=int(keep.sum()),
        )


def merge_blocks(blocks: list[PostingsBlock], n_terms: int) -> PostingsBlock:
    """One block holding the documents of `blocks`, in order."""
    if len(blocks) == 1 and blocks[0].n_terms == n_terms:
        return blocks[0]
    import scipy.sparse as sp

    stacked = sp.vstack([b.to_scipy(n_terms) for b in blocks], format="csc")
    return PostingsBlock._from_scipy(stacked, sum(b.n_docs for b in blocks))
