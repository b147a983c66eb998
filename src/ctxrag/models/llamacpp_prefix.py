"""Prompt-prefix reuse that never changes a reply: a shared llama.cpp model answers a prompt as a fresh one would.

llama-cpp-python keeps the previous call's tokens in the context and evaluates only what follows the longest common
prefix. That saves the re-reading of a long system prompt (the warm process lives on it), but the tokens after the
cut are then evaluated in batches that start somewhere else than in a fresh context, and llama.cpp's kernels do not
give bit-identical results for a token evaluated in another batch: the logits drift, and a greedy small model may
write another reply to the same prompt depending on what it was asked before (`ctxrag ask` answered once and
abstained the next time in one warm process).

`reuse_whole_batches` makes the reuse canonical: a prompt's evaluation always starts at a multiple of the model's
``n_batch`` and runs in whole batches from there, and only the kept tokens that were themselves evaluated that way (in
whole, aligned batches of an earlier prompt, not decoded one by one) are reused. Every token is then computed exactly
as in a fresh context, so a reply depends on its prompt alone; the price is re-reading fewer than ``n_batch`` tokens
of a kept prefix.

Example::

    from llama_cpp import Llama
    from ctxrag.models.llamacpp_prefix import reuse_whole_batches
    llama = reuse_whole_batches(Llama(model_path="model.gguf", n_ctx=4096, verbose=False))
    llama.create_chat_completion(messages=[{"role": "user", "content": "2+2="}], temperature=0.0)
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any


def reusable_prefix(n_tokens: int, canonical: int, n_batch: int) -> int:
    """Where a prompt's evaluation starts: the kept ``n_tokens`` cut to those evaluated in whole aligned batches
    (``canonical``), rounded down to a multiple of ``n_batch``.

    >>> reusable_prefix(1115, 1024, 512), reusable_prefix(1115, 600, 512), reusable_prefix(300, 1024, 512)
    (1024, 512, 0)
    """
    if n_batch < 1:
        raise ValueError(f"n_batch must be at least 1, got {n_batch}")
    return min(n_tokens, canonical) // n_batch * n_batch


def reuse_whole_batches(llama: Any) -> Any:
    """``llama`` (a ``llama_cpp.Llama``) with its prompt evaluation aligned to whole batches (the module docstring);
    returns it. Wraps the instance's ``generate`` (a call marks its next evaluation as the prompt's) and ``eval``."""
    n_batch = int(llama.n_batch)
    state = {"canonical": 0, "prompt": False}
    generate: Callable[..., Iterator[int]] = llama.generate
    evaluate: Callable[[Sequence[int]], None] = llama.eval

    def aligned_generate(tokens: Sequence[int], *args: Any, **kwargs: Any) -> Iterator[int]:
        state["prompt"] = True
        return generate(tokens, *args, **kwargs)

    def aligned_eval(tokens: Sequence[int]) -> None:
        kept = int(llama.n_tokens)
        if not state["prompt"]:  # a decoded token (or any other evaluation): what follows ``kept`` is not canonical
            state["canonical"] = min(int(state["canonical"]), kept)
            evaluate(tokens)
            return
        state["prompt"] = False
        start = reusable_prefix(kept, int(state["canonical"]), n_batch)
        if start < kept:  # read the kept tokens after the cut again, in the batches a fresh context would use
            tokens = [*(int(t) for t in llama.input_ids[start:kept]), *tokens]
            llama.n_tokens = start
        state["canonical"] = start
        evaluate(tokens)
        state["canonical"] = int(llama.n_tokens) // n_batch * n_batch

    llama.generate = aligned_generate
    llama.eval = aligned_eval
    return llama
