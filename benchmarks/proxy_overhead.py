"""Claim: the recording proxy adds a few milliseconds per model call, small beside a real model's
latency (seconds), so recording every call of a CLI agent does not change what it measures.

Measures, in one run on this machine, streamed Anthropic Messages calls made with the `anthropic`
SDK to the scripted model on loopback: directly, and through the proxy (token check, key swap,
relay, SSE parsing, a line of conversation.jsonl per call). Prints medians, p90s and the added
milliseconds. `python benchmarks/proxy_overhead.py [N]`.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import anthropic
from pydantic import SecretStr

from levelfield.model_api.proxy import ModelProxy, Route
from levelfield.model_api.scripted_model import ScriptedModel, serve

KEY = "sk-benchmark-key-000000"
TOOLS = [{"name": "Bash", "input_schema": {"type": "object", "properties": {"command": {}}}}]
HISTORY = [{"role": "user", "content": "x" * 20_000}]  # a conversation of ~5 k tokens


def timings(client: anthropic.Anthropic, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with client.messages.stream(
            model="m", max_tokens=50, messages=HISTORY, tools=TOOLS
        ) as stream:
            stream.get_final_message()
        out.append(time.perf_counter() - t0)
    return out


def ms(values: list[float]) -> str:
    p90 = statistics.quantiles(values, n=10)[-1]
    return f"median {statistics.median(values) * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms"


def main(n: int = 200) -> None:
    model = ScriptedModel(["echo hello"], require_key=KEY)
    server = serve(model)
    upstream = f"http://127.0.0.1:{server.port}"
    with (
        tempfile.TemporaryDirectory() as tmp,
        ModelProxy(
            [Route("anthropic", upstream, SecretStr(KEY))], conversation=Path(tmp) / "c.jsonl"
        ) as proxy,
    ):
        via = proxy.base_urls(proxy.listen())["anthropic"]
        direct_client = anthropic.Anthropic(api_key=KEY, base_url=upstream, max_retries=0)
        proxied_client = anthropic.Anthropic(api_key=proxy.token, base_url=via, max_retries=0)
        timings(direct_client, 10), timings(proxied_client, 10)  # warm both
        direct, proxied = timings(direct_client, n), timings(proxied_client, n)
        recorded = len(proxy.calls)
    server.stop()
    added = (statistics.median(proxied) - statistics.median(direct)) * 1000
    print(f"direct   {ms(direct)}")
    print(f"proxied  {ms(proxied)}  ({recorded} calls recorded)")
    print(
        f"added per call: {added:.1f} ms (median), ratio "
        f"{statistics.median(proxied) / statistics.median(direct):.2f}x"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
