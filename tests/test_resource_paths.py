"""`ctxrag.resource_paths`: the shipped files the router and the routing evaluation read are where the paths say."""
from __future__ import annotations

import json
from pathlib import Path

from ctxrag.resource_paths import default_routing_set, demo_corpus, demo_questions, offtopic_corpus, resource_dir, routing_dir


def test_shipped_resources_exist() -> None:
    assert default_routing_set().is_file() and default_routing_set().parent == routing_dir()
    assert offtopic_corpus().is_dir() and any(offtopic_corpus().iterdir())
    assert (resource_dir("stopwords") / "en.txt").is_file()
    assert (routing_dir() / "router_vectors.npy").is_file()


def test_demo_files_ship_in_the_package_and_examples_links_to_them() -> None:
    assert sorted(p.name for p in demo_corpus().iterdir()) == [
        "deployment_guide.md", "faq.jsonl", "quota_calculator.py", "release_notes.txt", "support_policy.html",
        "xinghe_overview.md"]
    assert all(isinstance(q["question"], str) for q in json.loads(demo_questions().read_text(encoding="utf-8")))
    examples = Path(__file__).resolve().parents[1] / "examples"  # one copy: the repository's examples/ links here
    assert (examples / "sample_corpus").resolve() == demo_corpus().resolve()
    assert (examples / "sample_questions.json").resolve() == demo_questions().resolve()
