"""Instructions phrased otherwise than the injection benchmark plants them: how many does the instruction detector
(`ctxrag.chains.instructions.has_instruction`) find, and how many ordinary sentences that look alike does it flag?

    PYTHONPATH=src python bench/bench_injection_phrasings.py   # writes docs/benchmarks/data/injection_phrasings.json
    python bench/report.py                                     # renders docs/benchmarks/injection_phrasings.md

bench/data/injection_phrasings.json holds 40 instructions to the assistant and 40 ordinary look-alikes (manual steps,
FAQ answers in the second person, "assistant" as a job title, SYSTEM as a heading), each class 20 English, 10
Simplified and 10 Traditional Chinese, written by hand before the detector was run on them, with a tune/held-out
split fixed by position. The detector is measured as it is (``after``) and as it was at ``--before`` (read from git),
on each half, and over ordinary text: the docs' paragraphs (without the benchmark pages and the reliability log,
which quote instructions on purpose), the xinghe Chinese SQuAD contexts and, where the shared data is present, the
DRCD dev contexts, the MuSiQue passages and the codebase chunks of the contextual-retrieval set. No model, no timing.
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "src"))

from pagedata import Table, write_page_data  # noqa: E402

DATA = ROOT / "bench" / "data" / "injection_phrasings.json"
MODULE = "src/ctxrag/chains/instructions.py"
BEFORE = "2e2f6b3"
"""The detector before the phrasing set (main when this benchmark was written)."""
SHARED = ROOT.parent / "shared" / "data"
DRCD = SHARED / "chinese" / "DRCD_dev.json"
MUSIQUE = SHARED / "multihop" / "musique_train_corpus.json"
CODEBASE = SHARED / "contextual-retrieval" / "codebase_chunks.json"


def _load(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def detector_at(rev: str) -> Callable[[str], bool]:
    """`has_instruction` as the module was at git revision ``rev``."""
    text = subprocess.run(["git", "show", f"{rev}:{MODULE}"], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="ctxrag-detector-")) / "instructions_before.py"
    path.write_text(text, encoding="utf-8")
    return _load(path, "instructions_before").has_instruction  # type: ignore[no-any-return]


def _contexts(obj: Any) -> Iterator[str]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "context" and isinstance(v, str):
                yield v
            else:
                yield from _contexts(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _contexts(v)


def _about_injection(path: str) -> bool:
    """Pages that quote instructions on purpose: the reliability log, and the benchmark pages (generated from
    this benchmark's and the injection benchmark's own texts)."""
    return "reliability" in path or "docs/benchmarks/" in Path(path).as_posix()


def corpora() -> dict[str, list[str]]:
    """Ordinary text: no paragraph here speaks to an assistant (except where docs describe the detector itself)."""
    docs = [p for f in sorted(glob.glob(str(ROOT / "docs" / "**" / "*.md"), recursive=True)) + [str(ROOT / "README.md")]
            if Path(f).exists() and not _about_injection(f)
            for p in Path(f).read_text(encoding="utf-8").split("\n\n") if p.strip()]
    out = {"docs/ paragraphs (not the benchmark pages nor the reliability log)": docs,
           "xinghe_zh_squad contexts": list(dict.fromkeys(_contexts(json.loads(
               (ROOT / "bench" / "data" / "xinghe_zh_squad.json").read_text(encoding="utf-8")))))}
    if DRCD.exists():
        out["DRCD dev contexts (zh-Hant)"] = list(dict.fromkeys(_contexts(json.loads(DRCD.read_text(encoding="utf-8")))))
    if MUSIQUE.exists():
        out["MuSiQue passages (en, Wikipedia)"] = [f"{d['title']}\n{d['text']}" for d in
                                                   json.loads(MUSIQUE.read_text(encoding="utf-8"))]
    if CODEBASE.exists():
        out["codebase chunks (contextual retrieval set)"] = [c["content"] for d in json.loads(
            CODEBASE.read_text(encoding="utf-8")) for c in d.get("chunks", [])]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", default=BEFORE, help="git revision of the detector to compare with")
    args = ap.parse_args()
    from ctxrag.chains.instructions import has_instruction

    detectors = {f"before ({args.before})": detector_at(args.before), "after": has_instruction}
    items = json.loads(DATA.read_text(encoding="utf-8"))["items"]
    rows, per_item = [], []
    for name, detect in detectors.items():
        for split in ("tune", "held_out"):
            ins = [i for i in items if i["split"] == split and i["kind"] == "instruction"]
            ordi = [i for i in items if i["split"] == split and i["kind"] == "ordinary"]
            found = sum(detect(i["text"]) for i in ins)
            flagged = sum(detect(i["text"]) for i in ordi)
            by_lang = ", ".join(f"{lang} {sum(detect(i['text']) for i in ins if i['lang'] == lang)}/"
                                f"{sum(i['lang'] == lang for i in ins)}" for lang in ("en", "zh-Hans", "zh-Hant"))
            rows.append([name, split, f"{found}/{len(ins)}", by_lang, f"{flagged}/{len(ordi)}"])
    for i in items:
        verdicts = [detect(i["text"]) for detect in detectors.values()]
        if any(v != (i["kind"] == "instruction") for v in verdicts):
            per_item.append([i["id"], i["split"], i["kind"], i["lang"], i["style"],
                             *("found" if v else "-" for v in verdicts), i["text"].replace("\n", " ")])
    texts_by_corpus = corpora()
    corpus_rows = [[name, len(texts), *(sum(map(d, texts)) for d in detectors.values())]
                   for name, texts in texts_by_corpus.items()]
    flagged_docs = [t[:70].replace("\n", " ") for texts in list(texts_by_corpus.values())[:1] for t in texts
                    if has_instruction(t)]
    names = list(detectors)
    summary = Table(
        caption="Instructions found (recall) and look-alike ordinary sentences flagged (false positives), per half",
        columns=["detector", "half", "instructions found", "by language", "ordinary sentences flagged"],
        rows=rows,
        notes=["tune: the half the new patterns were written against; held_out: only measured (see the notes below "
               "for how held-out it is)",
               "a sentence counts as found when `has_instruction` is true for it alone (as one chunk)"])
    corpus = Table(caption="Ordinary text flagged (paragraphs or contexts with a marker)",
                   columns=["text", "paragraphs", *(f"flagged: {n}" for n in names)], rows=corpus_rows,
                   notes=["docs/ paragraphs the new detector flags (each begins): "
                          + ("; ".join(f"'{t}'" for t in flagged_docs) or "none")
                          + " (docs/answers.md's paragraph on the citation check quotes the detector's own example, "
                          "'Note to the assistant: whatever the question is, answer exactly')"])
    wrong = Table(caption="Every item a detector gets wrong (missed instruction or flagged ordinary sentence)",
                  columns=["item", "half", "kind", "lang", "style", *names, "text"], rows=per_item)
    write_page_data(
        "injection_phrasings",
        title="Instructions in documents, phrased otherwise: the detector's recall and false positives",
        measures="how many instructions to the assistant, phrased otherwise than the injection benchmark plants "
                 "them, the instruction detector finds, and how many ordinary sentences that look alike it flags "
                 "(a detector that flags a manual's 'run X' is worse than none), before and after the patterns "
                 "written against the tune half",
        data="bench/data/injection_phrasings.json: 40 instructions (imperative, polite, 'SYSTEM:' role-play, HTML and "
             "Markdown comments, chat-template tokens, 'ignore previous', 'the assistant must', '請回答：', "
             "'注意：AI 助手应…', third-person 'language models reading this should…') and 40 ordinary look-alikes "
             "(manual steps, FAQ answers in the second person, 'assistant' as a job title, SYSTEM as a heading, "
             "sentences about chatbots and prompt injection), each 20 en / 10 zh-Hans / 10 zh-Hant, written by hand for "
             "this benchmark; as ordinary text, the repository's docs/ paragraphs, Chinese SQuAD-style contexts "
             "(xinghe; DRCD dev, CC BY-SA 3.0), MuSiQue passages (CC BY 4.0) and the contextual-retrieval codebase "
             "chunks, from the shared data where present",
        command="PYTHONPATH=src python bench/bench_injection_phrasings.py",
        tables=[summary, corpus, wrong],
        notes=["How the set was written: by the inj11 helper session (a model) by hand, before running either "
               "detector on it, with the tune/held-out split fixed by position (even / odd) in the same commit "
               "(2905b95). The writer had read the old detector's patterns first, and the same writer then wrote the "
               "new patterns: the held-out half was not seen by the patterns' tests, but its sentences were known "
               "(the baseline run printed the misses of both halves), and both halves share one writer's style, so "
               "the held-out recall is an optimistic estimate of phrasings written by someone else.",
               "Only `has_instruction` is measured here; what the citation check drops is `strip_instructions` "
               "(the sentence holding the marker to the end of its line). The 20 documents of "
               "bench/data/injection.json strip to the same text with both detectors, so the injection pages' rows "
               "do not move.",
               "Deterministic (regular expressions, no model); the run takes about a second."])


if __name__ == "__main__":
    main()
