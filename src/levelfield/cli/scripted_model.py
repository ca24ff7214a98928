"""`levelfield scripted-model`: the scripted model server, for trying CLI agents and the proxy
without a model API (and for the tests). It answers with the reference solution of each task of
a dataset, one command at a time, as a model would answer with tool calls."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console


def scripted_model(
    dataset: Annotated[Path, typer.Argument(help="Tasks whose solution/solve.sh it answers with.")],
    port: Annotated[int, typer.Option(help="Port on 127.0.0.1; 0 picks a free one.")] = 8765,
    fail: Annotated[
        list[str] | None,
        typer.Option(
            help="STATUS@N answers call N with STATUS; STATUS@N+ every call from N. STATUS may "
            "also be hang (no answer), reset (the connection reset mid-answer) or stream-error "
            "(the protocol's error event inside a 200 stream)."
        ),
    ] = None,
    require_key: Annotated[
        str | None, typer.Option(help="Answer 401 unless a request carries this key.")
    ] = None,
    retry_after_s: Annotated[float, typer.Option(help="Retry-After sent with a 429.")] = 0.0,
) -> None:
    """Serve the Anthropic Messages, OpenAI Chat Completions and Responses, and Google Gemini
    APIs on loopback, streaming included, until Ctrl-C. Point an agent's --base-url at it."""
    from levelfield.model_api.scripted_model import Failure, ScriptedModel, serve

    try:
        failures = [Failure.parse(text) for text in fail or []]
        model = ScriptedModel.for_dataset(
            dataset, failures=failures, require_key=require_key, retry_after_s=retry_after_s
        )
    except (ValueError, OSError) as exc:
        raise typer.BadParameter(str(exc)) from None
    server = serve(model, port)
    console = Console()
    url = f"http://127.0.0.1:{server.port}"
    console.print(f"scripted model for {len(model.by_instruction)} task(s) on {url}")
    console.print(f"  Anthropic and Gemini: --base-url {url}    OpenAI: --base-url {url}/v1")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        console.print(f"stopped after {model.calls} call(s)")
    finally:
        server.stop()


def register(app: typer.Typer) -> None:
    app.command("scripted-model")(scripted_model)
