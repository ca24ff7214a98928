"""`levelfield images`: container images for the oci backend on machines without a registry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from levelfield.cli._console import console, err


def offline_bases(
    cache_dir: Annotated[
        Path, typer.Option(help="Where the slow parts are kept between runs.")
    ] = Path("/var/cache/levelfield"),
    mirror: Annotated[str | None, typer.Option(help="Debian mirror (default: the host's).")] = None,
    with_uv: Annotated[bool, typer.Option(help="Also prepare the uv shim (--uv-shim).")] = True,
) -> None:
    """Build stand-in base images (python:3.13-slim-bookworm, ubuntu:24.04, ...) from Debian,
    for machines that reach no image registry. First run ~5-10 min; then cached."""
    from levelfield.sandbox.oci import build_offline_bases

    for stand_in in build_offline_bases(
        cache_dir=cache_dir, mirror=mirror, with_uv=with_uv, log=err.print
    ):
        how = "cached" if stand_in.cached else "built"
        console.print(f"{stand_in.tag}: {stand_in.description} ({how})")


def register(app: typer.Typer) -> None:
    """Add the `images` group."""
    images_app = typer.Typer(no_args_is_help=True, help="Container images for the oci backend.")
    images_app.command("offline-bases")(offline_bases)
    app.add_typer(images_app, name="images")
