"""A real Prometheus server (Debian's ``prometheus``) on a free loopback port, with a config and a data
directory of its own, scraping one target; stopped by its own pid."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django_semaphore.testing import _stop_with_parent, free_port, stop_process

from .servers import _Group

if TYPE_CHECKING:
    from typing_extensions import Self

CONFIG = """
global:
  scrape_interval: {interval}
  evaluation_interval: {interval}
scrape_configs:
  - job_name: django_semaphore
    metrics_path: {path}
    authorization:
      type: Bearer
      credentials: {token}
    static_configs:
      - targets: ["{target}"]
"""


class Prometheus(_Group):
    """``prometheus`` scraping ``target`` (host:port) at ``path`` every ``interval`` with a bearer token."""

    def __init__(self, target: str, path: str, token: str, interval: str = "1s") -> None:
        self.port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix="prometheus-"))
        (self.home / "prometheus.yml").write_text(
            CONFIG.format(interval=interval, path=path, token=json.dumps(token), target=target)
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed (Debian: apt-get install prometheus)")
        log = open(self.home / "prometheus.log", "ab")  # noqa: SIM115 - the process writes it until stopped
        self.process = subprocess.Popen(
            [
                *_stop_with_parent(),
                binary,
                f"--config.file={self.home / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.home / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited at start: {self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("prometheus was not ready within 60 s")

    def log(self) -> str:
        path = self.home / "prometheus.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def query(self, expr: str, at: float | None = None) -> list[dict[str, Any]]:
        """An instant query's result vector (or matrix), at ``at`` (Unix time) or now."""
        params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise AssertionError(f"{expr}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def query_range(self, expr: str, seconds: float, step: float = 1.0) -> list[dict[str, Any]]:
        """A range query's result matrix over the last ``seconds``: what a Grafana panel showing them draws."""
        end = time.time()
        params = {"query": expr, "start": f"{end - seconds:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        url = f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(params)}"
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise AssertionError(f"{expr}: {body}")
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def label_values(self, label: str) -> list[str]:
        """Every value ``label`` ever had in the stored series."""
        with urllib.request.urlopen(f"{self.url}/api/v1/label/{label}/values", timeout=10) as answer:
            body = json.load(answer)
        if body.get("status") != "success":
            raise AssertionError(f"{label}: {body}")
        values: list[str] = body["data"]
        return values

    def targets_up(self) -> bool:
        return any(float(sample["value"][1]) == 1 for sample in self.query("up"))

    def close(self) -> None:
        stop_process(self.process, timeout=15)
        shutil.rmtree(self.home, ignore_errors=True)
