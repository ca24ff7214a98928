"""Egress bandwidth two ways: what a trial moved (the meter), what the host's index gives (probe).

The meter reads the byte counters of the trial's own network namespace (/proc/PID/net/dev; the
sandbox gives it its own link, `sandbox/_netns.py`) every NET_SAMPLE_EVERY_S and books them to
the phase in progress. A sampling interval in which any byte moved is *busy*; throughput is the
bytes over the busy time, so a trial that downloads for 2 s of a 60 s phase reports the
download's rate, not a thirtieth of it. A transfer shorter than one interval still counts a
whole interval: the rate is a lower bound at that resolution.

The probe times one fixed file from the package index pip is configured to use (PIP_INDEX_URL,
then pip.conf's `index-url`, else PyPI), at most once every `every_s` per run, in a background
thread so that no trial waits for it. Credentials in an index URL never leave this module.
"""

from __future__ import annotations

import base64
import configparser
import contextlib
import hashlib
import os
import re
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType

from levelfield.masking import Masker, url_password
from levelfield.records import IndexProbe, NetworkUse

NET_SAMPLE_EVERY_S = 0.05  # budget < 1 % of a core: benchmarks/network_overhead.py checks it
DEFAULT_INDEX = "https://pypi.org/simple/"
# A wheel that never changes once published (2.1 MB): long enough to time, small enough to repeat.
DEFAULT_PROBE_FILE = "pip/pip-24.0-py3-none-any.whl"
PROBE_TIMEOUT_S = 30.0
PROBE_EVERY_S = 1800.0  # at most one probe per half hour per run
# pip reads these in this order, later files winning (pip's "Configuration" documentation).
PIP_CONFIG_FILES = (
    Path("/etc/pip.conf"),
    Path("/etc/xdg/pip/pip.conf"),
    Path.home() / ".pip" / "pip.conf",
    Path.home() / ".config" / "pip" / "pip.conf",
)


@dataclass(frozen=True, slots=True)
class NetCounters:
    """Bytes and packets through every interface of a namespace but loopback."""

    rx_bytes: int
    tx_bytes: int
    rx_packets: int = 0
    tx_packets: int = 0



def counters(pid: int) -> NetCounters | None:
    """The namespace of `pid` as /proc/PID/net/dev sees it; None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/net/dev").read_text()
    except OSError:
        return None
    return parse_net_dev(text)


def parse_net_dev(text: str) -> NetCounters:
    """`iface: rx_bytes rx_packets ... (8 fields) tx_bytes tx_packets ...`; loopback left out."""
    rx = tx = rxp = txp = 0
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        fields = rest.split()
        if name.strip() == "lo" or len(fields) < 10:
            continue
        rx, rxp = rx + int(fields[0]), rxp + int(fields[1])
        tx, txp = tx + int(fields[8]), txp + int(fields[9])
    return NetCounters(rx, tx, rxp, txp)


@dataclass
class _Phase:
    rx: int = 0
    tx: int = 0
    busy_s: float = 0.0

    def use(self) -> NetworkUse:
        moved = self.rx + self.tx
        rate = round(moved / self.busy_s, 1) if self.busy_s > 0 and moved else None
        return NetworkUse(
            rx_bytes=self.rx, tx_bytes=self.tx, busy_s=round(self.busy_s, 3), throughput_bps=rate
        )


class NetworkMeter:
    """Samples the trial's namespace beside the phases; `mark(phase)` starts booking to `phase`."""

    def __init__(self, pid: int | None, every_s: float = NET_SAMPLE_EVERY_S) -> None:
        self.pid, self.every_s = pid, every_s
        self.phases: dict[str, _Phase] = {}
        self._current = "start"
        self._last: tuple[float, NetCounters] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="levelfield-net", daemon=True)

    def __enter__(self) -> NetworkMeter:
        if self.pid:
            self._take()
            self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._take()

    def mark(self, phase: str) -> None:
        """Book what moved so far to the phase that is ending, then start `phase`."""
        self._take()
        with self._lock:
            self._current = phase

    def uses(self) -> dict[str, NetworkUse]:
        """Per phase, and `trial` for their sum; empty when the trial had no namespace to read."""
        if self._last is None:
            return {}
        total = _Phase()
        for phase in self.phases.values():
            total.rx, total.tx = total.rx + phase.rx, total.tx + phase.tx
            total.busy_s += phase.busy_s
        return {**{k: v.use() for k, v in self.phases.items()}, "trial": total.use()}

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self._take()

    def _take(self) -> None:
        if not self.pid:
            return
        now, reading = time.monotonic(), counters(self.pid)
        if reading is None:  # the namespace's process is gone: the series ends here
            return
        with self._lock:
            phase = self.phases.setdefault(self._current, _Phase())
            if self._last is not None:
                t, before = self._last
                rx, tx = reading.rx_bytes - before.rx_bytes, reading.tx_bytes - before.tx_bytes
                phase.rx, phase.tx = phase.rx + max(0, rx), phase.tx + max(0, tx)
                if rx > 0 or tx > 0:
                    phase.busy_s += now - t
            self._last = (now, reading)


# -- the index probe ---------------------------------------------------------------------------


def configured_index(environ: dict[str, str] | None = None) -> str:
    """The index pip would use: PIP_INDEX_URL, else `index-url` from pip.conf, else PyPI."""
    environ = dict(os.environ if environ is None else environ)
    if environ.get("PIP_INDEX_URL"):
        return environ["PIP_INDEX_URL"]
    files = [*PIP_CONFIG_FILES]
    if environ.get("VIRTUAL_ENV"):
        files.append(Path(environ["VIRTUAL_ENV"]) / "pip.conf")
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    found = DEFAULT_INDEX
    for path in files:
        parser = configparser.ConfigParser()
        with contextlib.suppress(OSError, configparser.Error):
            parser.read(path)
            for section in ("global", "install"):
                if parser.has_option(section, "index-url"):
                    found = parser.get(section, "index-url")
    return found


def without_credentials(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


_HREF = re.compile(r'href="([^"]+)"', re.IGNORECASE)


def probe_index(
    index_url: str, probe_file: str = DEFAULT_PROBE_FILE, timeout_s: float = PROBE_TIMEOUT_S
) -> IndexProbe:
    """Find `project/filename` on the index's simple page, download it, time the download.

    Never raises: an unreachable index is a finding (recorded with its error), not a failure.
    The file's sha256 is checked when the index gives one, so a captive portal's page or a
    truncated body is not timed as the file."""
    project, _, filename = probe_file.partition("/")
    started = datetime.now(UTC).isoformat(timespec="milliseconds")
    shown = without_credentials(index_url)
    auth = _basic_auth(index_url)
    try:
        page_url = urllib.parse.urljoin(shown.rstrip("/") + "/", f"{project}/")
        page = _get(page_url, timeout_s, auth).decode(errors="replace")
        link = next((h for h in _HREF.findall(page) if _filename(h) == filename), None)
        if link is None:
            raise LookupError(f"{filename} not listed on the index page of {project}")
        file_url = urllib.parse.urljoin(page_url, link)
        same_host = urllib.parse.urlsplit(file_url).netloc == urllib.parse.urlsplit(page_url).netloc
        t0 = time.monotonic()
        body = _get(file_url, timeout_s, auth if same_host else None)
        duration = time.monotonic() - t0
        _check_digest(body, link)
    except Exception as exc:  # every failure to fetch is the probe's result
        said = Masker().add(url_password(index_url)).text(f"{type(exc).__name__}: {exc}")
        return IndexProbe(index_url=shown, at=started, error=said[:300])
    return IndexProbe(
        index_url=shown,
        file_url=without_credentials(file_url.split("#")[0]),
        at=started,
        bytes=len(body),
        duration_s=round(duration, 4),
        throughput_bps=round(len(body) / duration, 1) if duration > 0 else None,
    )


def _filename(href: str) -> str:
    return urllib.parse.unquote(urllib.parse.urlsplit(href).path.rsplit("/", 1)[-1])


def _basic_auth(url: str) -> str | None:
    """The index's credentials as pip sends them: in a header, never in the URL it requests
    (urllib would take `user:token@host` for a host and port, and say so in its error)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return None
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def _get(url: str, timeout_s: float, auth: str | None = None) -> bytes:
    headers = {"User-Agent": "levelfield-index-probe"}
    if auth is not None:
        headers["Authorization"] = auth
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        return bytes(response.read())


def _check_digest(body: bytes, link: str) -> None:
    fragment = urllib.parse.urlsplit(link).fragment
    expected = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
    if expected is not None and hashlib.sha256(body).hexdigest() != expected:
        raise ValueError("downloaded file does not match the index's sha256")


class IndexProber:
    """At most one probe every `every_s`, run in the background; trials read the latest result."""

    def __init__(
        self,
        index_url: str | None = None,
        *,
        every_s: float = PROBE_EVERY_S,
        probe_file: str = DEFAULT_PROBE_FILE,
    ) -> None:
        self.index_url = index_url or configured_index()
        self.every_s, self.probe_file = every_s, probe_file
        self.results: list[IndexProbe] = []
        self._started_at: float | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def latest(self) -> IndexProbe | None:
        """The last finished probe; starts the next one when the last is `every_s` old."""
        self._maybe_start()
        with self._lock:
            return self.results[-1] if self.results else None

    def wait(self, timeout_s: float = PROBE_TIMEOUT_S * 2) -> None:
        """Let a probe in flight finish (the run's end records it)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)

    def _maybe_start(self) -> None:
        if self.every_s <= 0:
            return
        with self._lock:
            now = time.monotonic()
            busy = self._thread is not None and self._thread.is_alive()
            due = self._started_at is None or now - self._started_at >= self.every_s
            if busy or not due:
                return
            self._started_at = now
            thread = threading.Thread(target=self._probe, name="levelfield-probe", daemon=True)
            self._thread = thread
            thread.start()

    def _probe(self) -> None:
        result = probe_index(self.index_url, self.probe_file)
        with self._lock:
            self.results.append(result)
