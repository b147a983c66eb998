"""Token logprobs from an in-process llama.cpp model without ``logits_all=True``.

llama-cpp-python only returns logprobs for models built with ``logits_all=True``, which keeps an
``n_ctx x n_vocab`` float array (8192 x 151936 x 4 bytes = 5 GB for Qwen2.5). Instead we run the generation loop
ourselves and copy the logits of each sampled position through a logits processor (the first stage of the sampler
chain, so it sees the raw logits), then report them in the OpenAI chat format that ``ChatOpenAI`` exposes in
``response_metadata["logprobs"]``: ``{"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}, ...]}``.

Example::

    text, finish, usage, logprobs = complete_with_logprobs(llama, [{"role": "user", "content": "Yes?"}],
                                                           top_logprobs=5, max_tokens=1, temperature=0.0)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ctxrag.errors import ModelError

_FORMATTERS: dict[int, Any] = {}


def _formatter(llama: Any) -> Any:
    key = id(llama)
    if key not in _FORMATTERS:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        template = llama.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelError("the local GGUF carries no chat template (tokenizer.chat_template); logprobs need it")
        eos, bos = llama.token_eos(), llama.token_bos()
        _FORMATTERS[key] = Jinja2ChatFormatter(
            template=template,
            eos_token=llama._model.token_get_text(eos) if eos != -1 else "",
            bos_token=llama._model.token_get_text(bos) if bos != -1 else "",
        )
    return _FORMATTERS[key]


def _token_entry(llama: Any, token: int, logprob: float) -> dict[str, Any]:
    raw = llama.detokenize([token], special=True)
    return {"token": raw.decode("utf-8", errors="replace"), "logprob": float(logprob), "bytes": list(raw)}


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits.astype(np.float64) - float(np.max(logits))
    return shifted - np.log(np.exp(shifted).sum())


def complete_with_logprobs(
    llama: Any,
    messages: list[dict[str, str]],
    *,
    top_logprobs: int = 0,
    temperature: float = 0.0,
    max_tokens: int = 512,
    stop: list[str] | None = None,
    seed: int | None = None,
    top_p: float = 0.95,
    top_k: int = 40,
    repeat_penalty: float = 1.0,
    grammar: Any = None,
) -> tuple[str, str, dict[str, int], dict[str, Any]]:
    """Generate a chat reply and the logprob of each generated token (plus ``top_logprobs`` alternatives).

    ``grammar``: a ``LlamaGrammar`` the reply is constrained to (structured output); the logprobs stay those of the
    model's raw logits, before the grammar masks them. Returns (text, finish_reason, usage, logprobs) with logprobs
    in the OpenAI chat format. The caller holds the model's lock.
    """
    import llama_cpp
    from llama_cpp import LogitsProcessorList

    formatted = _formatter(llama)(messages=messages)
    prompt_tokens = llama.tokenize(formatted.prompt.encode("utf-8"), add_bos=not formatted.added_special, special=True)
    budget = llama.n_ctx() - len(prompt_tokens)
    if budget <= 0:
        raise ModelError(f"local chat model: the prompt has {len(prompt_tokens)} tokens, over n_ctx={llama.n_ctx()}")
    max_tokens = min(max_tokens, budget) if max_tokens and max_tokens > 0 else budget
    stops = [s for s in (stop or []) if s] + [s for s in (formatted.stop or []) if isinstance(s, str) and s]
    if seed is not None:
        llama.set_seed(seed)

    captured: list[np.ndarray] = []

    def capture(_input_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        captured.append(np.array(logits, dtype=np.float32, copy=True))
        return logits

    tokens: list[int] = []
    entries: list[dict[str, Any]] = []
    finish = "length"
    text = ""
    for token in llama.generate(
        prompt_tokens,
        temp=temperature,
        top_p=top_p,
        top_k=top_k,
        repeat_penalty=repeat_penalty,
        logits_processor=LogitsProcessorList([capture]),
        grammar=grammar,
    ):
        logprobs = _log_softmax(captured[-1])
        if llama_cpp.llama_vocab_is_eog(llama._model.vocab, token):
            finish = "stop"
            break
        tokens.append(token)
        entry = _token_entry(llama, token, logprobs[token])
        if top_logprobs > 0:
            best = np.argpartition(-logprobs, top_logprobs)[:top_logprobs]
            best = best[np.argsort(-logprobs[best])]
            entry["top_logprobs"] = [_token_entry(llama, int(t), logprobs[t]) for t in best]
        else:
            entry["top_logprobs"] = []
        entries.append(entry)
        text = llama.detokenize(tokens, prev_tokens=prompt_tokens).decode("utf-8", errors="ignore")
        hit = next((s for s in stops if s in text), None)
        if hit is not None:
            text = text[: text.index(hit)]
            finish = "stop"
            break
        if len(tokens) >= max_tokens:
            break
    usage = {"prompt_tokens": len(prompt_tokens), "completion_tokens": len(tokens), "total_tokens": len(prompt_tokens) + len(tokens)}
    return text, finish, usage, {"content": entries, "refusal": None}
