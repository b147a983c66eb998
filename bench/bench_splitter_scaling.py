"""Benchmark: ctxrag's ChunkSplitter on one long single-line text (no newline at all) of growing size, next to
LangChain's RecursiveCharacterTextSplitter on the same text, as one table (seconds per split, chunks made).

The input is deterministic English sentences (8-20 words, ". " between them) or Chinese sentences ("。" between
them), all on one line: the case that made the former packer quadratic (0.5 / 1 / 2 MB took 1.1 / 3.9 / 15.1 s).
Every cell runs in its own subprocess so memory and caches do not mix.

    python bench/bench_splitter_scaling.py                       # 0.5, 1, 2, 8 MB, English and Chinese
    python bench/bench_splitter_scaling.py --mb 0.5 1 2 --lang en --engines ctxrag
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time

EN_WORDS = ("the pump moves water through a quiet valve while engineers measure flow pressure and heat in every "
            "greenhouse depot locker hall code access index vector chunk boundary retrieval answer").split()
ZH_WORDS = "检索 增强 生成 模型 向量 数据库 索引 查询 文档 知识库 分词 中文 服务器 客户端 缓存 内存 配置 参数 用户 权限".split()


def make_text(n_bytes: int, lang: str, seed: int = 7) -> str:
    rng = random.Random(seed)
    parts: list[str] = []
    size = 0
    while size < n_bytes:
        if lang == "en":
            words = [rng.choice(EN_WORDS) for _ in range(rng.randint(8, 20))]
            sentence = " ".join(words).capitalize() + ". "
        else:
            sentence = "".join(rng.choice(ZH_WORDS) for _ in range(rng.randint(5, 12))) + "。"
        parts.append(sentence)
        size += len(sentence.encode("utf-8"))
    return "".join(parts)


def run_one(engine: str, mb: float, lang: str) -> dict:
    text = make_text(int(mb * 1_000_000), lang)
    if engine == "ctxrag":
        from ctxrag.loading import ChunkSplitter

        splitter = ChunkSplitter(chunk_size=800, chunk_overlap=100)
        t0 = time.perf_counter()
        n = len(splitter.split_text(text))
    else:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        splitter = RecursiveCharacterTextSplitter(chunk_size=800, chunk_overlap=100,
                                                  separators=["\n\n", "\n", "。", ". ", " ", ""])
        t0 = time.perf_counter()
        n = len(splitter.split_text(text))
    return {"seconds": time.perf_counter() - t0, "chunks": n, "chars": len(text)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, nargs="+", default=[0.5, 1, 2, 8])
    ap.add_argument("--lang", nargs="+", default=["en", "zh"], choices=["en", "zh"])
    ap.add_argument("--engines", nargs="+", default=["ctxrag", "langchain"], choices=["ctxrag", "langchain"])
    ap.add_argument("--one", nargs=3, metavar=("ENGINE", "MB", "LANG"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], float(args.one[1]), args.one[2])))
        return
    print(f"{'lang':4s} {'MB':>5s} " + " ".join(f"{e + ' s':>14s} {e + ' chunks':>16s}" for e in args.engines))
    for lang in args.lang:
        for mb in args.mb:
            cells = []
            for engine in args.engines:
                out = subprocess.run([sys.executable, __file__, "--one", engine, str(mb), lang],
                                     capture_output=True, text=True, check=True)
                r = json.loads(out.stdout)
                cells.append(f"{r['seconds']:14.2f} {r['chunks']:16d}")
            print(f"{lang:4s} {mb:5.1f} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
