"""Fixtures of the evaluation tests: the hand-made fixture folder and the shared benchmark data (skipped if absent)."""
from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture
def anthropic_data() -> Path:
    path = REPO.parent / "shared" / "data" / "contextual-retrieval"
    if not (path / "evaluation_set.jsonl").is_file():
        pytest.skip(f"benchmark data not found at {path}")
    return path


@pytest.fixture
def musique_data() -> Path:
    path = REPO.parent / "shared" / "data" / "multihop"
    if not (path / "musique_train.json").is_file():
        pytest.skip(f"MuSiQue data not found at {path}")
    return path
