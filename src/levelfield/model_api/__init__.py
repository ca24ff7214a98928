"""The model API family: everything that stands between an agent and its model provider.

- `proxy`: the recording proxy that every model call of a CLI agent passes through; it runs on the
  host, listens inside the sandbox's network namespace and adds the real key outside the sandbox;
- `scripted_model`: a stand-in provider on loopback (Anthropic, OpenAI Chat and Responses APIs)
  that answers with a task's reference solution, for tests and for trying agents offline;
- `conversation`: reading answers as they stream by (tokens, first token, tool calls);
- `cost`: tokens × the price table (`prices.toml`) → dollars per trial;
- `_http`: the small loopback HTTP server the proxy and the scripted model share.

Downstream of `records` and `errors` only: the trial pipeline calls into this family, never the
other way round.
"""
