#!/usr/bin/env bash
# The README's golden-chunks tables (English and Chinese), in one command:
#   bench/run_golden_chunks.sh [CONTEXTUAL_RETRIEVAL_DIR] [DRCD_DEV_JSON]
# 1. Anthropic's code benchmark (90 documents, 737 chunks, 248 queries): dense / BM25 / hybrid without contexts, with
#    the local variants header, document@1.5b, document+header@1.5b, chunk@0.5b, and with DeepSeek's contexts.
# 2. DRCD dev (383 articles, 1,000 paragraphs, 500 questions, seed 0): without contexts and with the title header.
# 3. DRCD, the first 100 articles (a partial run, 500 of their questions): header and document@1.5b.
# Each step prints its tables and writes them to OUT/golden-*/table.md; OUT/golden_chunks.md gets all three
# (OUT: $GOLDEN_OUT, default bench/out).
# Resumable: every context is cached as it is written (OUT/golden-*/contexts.sqlite), so an interrupted run
# continues where it stopped. On 2 idle AVX-512 cores expect about 2 h of contexts for step 1 (document@1.5b about
# 50 min, chunk@0.5b about 60 min) and 40 min for step 3, twice that on AVX2-only cores, plus 10-40 min of embedding
# per step.
set -euo pipefail
cd "$(dirname "$0")/.."
DATA="${1:-../shared/data/contextual-retrieval}"
DRCD="${2:-../shared/data/chinese/DRCD_dev.json}"
PY="${PYTHON:-.venv/bin/python}"
OUT="${GOLDEN_OUT:-bench/out}"
mkdir -p "$OUT"
"$PY" bench/bench_golden_chunks.py --data "$DATA" --out "$OUT"/golden-anthropic \
  --variants header document@1.5b document+header@1.5b chunk@0.5b
"$PY" bench/bench_golden_chunks.py --dataset drcd --data "$DRCD" --out "$OUT"/golden-drcd --variants header
"$PY" bench/bench_golden_chunks.py --dataset drcd --data "$DRCD" --out "$OUT"/golden-drcd-100 --eval-docs 100 \
  --variants header document@1.5b
{
  echo "# Golden chunks made here"
  echo
  echo "Written by \`bench/run_golden_chunks.sh\` on $(date -u +%Y-%m-%d) ($(nproc) cores)."
  echo
  echo "## Anthropic's code benchmark (P@k: the cookbook's Pass@k)"
  echo
  cat "$OUT"/golden-anthropic/table.md
  echo
  echo "## DRCD dev (one golden paragraph per question, so P@k is Recall@k)"
  echo
  cat "$OUT"/golden-drcd/table.md
  echo
  echo "## DRCD, first 100 articles only (a partial run: questions of those articles)"
  echo
  cat "$OUT"/golden-drcd-100/table.md
  echo
  echo "Cost of the local variants (s/chunk, LLM calls, tokens): $OUT/golden-*/costs.json"
} > "$OUT"/golden_chunks.md
echo "wrote $OUT/golden_chunks.md"
