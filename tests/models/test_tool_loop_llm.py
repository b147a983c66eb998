"""A LangChain agent (`langchain.agents.create_agent`, on LangGraph) with the real in-process model and a search tool
over the real sample corpus: every turn the model writes is read as a call or an answer (no malformed turn left
unparsed), and the final answer holds the fact the tool returned. The constrained turn after tool results
(`ToolRequest.after_results`) is what makes the second turn an answer instead of prose that imitates a call. A
mechanism of `LocalLlamaChatModel` (llama_cpp.server has no such turns), so it runs on the 0.5B; how the 1.5B does
at it is the tool loop benchmark's page."""
from __future__ import annotations

from pathlib import Path

import pytest
from langchain_core.messages import AIMessage
from langchain_core.tools import tool

from ctxrag.kb.local import KnowledgeBase
from ctxrag.resource_paths import demo_corpus
from ctxrag.settings import Settings

pytestmark = pytest.mark.llm

QUESTIONS = [  # (question, any of these in the answer): two demo questions, one per language
    ("What port does the Xinghe Knowledge Base server listen on by default?", ["7420"]),
    ("星河知识库支持哪些文件格式？", ["PDF"]),
]


@pytest.fixture(scope="module")
def search_kb(tmp_path_factory: pytest.TempPathFactory, shared_embeddings):  # noqa: ANN001, ANN201
    home = tmp_path_factory.mktemp("agent_home")
    kb = KnowledgeBase.open("agent", Settings(home=home, contextualize=False), embeddings=shared_embeddings)
    assert kb.ingest([demo_corpus()], progress=False).ok
    retriever = kb.as_retriever(mode="hybrid", k=3)

    @tool
    def search_kb(query: str) -> str:
        """Search the product knowledge base (Xinghe Knowledge Base, Yinshan Technology's plans and support)."""
        return "\n\n".join(f"[{i}] {Path(d.metadata['source']).name}: {d.page_content}"
                           for i, d in enumerate(retriever.invoke(query), 1))

    yield search_kb
    kb.close()


@pytest.mark.parametrize("question, facts", QUESTIONS)
def test_agent_with_the_local_model_calls_the_tool_then_answers(small_chat_model, search_kb, question: str,
                                                               facts: list[str]) -> None:
    from langchain.agents import create_agent

    agent = create_agent(small_chat_model.bind(max_tokens=160), tools=[search_kb],
                         system_prompt="Answer questions about the product with the search_kb tool.")
    messages = agent.invoke({"messages": [("user", question)]}, {"recursion_limit": 8})["messages"]
    turns = [m for m in messages if isinstance(m, AIMessage)]
    assert any(t.tool_calls for t in turns), [t.content for t in turns]  # it searched
    assert all(not t.invalid_tool_calls for t in turns), [t.invalid_tool_calls for t in turns]
    final = turns[-1]
    assert not final.tool_calls and "<tool" not in final.content and "```" not in final.content
    assert any(f in final.content for f in facts), final.content
