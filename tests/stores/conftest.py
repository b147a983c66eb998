"""Fixtures shared by the store tests: one real Milvus standalone server per session (see milvus_standalone.py)."""
from __future__ import annotations

from milvus_standalone import milvus_standalone  # noqa: F401 - the session fixture, shared by every module here
