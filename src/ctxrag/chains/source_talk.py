"""Sentences of an answer that only talk about its sources ("This is stated in source [2].", "以上信息来自资料[1]。"),
and lead-ins that name a source before the facts ("根据资料[1]，团队版……", "According to source [2], the ...").

A small local model adds such sentences after the fact they point to; they state nothing, and the citation marker
already says where the fact is. `source_talk` tells them apart from sentences with facts ("Source [2] states that the
port is 7420." has one), so `ctxrag.chains.checked_markers.CheckedMarkers` can drop them, and `without_lead_in`
gives a sentence's facts without the lead-in (its marker is set again by the citation check). `may_open_source_talk`
says whether the start of a sentence still being written could be one, so a stream holds it until it is complete
and streamed and whole answers agree.

Example::

    from ctxrag.chains.source_talk import source_talk, without_lead_in
    source_talk("This is stated in source [2]."), source_talk("Source [2] states that the port is 7420.")
    # (True, False)
    without_lead_in("根据资料[1]，团队版包含 200 GB 存储空间。")
    # '团队版包含 200 GB 存储空间。'
"""
from __future__ import annotations

import re

from ctxrag.chains.citations import CITATION_MARK

_WHERE_EN = (r"(?:the\s+)?(?:(?:provided|given|above|following|same|cited|retrieved|referenced|numbered|first|second|"
             r"third|fourth)\s+)*(?:sources?|documents?|references?|passages?|context|materials?|chunks?|texts?|"
             r"knowledge base)(?:\s+(?:above|provided))?")
_WHERE_EN_NAMED = (r"(?:the\s+)?(?:(?:section|part|chapter|page)s?\s+(?:of|in|on)\s+(?:the\s+)?)?"
                   r"(?:[\w-]+\s+){0,2}?(?:guides?|manuals?|handbooks?|documentation|faqs?|readme)"
                   r"|(?:the\s+)?(?:section|part|chapter)s?\s+(?:of|in|on)\s+" + _WHERE_EN)
"""Where a sentence says its answer is, by the kind of document ("the section of the deployment guide"): only after
"This is stated in ..." or "As described in ...", never after "See ..." (which points the reader at a document)."""
_WHAT_EN = (r"(?:this|that|it|these|those|all\s+of\s+this|this\s+information|these\s+details|"
            r"the\s+(?:above\s+)?(?:information|answer|details?|facts?|statements?))")
_VERB_EN = (r"(?:stated|mentioned|found|provided|given|described|explained|confirmed|shown|specified|listed|"
            r"documented|noted|indicated|outlined|covered|supported|based|taken|drawn|sourced|cited|referenced)")
_SPEECH_EN = r"(?:stated|mentioned|described|documented|explained|noted|specified|outlined|detailed)"
"""Verbs of what a document says: "This is stated in the support policy." names a document whatever its kind."""
_EN = re.compile(
    rf"^(?:{_WHAT_EN}\s+(?:(?:is|are|was|were|can\s+be|comes?)\s+)?(?:also\s+|clearly\s+|explicitly\s+)?"
    rf"(?:{_VERB_EN}\s+)?(?:in|by|from|on|within)\s+(?:{_WHERE_EN}|{_WHERE_EN_NAMED})"
    rf"|(?:as\s+)?(?:stated|mentioned|described|shown)\s+in\s+(?:{_WHERE_EN}|{_WHERE_EN_NAMED})"
    rf"|{_WHAT_EN}\s+(?:is|are|was|were)\s+(?:also\s+|clearly\s+|explicitly\s+)?{_SPEECH_EN}\s+in\s+"
    rf"(?:the\s+|our\s+|its\s+|their\s+)?(?:[\w-]+\s+){{0,2}}[\w-]+"
    rf"|(?:sources?|references?|citations?)\s*:?"
    rf"|(?:according\s+to|see|refer\s+to)\s+{_WHERE_EN}"
    rf"|{_WHERE_EN}\s+(?:(?:also|clearly|explicitly)\s+)?(?:provides?|states?|mentions?|confirms?|contains?|"
    rf"supports?|has|holds?|gives?|describes?|explains?)\s+(?:this|that|these|it|the\s+(?:same\s+)?"
    rf"(?:information|answer|details?|facts?))(?:\s+information)?)"
    rf"(?P<tail>(?:\s*,?\s*(?:which|where|that)\b.*)?)$", re.I | re.S)
"""English source talk, the markers taken out; ``tail``: a clause after it ("..., which provides details on X")."""

_SOURCE_ZH = r"(?:参考)?(?:资料|資料|来源|來源|文档|文檔|文件|出处|出處|原文|上文|知识库|知識庫)"
_LABEL_ZH = re.compile(r"^(?:参考)?(?:资料|資料|来源|來源|出处|出處|引用)$")
"""A bare label before the markers ("来源：[1]")."""
_ZH = re.compile(
    rf"^(?:(?:以上|上述|这些|這些|这|這|此|该|該|本)?(?:一?(?:点|點|条|條))?(?:信息|資訊|内容|內容|答案|回答|说法|說法|描述)?"
    rf"(?:均|都|也|亦)?(?:是)?(?:来自|來自|出自|见于|見於|见|見|参见|參見|参考|參考|引自|摘自|根据|根據|基于|基於|依据|依據|"
    rf"可见|可見|可参考|可參考)(?:于|於)?(?:以上|上述)?{_SOURCE_ZH}(?:中|里|裡|内|內)?"
    rf"(?:的(?:内容|內容|信息|資訊|描述|说明|說明|记载|記載))?(?:所(?:述|说|說|提到|描述))?(?:的)?"
    rf"|(?:这|這|此|以上|上述)(?:一?(?:点|點|信息|資訊|内容|內容))?(?:在|于|於)(?:以上|上述)?{_SOURCE_ZH}"
    rf"(?:中|里|裡)?(?:有|已|也|均)?(?:明确|明確)?(?:提到|提及|说明|說明|描述|记载|記載|指出|列出|给出|給出|写到|寫到)(?:过|過|了)?"
    rf"|(?:根据|根據|依据|依據|参考|參考|基于|基於|参见|參見|详见|詳見|见|見)(?:以上|上述)?{_SOURCE_ZH}"
    rf"(?:中|里|裡)?(?:的(?:内容|內容|信息|資訊|描述|说明|說明|记载|記載))?(?:所(?:述|说|說))?"
    rf"|{_SOURCE_ZH}(?:中|里|裡)?(?:有|已|也|均)?(?:明确|明確)?(?:提到|提及|说明|說明|描述|记载|記載|指出|提供|给出|給出)"
    rf"(?:了|过|過)?(?:这|這|此|该|該|相关|相關)(?:一?(?:点|點))?(?:信息|資訊|内容|內容|答案)?)$")
"""Chinese source talk, the markers and punctuation taken out."""

_LEAD_IN = re.compile(
    rf"^(?P<lead>\s*(?:(?:根据|根據|依据|依據|基于|基於|参考|參考|按照)(?:以上|上述)?{_SOURCE_ZH}"
    rf"(?:\s*{CITATION_MARK.pattern})*\s*(?:中|里|裡)?(?:的(?:内容|內容|信息|資訊|描述|说明|說明|记载|記載))?"
    rf"(?:(?:所|中)?(?:述|说|說|提到|描述|记载|記載|显示|顯示))?\s*[，,：:]"
    rf"|(?:according\s+to|based\s+on|as\s+(?:stated|mentioned|described)\s+in)\s+{_WHERE_EN}"
    rf"(?:\s*{CITATION_MARK.pattern})*(?:\s+\d{{1,3}})?\s*,)\s*)(?P<rest>\S.*)$", re.I | re.S)
"""A lead-in naming the sources before the facts: ``lead`` (with its markers) and the ``rest``."""

_OPENERS_EN = ("this", "that", "it ", "it's", "these", "those", "all of", "the ", "source", "document", "reference",
               "passage", "context", "material", "chunk", "text", "knowledge base", "information", "answer",
               "detail", "fact", "statement", "provided", "given", "above",
               "following", "same", "cited", "retrieved", "referenced", "numbered", "first", "second", "third",
               "fourth", "according", "as ", "stated", "mentioned", "described", "shown", "based on", "see ",
               "refer")
"""How English source talk or a lead-in opens (lower case); "the " is followed by a word that must be one of these."""
_OPENERS_ZH = frozenset("以上这這些此该該本一点點条條信資内內答回说說描均都也亦是来來出见見参參引摘根基依可资資文檔档原知识識按详詳")
"""The characters Chinese source talk or a lead-in can open with (every word `_ZH` and `_LEAD_IN` may start with)."""

_PUNCT = re.compile(r"[\s。．.！!？?；;，,：:、（）()\"'“”‘’「」*_]+")


def _bare(sentence: str) -> str:
    return " ".join(CITATION_MARK.sub(" ", sentence).split())


def source_talk(sentence: str) -> bool:
    """Whether `sentence` only says where the answer comes from (see the module); a sentence with a figure never is.

    >>> tuple(source_talk(s) for s in ("This is stated in the [2] source, which provides details on the plans.",
    ...                                "以上信息来自资料[1]。", "这在资料[2]中有说明。", "The port is 7420 [1]."))
    (True, True, True, False)
    """
    bare = _bare(sentence)
    if not bare or re.search(r"\d", bare):
        return False
    en = _EN.match(bare.rstrip(" .!;:"))
    if en:
        return True
    zh = _PUNCT.sub("", bare)
    return _ZH.match(zh) is not None or _LABEL_ZH.match(zh) is not None


_NO_COVER_EN = re.compile(
    r"^(?:however,?\s+)?(?:the\s+)?(?:(?:provided\s+)?(?:knowledge\s+base|sources?|context|documents?|"
    r"documentation|information\s+provided))\s+(?:does|do)\s*(?:not|n't)\s+(?:(?:directly|specifically|explicitly)\s+)?"
    r"(?:cover|contain|address|answer|include|mention|have\s+information\s+(?:on|about))\s+"
    r"(?:(?:this|that|the|your)\s+(?:specific\s+|particular\s+|exact\s+)?(?:question|query|request|topic)|this|that|"
    r"it)(?:\s*[,;:(].*|\s+(?:as|because|since)\b.*)?$", re.I | re.S)
_NO_COVER_ZH = re.compile(
    r"^(?:但是?|不过|不過)?(?:知识库|知識庫|资料|資料|文档|文檔|参考资料|參考資料)(?:中|里|裡)?(?:并|並)?(?:没有|沒有|未)"
    r"(?:涉及|包含|提到|提及|覆盖|覆蓋|回答|直接回答)?(?:到)?(?:关于|關於)?(?:这个|這個|此|该|該|您的|你的)(?:具体|具體)?"
    r"(?:问题|問題)(?:的(?:信息|資訊|内容|內容|答案))?")


def no_coverage_claim(sentence: str) -> bool:
    """Whether `sentence` says the knowledge base does not cover the question itself ("The knowledge base does not
    cover this specific question, ...", "知识库中没有关于这个问题的信息。"); a claim about something named stays one
    the answer needs ("The documents do not cover the Enterprise price." is not one).

    >>> no_coverage_claim("The knowledge base does not cover this specific question, as it only holds the policy.")
    True
    >>> no_coverage_claim("The documents do not cover the Enterprise price.")
    False
    """
    bare = _bare(sentence).strip()
    if not bare or re.search(r"\d", bare):
        return False
    return _NO_COVER_EN.match(bare.rstrip(" .!")) is not None or _NO_COVER_ZH.match(_PUNCT.sub("", bare)) is not None


def without_lead_in(sentence: str) -> str:
    """`sentence` without a lead-in naming the sources ("根据资料[1]，", "According to source [2], "), its leading white
    space kept; as it is when it has none, or when nothing with a letter would be left.

    >>> without_lead_in("According to source [2], the port is 7420.")
    'The port is 7420.'
    """
    m = _LEAD_IN.match(sentence)
    if not m or not re.search(r"\w", m.group("rest")):
        return sentence
    rest = m.group("rest")
    if rest[:1].isascii() and rest[:1].islower() and not rest.split(" ", 1)[0][1:].isupper():
        rest = rest[0].upper() + rest[1:]  # "the port is ..." opens the sentence now
    return sentence[:len(sentence) - len(sentence.lstrip())] + rest


def may_open_source_talk(text: str) -> bool:
    """Whether `text`, the start of a sentence still being written, could open source talk or a lead-in (so a stream
    holds it until the sentence is complete).

    >>> may_open_source_talk("This is st"), may_open_source_talk("根"), may_open_source_talk("The port is")
    (True, True, False)
    """
    bare = _bare(text).lstrip("-*+•# \t\n").lower()
    if not bare:
        return True
    if bare[0] in _OPENERS_ZH:
        return True
    if bare.startswith("the "):  # "the" opens source talk only before one of the other openers
        after = bare[4:]
        return not after or any(after.startswith(o) or o.startswith(after) for o in _OPENERS_EN if o != "the ")
    return any(bare.startswith(o) or o.startswith(bare) for o in _OPENERS_EN)
