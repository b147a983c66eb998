from __future__ import annotations

import pytest

from ctxrag.models.loop_guard import LoopLimits, StreamingLoopGuard, find_loop, trim_loop

# the demo's storage answer from the 0.5B model (issue 13): a right start, then [2][3] until max_tokens
DEMO_LOOP = "团队版包含 200 GB 存储空间 [2]。[2] [2][3] " + "[2][3] " * 60


def _stream(text: str, step: int = 1, limits: LoopLimits = LoopLimits()) -> tuple[str, StreamingLoopGuard]:
    guard = StreamingLoopGuard(limits)
    shown = ""
    for i in range(0, len(text), step):
        shown += guard.feed(text[i : i + step])
        if guard.stopped:
            break
    return shown + guard.flush(), guard


# ------------------------------------------------------------------ nothing to trim


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Port 7420 [1].",
        "The Enterprise plan includes SSO; it supports SAML 2.0 and OpenID Connect [3][4].",
        "星河知识库支持 PDF、Word、Markdown、HTML、纯文本和 JSON Lines 六种格式 [1]。",
        "| plan | storage |\n|---|---|---|---|---|---|---|---|\n| team | 200 GB |",  # a table rule is layout
        "ha ha ha",  # too short to be a loop
        "1. PDF\n2. Word\n3. Markdown\n4. HTML\n5. TXT\n6. JSON Lines",
    ],
)
def test_ordinary_answers_are_left_alone(text: str) -> None:
    assert find_loop(text) is None
    assert trim_loop(text) == (text, False)
    for step in (1, 3, 7):
        shown, guard = _stream(text, step)
        assert shown == text and not guard.stopped


# ------------------------------------------------------------------ loops


def test_demo_citation_loop_is_cut_after_the_last_new_citation() -> None:
    trimmed, cut = trim_loop(DEMO_LOOP)
    assert cut and trimmed == "团队版包含 200 GB 存储空间 [2]。[2] [2][3]"


def test_repeated_sentence_keeps_one_copy() -> None:
    sentence = "The default port is 7420, set in the server section. "
    # the cut falls where the repeat starts, which may be a space earlier than the sentence boundary
    trimmed, cut = trim_loop("Answer: " + sentence * 2)  # a long unit: two copies suffice
    assert cut and trimmed.rstrip() == "Answer: " + sentence.rstrip()
    trimmed, cut = trim_loop("The port is 7420. " * 5)
    assert cut and trimmed.rstrip() == "The port is 7420."


def test_short_unit_needs_three_copies_and_enough_characters() -> None:
    assert trim_loop("ok ok ")[1] is False
    loop = find_loop("Answer:" + " 7420" * 6)
    assert loop is not None and loop.period == 5 and loop.repeats >= 3


def test_run_of_citation_markers_alone_is_a_loop() -> None:
    text = "Yes [1]" + "[1]" * 3 + "[2]" + "[1]" * 10
    loop = find_loop(text, LoopLimits(max_citations=8, min_repeats=50))  # the periodic rule off: the run rule fires
    assert loop is not None and loop.period == 0 and text[: loop.cut] == "Yes [1][1][1][1][2]"


@pytest.mark.parametrize("step", [1, 2, 5, 11])
def test_streaming_shows_exactly_what_invoke_returns_and_stops(step: int) -> None:
    shown, guard = _stream(DEMO_LOOP, step)
    assert guard.stopped and guard.loop is not None
    assert shown == guard.final_text
    assert shown.startswith("团队版包含 200 GB 存储空间 [2]")
    assert len(shown) < 60 and shown.count("[2][3]") == 1


def test_streaming_releases_held_text_when_the_repeat_breaks() -> None:
    guard = StreamingLoopGuard()
    first = guard.feed("aaaa")  # the first copy is shown, the repeat in the making is held back
    assert first == "a" and not guard.stopped
    rest = guard.feed("rdvark is an animal.")
    assert first + rest + guard.flush() == "aaaardvark is an animal."


def test_feed_after_stop_returns_nothing() -> None:
    guard = StreamingLoopGuard()
    for _ in range(30):
        guard.feed("[2][3] ")
    assert guard.stopped and guard.feed("more text") == "" and guard.flush() == ""


def test_only_the_window_is_examined() -> None:
    limits = LoopLimits(window=64)
    text = "x" * 1000 + "The port is 7420. " * 4
    loop = find_loop(text, limits)
    # the loop is found, and only from inside the last 64 characters
    assert loop is not None and len(text) - 64 <= loop.cut < len(text)


def test_bad_limits_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"LoopLimits.min_repeats=1"):
        LoopLimits(min_repeats=1)


# ------------------------------------------------------------------ the llama.cpp logits processor


def test_logits_processor_forces_end_of_text_once_a_loop_is_written() -> None:
    import numpy as np

    from ctxrag.models.llamacpp import _LoopStop

    class Vocab:  # token i detokenizes to WORDS[i]; token 0 is end-of-text
        WORDS = ["", "Yes", " [1]", " [2][3]"]

        def detokenize(self, ids: list[int]) -> bytes:
            return "".join(self.WORDS[i] for i in ids).encode()

        def token_eos(self) -> int:
            return 0

    stop = _LoopStop(Vocab(), LoopLimits())
    prompt = [1, 2]  # the prompt is never scored
    scores = np.zeros(4, dtype=np.float32)
    assert stop(np.array(prompt), scores.copy()).tolist() == [0, 0, 0, 0]
    generated = prompt + [1, 2]
    assert np.isfinite(stop(np.array(generated), scores.copy())).all()  # "Yes [1]": no loop yet
    for _ in range(12):
        generated.append(3)
        out = stop(np.array(generated), scores.copy())
    assert out[0] == 0 and np.isneginf(out[1:]).all()  # only end-of-text is left
