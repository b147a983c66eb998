"""Support shared by ctxrag's tests, benchmarks and notebooks (none of which import each other):

- `ctxrag.testing.llm_server`: a real ``llama_cpp.server`` on 127.0.0.1 with the local GGUF (`run_llama_server`),
  a counting reverse proxy (`CountingProxy`), free ports and the shared model cache folder;
- `ctxrag.testing.shared_server`: one such server per test run, shared by its processes (pytest-xdist workers);
- `ctxrag.testing.reply_cache`: the proxy in front of it that replays recorded deterministic replies
  (``tests/llm_replies``) and records new ones, so a re-run decodes nothing it decoded before;
- `ctxrag.testing.processes`: stopping a started process (terminate, wait, kill);
- `ctxrag.testing.bernoulli`: the four-passage Bernoulli/Euler multi-hop fixture with hand-written triplets.

Nothing in the library imports this package.
"""
