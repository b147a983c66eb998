"""Prompts for contextual retrieval: an LLM situates each chunk in its whole document.

The English prompt is Anthropic's, verbatim (cookbook "contextual embeddings"). The document part comes first and is
identical for every chunk of a document, so servers with prefix caching (vLLM, llama.cpp, Anthropic prompt caching)
reuse it; the chunk part follows in the same user message.

Example::

    from ctxrag.prompts.contextual import ContextPrompt, default_context_prompts
    en = default_context_prompts()["en"]
    text = en.render_document("full text") + "\\n\\n" + en.render_chunk("one chunk")
    mine = ContextPrompt("<doc>{doc_content}</doc>", "Situate: {chunk_content}")  # version derived from the text
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

PROMPT_VERSION = "v1"
"""Version of the built-in prompts; part of the context cache key, bump it when their wording changes."""

DOCUMENT_CONTEXT_PROMPT = "<document>\n{doc_content}\n</document>"
CHUNK_CONTEXT_PROMPT = (
    "Here is the chunk we want to situate within the whole document\n<chunk>\n{chunk_content}\n</chunk>\n\n"
    "Please give a short succinct context to situate this chunk within the overall document for the purposes of "
    "improving search retrieval of the chunk.\nAnswer only with the succinct context and nothing else."
)

DOCUMENT_CONTEXT_PROMPT_ZH = "<document>\n{doc_content}\n</document>"
CHUNK_CONTEXT_PROMPT_ZH = (
    "下面是我们希望在整篇文档中定位的片段\n<chunk>\n{chunk_content}\n</chunk>\n\n"
    "请用简短精炼的一两句话说明这个片段在整篇文档中的位置和背景（例如它属于哪个主体、哪一部分、讲的是什么），"
    "以便改进对该片段的检索。\n只回答这段简短的上下文，不要输出其他任何内容。"
)

DOC_PLACEHOLDER = "{doc_content}"
CHUNK_PLACEHOLDER = "{chunk_content}"


@dataclass(frozen=True)
class ContextPrompt:
    """A document template (must contain ``{doc_content}``) and a chunk template (must contain ``{chunk_content}``).

    `version` goes into the context cache key; when omitted it is derived from the templates' text, so editing a
    custom prompt never serves contexts written with the old one.
    """

    document_template: str
    chunk_template: str
    version: str = field(default="")

    def __post_init__(self) -> None:
        if DOC_PLACEHOLDER not in self.document_template:
            raise ValueError(f"document_template must contain {DOC_PLACEHOLDER}: {self.document_template[:80]!r}")
        if CHUNK_PLACEHOLDER not in self.chunk_template:
            raise ValueError(f"chunk_template must contain {CHUNK_PLACEHOLDER}: {self.chunk_template[:80]!r}")
        if not self.version:
            digest = hashlib.sha256(f"{self.document_template}\x00{self.chunk_template}".encode()).hexdigest()[:12]
            object.__setattr__(self, "version", f"custom-{digest}")

    # str.replace, not str.format: documents are full of braces (code, JSON).
    def render_document(self, document: str) -> str:
        return self.document_template.replace(DOC_PLACEHOLDER, document)

    def render_chunk(self, chunk: str) -> str:
        return self.chunk_template.replace(CHUNK_PLACEHOLDER, chunk)


def default_context_prompts() -> dict[str, ContextPrompt]:
    """The built-in prompts by language: 'en' (Anthropic's) and 'zh'."""
    return {
        "en": ContextPrompt(DOCUMENT_CONTEXT_PROMPT, CHUNK_CONTEXT_PROMPT, version=f"anthropic-en-{PROMPT_VERSION}"),
        "zh": ContextPrompt(DOCUMENT_CONTEXT_PROMPT_ZH, CHUNK_CONTEXT_PROMPT_ZH, version=f"ctxrag-zh-{PROMPT_VERSION}"),
    }


DOCUMENT_SUMMARY_VERSION = "v1"
"""Version of the built-in document-summary prompts (part of the cache key)."""

DOCUMENT_SUMMARY_PROMPT = (
    "<document>\n{doc_content}\n</document>\n\n"
    "Write a short context for this document that will be prepended to every chunk of it to improve search "
    "retrieval: first its title (what the document is, e.g. the library, module or file and its purpose), then 2-3 "
    "sentences summarising what it covers, naming its main classes, functions, entities and topics.\n"
    "Answer only with the title line and the summary, nothing else."
)
DOCUMENT_SUMMARY_PROMPT_ZH = (
    "<document>\n{doc_content}\n</document>\n\n"
    "请为这篇文档写一段简短的上下文，它会加在文档每个片段的前面以改进检索：先写一行标题（文档是什么、属于哪个主体或主题），"
    "再用两三句话概括它的内容，写出其中的主要人物、机构、地点、事件或概念。\n只回答标题和概括，不要输出其他任何内容。"
)


@dataclass(frozen=True)
class DocumentSummaryPrompt:
    """One prompt that asks for a whole document's context (title + 2-3 sentences); must contain ``{doc_content}``.

    Example::

        p = default_document_summary_prompts()["en"]
        text = p.render("def add(a, b): return a + b")
    """

    template: str
    version: str = field(default="")

    def __post_init__(self) -> None:
        if DOC_PLACEHOLDER not in self.template:
            raise ValueError(f"template must contain {DOC_PLACEHOLDER}: {self.template[:80]!r}")
        if not self.version:
            digest = hashlib.sha256(self.template.encode()).hexdigest()[:12]
            object.__setattr__(self, "version", f"custom-{digest}")

    def render(self, document: str) -> str:
        return self.template.replace(DOC_PLACEHOLDER, document)


def default_document_summary_prompts() -> dict[str, DocumentSummaryPrompt]:
    """The built-in document-summary prompts by language: 'en' and 'zh'."""
    return {
        "en": DocumentSummaryPrompt(DOCUMENT_SUMMARY_PROMPT, version=f"docsum-en-{DOCUMENT_SUMMARY_VERSION}"),
        "zh": DocumentSummaryPrompt(DOCUMENT_SUMMARY_PROMPT_ZH, version=f"docsum-zh-{DOCUMENT_SUMMARY_VERSION}"),
    }
