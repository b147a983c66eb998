#!/usr/bin/env bash
# LLM reranking on the contextual-retrieval benchmark, on a random sample of queries (the local chat model, default the 1.5B, scores
# each of the top-10 fused chunks with a yes/no logprob: seconds per chunk on 2 cores).
#   bench/run_rerank_eval.sh [N_QUERIES] [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-20}"
DATA="${2:-../shared/data/contextual-retrieval}"
mkdir -p bench/out docs
ctxrag eval retrieval --format anthropic "$DATA" --config bench/rerank_llm.yaml --sample "$N" --seed 0 -k 5,10 \
  --json bench/out/eval_rerank_llm.json --markdown docs/eval_rerank_llm.md
