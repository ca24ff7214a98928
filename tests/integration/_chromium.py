"""Headless Chromium for the tests that check what a page looks like in a real browser:
networking off, a throwaway profile. Missing: skipped with the reason, failed when CI=true."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def find_browser() -> str:
    found = next((path for name in BROWSERS if (path := shutil.which(name))), None)
    if found is None:
        message = "headless Chromium not found (Debian: apt-get install -y chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message + " (CI=true: install it, do not skip)")
        pytest.skip(message)
    return found


def chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [browser, *FLAGS, f"--user-data-dir={profile}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def measured(browser: str, page: Path, script: str, width: int, profile: Path) -> Any:
    """Load a copy of `page` with `script` appended in a window `width` pixels wide; `script`
    sets `window.measured`, which comes back as JSON (read from the DOM Chromium dumps)."""
    probe = page.with_name(page.stem + ".measured.html")
    report = (
        "<script>" + script + ";const out=document.createElement('pre');out.id='measured';"
        "out.textContent=JSON.stringify(window.measured);document.body.appendChild(out);"
        "</script>"
    )
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", report + "</body>"))
    done = chromium(browser, profile, f"--window-size={width},1000", "--dump-dom", probe.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="measured">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))
