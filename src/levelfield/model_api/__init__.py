"""The model API family: everything that stands between an agent and its model provider.

- `proxy`: the recording proxy that every model call of an agent given a key passes through; it
  runs on the host, listens inside the sandbox's network namespace and adds the real key outside
  the sandbox; `_recording` keeps what each call was, `allowlist` says what it carries (model
  calls only), `budget` keeps the tokens and dollars a trial may spend;
- `providers`: the providers it relays (Anthropic, OpenAI, Gemini) and where each carries its key;
- `scripted_model`: a stand-in provider on loopback (Anthropic Messages, OpenAI Chat and
  Responses, Gemini generateContent) that answers with a task's reference solution, for tests and
  for trying agents offline; `_script` is what it answers with, `_scripted_<provider>` the shapes;
- `conversation`: reading answers as they stream by (tokens, first token, tool calls, errors);
- `cost`: tokens × the price table (`prices.toml`) → dollars per trial;
- `_http`: the small loopback HTTP server the proxy and the scripted model share.

Downstream of `records`, `errors`, `masking` and `outcome`'s one rule on whose failure a call
is: the trial pipeline calls into this family, never the other way round.
"""
