"""A stock LangChain answer chain, measured beside ctxrag's in the answer benchmark (as the retrieval benchmarks
measure stock LangChain retrievers beside ours).

What a LangChain user would assemble without ctxrag: ``langchain_community``'s `BM25Retriever` over the benchmark's
corpus with ``jieba`` and the shipped stopword lists as its preprocessing, the top ``k`` passages stuffed into one
plain prompt asking for the answer phrase only, the same chat model, `StrOutputParser`. No snapping, no retry, no
script conversion.

Example::

    from ctxrag.evaluation.stock_chain import stock_answer_chain
    chain = stock_answer_chain(dataset.corpus, llm, k=1)
    chain.invoke("臺灣最高的山是哪一座？")   # {"question": ..., "documents": [...], "answer": "玉山"}
"""
from __future__ import annotations

from operator import itemgetter
from typing import Any, Callable, Mapping

from langchain_core.language_models import BaseChatModel
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import Runnable, RunnableLambda, RunnablePassthrough

from ctxrag.errors import ConfigError
from ctxrag.evaluation.datasets import CorpusItem

STOCK_NAME = "stock LangChain (BM25Retriever jieba+stopwords -> plain prompt)"
"""The configuration name the stock chain's row carries in answer tables."""

PROMPT = ChatPromptTemplate.from_messages([
    ("system", "Answer the question from the context. Reply with the answer phrase only, in the language of the "
               "context, no explanation.\n\nContext:\n{context}"),
    ("human", "{question}"),
])


def _jieba_without_stopwords() -> Callable[[str], list[str]]:
    import jieba

    from ctxrag.stores.bm25.tokenize import load_stopwords

    stop = load_stopwords("zh") | load_stopwords("en")

    def tokens(text: str) -> list[str]:
        return [t for t in jieba.lcut(text.lower()) if t.strip() and t not in stop]

    return tokens


def _joined_documents(x: dict[str, Any]) -> str:
    """The retrieved documents' texts as the prompt's context."""
    return "\n\n".join(d.page_content for d in x["documents"])


def stock_answer_chain(corpus: Mapping[str, CorpusItem], llm: BaseChatModel, *, k: int = 1) -> Runnable[Any, Any]:
    """The stock chain over `corpus` (see the module docstring); input a question string, output a dict with
    ``question``, ``documents`` and ``answer``."""
    try:
        from langchain_community.retrievers import BM25Retriever
    except ImportError:
        raise ConfigError("the stock LangChain chain needs langchain-community: pip install 'ctxrag[eval]'") from None
    from langchain_core.documents import Document

    docs = [Document(item.text, id=cid, metadata={"chunk_id": cid}) for cid, item in corpus.items()]
    if not docs:
        raise ValueError("stock_answer_chain: the corpus is empty")
    retriever = BM25Retriever.from_documents(docs, preprocess_func=_jieba_without_stopwords(), k=k)
    context = RunnableLambda(_joined_documents)
    return (
        {"question": RunnablePassthrough()}
        | RunnablePassthrough.assign(documents=itemgetter("question") | retriever)
        | RunnablePassthrough.assign(answer={"context": context, "question": itemgetter("question")}
                                     | PROMPT | llm | StrOutputParser())
    ).with_config(run_name="stock_langchain_answer")
