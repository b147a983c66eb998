"""`ctxrag.models.llamacpp_prefix`: a shared llama.cpp context reuses a kept prompt prefix in whole aligned batches
only, so a reply depends on its prompt alone. The rule without a model; the ``llm`` test on the real 0.5B (the
session's ``small_chat_model``)."""
from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from ctxrag.models.llamacpp import PROMPT_BATCH, LocalLlamaChatModel, shared_llama
from ctxrag.models.llamacpp_prefix import reusable_prefix


def test_the_reused_prefix_is_whole_batches_evaluated_as_whole_batches() -> None:
    assert reusable_prefix(1115, 1115, 512) == 1024  # the kept tokens after the last whole batch are read again
    assert reusable_prefix(1115, 600, 512) == 512  # kept, but not evaluated in whole batches after 600
    assert reusable_prefix(511, 1024, 512) == 0
    assert reusable_prefix(1024, 1024, 512) == 1024
    assert reusable_prefix(70, 64, 8) == 64


def test_a_bad_batch_size_is_named() -> None:
    with pytest.raises(ValueError, match="got 0"):
        reusable_prefix(10, 10, 0)


NOTES = SystemMessage("Answer from these notes only.\n" + "\n".join(
    f"Note {i}: the shipment {i} left the port of Ningbo on day {i} with {i * 3} crates of tea." for i in range(1, 50)))


@pytest.mark.llm
def test_the_same_prompt_gets_the_same_logprobs_whatever_the_context_held_before(
        small_chat_model: LocalLlamaChatModel) -> None:
    """The second question shares the notes with the first, and the cut falls inside a batch; the first question
    asked again after it is evaluated as in a fresh context: the same tokens with the same logprobs, to the bit."""
    llm = small_chat_model.model_copy(update={"max_tokens": 8})
    asking = [NOTES, HumanMessage("How many crates left on day 3?")]
    with_logprobs = llm.bind(logprobs=True, top_logprobs=3)
    first = with_logprobs.invoke(asking)
    other = llm.invoke([NOTES, HumanMessage("Which port did shipment 7 leave from?")])
    again = with_logprobs.invoke(asking)
    assert first.response_metadata["logprobs"]["content"]
    assert again.response_metadata["logprobs"] == first.response_metadata["logprobs"]
    assert again.content == first.content
    # the notes' whole batches were still reused: the other question evaluated far fewer tokens than its prompt
    assert other.usage_metadata["input_tokens"] > 1024
    assert other.response_metadata["timings"]["prompt_eval_tokens"] <= other.usage_metadata["input_tokens"] - 1024


def _last_logits(llama, tokens: list[int]) -> list[float]:  # noqa: ANN001 - a llama_cpp.Llama
    """The logits after reading ``tokens`` in a fresh context (llama.cpp's, as the sampler reads them)."""
    import numpy as np

    llama.reset()
    llama.eval(tokens)
    return np.ctypeslib.as_array(llama._ctx.get_logits(), shape=(llama.n_vocab(),)).tolist()


@pytest.mark.llm
def test_reading_a_prompt_in_small_batches_gives_the_logits_of_llama_cpps_default_batch(
        small_chat_model: LocalLlamaChatModel, small_model_path: Path) -> None:
    """The shared model reads prompts in batches of `PROMPT_BATCH` tokens (so a call re-reads fewer tokens of a kept
    prefix); a fresh prompt longer than llama.cpp's default batch gets the same logits, to the bit, as the default
    (512) gives it, so no reply changes with the batch size."""
    from llama_cpp import Llama

    shared = shared_llama(small_model_path, small_chat_model.n_ctx)
    assert shared.llama.n_batch == PROMPT_BATCH < 512
    tokens = shared.llama.tokenize(str(NOTES.content).encode("utf-8"))
    assert len(tokens) > 512 + PROMPT_BATCH
    with shared.lock:
        ours = _last_logits(shared.llama, tokens)
        shared.llama.reset()
    default = Llama(model_path=str(small_model_path), n_ctx=small_chat_model.n_ctx, n_batch=512, verbose=False)
    try:
        assert default.n_batch == 512
        assert _last_logits(default, tokens) == ours
    finally:
        default.close()
