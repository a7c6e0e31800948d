"""``make demo``: the example site with everything it needs, stopped together on Ctrl-C.

Starts a Redis-protocol server on a free loopback port (unless REDIS_URL is
set) with its data under example_project/var/ (or ``--data-dir``), migrates,
creates the demo superuser and the REST API's two users with their tokens,
and runs the site under uvicorn (ASGI: its pages, its REST API and its live
page's WebSockets, in one server) and a Celery worker (for the price
refreshes in example_project/shop/tasks.py). ``--smoke`` does all of
that, fetches one page, has the worker run one task and stops: the test suite
uses it to prove the start-up path works and leaves nothing running.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from django_semaphore.testing import RedisServer, free_port, stop_process  # noqa: E402

DEMO_USER, DEMO_PASSWORD = "admin", "admin"
# The REST API's users (example_project/shop/rest.py) and their tokens, for curl.
API_TOKENS = {"alice": "alice-demo-token", "bob": "bob-demo-token"}
DEFAULT_PORT = 8000
CREATE_SUPERUSER = f"""
from django.contrib.auth import get_user_model
from rest_framework.authtoken.models import Token
User = get_user_model()
if not User.objects.filter(username={DEMO_USER!r}).exists():
    User.objects.create_superuser({DEMO_USER!r}, "admin@example.com", {DEMO_PASSWORD!r})
for name, key in {API_TOKENS!r}.items():
    user, _ = User.objects.get_or_create(username=name)
    Token.objects.get_or_create(user=user, defaults={{"key": key}})
"""


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(HERE / "manage.py"), *args], env=env, check=True, cwd=ROOT)


RUN_ONE_TASK = """
from example_project.shop.tasks import refresh_supplier_prices
prices = refresh_supplier_prices.delay(0).get(timeout=60)
print(f"Smoke test: the worker ran a supplier task ({len(prices)} prices); stopping.")
"""


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A Celery worker for the shop's tasks; two pool processes, enough to show tasks sharing the supplier."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "example_project",
            "worker",
            "--pool=prefork",
            "--concurrency=2",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
        ],
        env=env,
        cwd=ROOT,
    )


def wait_for(url: str, site: subprocess.Popen[bytes], timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status)
        except OSError:
            if site.poll() is not None:
                raise RuntimeError(f"the site exited with status {site.returncode}") from None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def smoke_api(base: str) -> str:
    """One request to the REST API with a demo token, and one message from a live WebSocket."""
    from websockets.sync.client import connect

    asked = urllib.request.Request(
        base + "/rest/orders/?seconds=0", headers={"Authorization": f"Token {API_TOKENS['alice']}"}
    )
    with urllib.request.urlopen(asked, timeout=10) as response:
        api = int(response.status)
    # From the site's own page, as a browser says: the site accepts sockets only from its own hosts.
    with connect(base.replace("http://", "ws://") + "/ws/live/", origin=base, open_timeout=10) as socket:  # type: ignore[arg-type]
        said = socket.recv(timeout=10)
    return f"Smoke test: the REST API answered {api}; the live WebSocket said {said!r}."


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        # As uvicorn binds: a port left in TIME_WAIT by the last run is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def start_site(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """uvicorn, one process, serving the ASGI application: HTTP and WebSocket on one port.

    Under ASGI Django runs each sync view in a thread of its own request's, so concurrent requests
    overlap as they would under a production server.
    """
    command = [sys.executable, "-m", "uvicorn", "example_project.asgi:application", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--ws", "auto", "--lifespan", "off", "--log-level", "warning"]
    return subprocess.Popen(command, env=env, cwd=ROOT)


def banner(server: RedisServer, base: str, site: subprocess.Popen[bytes], worker: subprocess.Popen[bytes]) -> str:
    if server.external_url:
        started = f" ({server.version}, from REDIS_URL)"
    else:
        started = f" ({server.version}, {server.binary}), started for you"
    load = "make load" if base.endswith(f":{DEFAULT_PORT}") else f'make load LOAD_ARGS="--url {base}"'
    status = (
        f"REDIS_URL={shlex.quote(server.url)} .venv/bin/python example_project/manage.py semaphore_status --holders"
    )
    pids = f"site {site.pid}, worker {worker.pid}" + (
        "" if server.process is None else f", server {server.process.pid}"
    )
    return (
        f"\n  Site:       {base}/   (what each page demonstrates)"
        f"\n  Dashboard:  {base}/admin/django_semaphore/semaphoredashboard/"
        f"\n              user {DEMO_USER!r}, password {DEMO_PASSWORD!r}"
        f"\n  Redis:      {server.url}{started}"
        f"\n  Web server: uvicorn (ASGI: the pages, the REST API and the live page's WebSockets), on loopback"
        f"\n              (docs/install.md: gunicorn or uvicorn, and how limits relate to their workers)"
        f"\n  REST API:   {base}/rest/orders/ with Authorization: Token {API_TOKENS['alice']} (or {API_TOKENS['bob']})"
        f"\n  WebSockets: {base}/live/   (3 open sockets per user; one more is closed with 1013)"
        f"\n  Load:       {load}   (in a second terminal; 503s appear within seconds)"
        f"\n  Tasks:      a Celery worker runs shop.tasks (the landing page queues price refreshes)"
        f"\n  Status:     {status}"
        f"\n  Processes:  {pids}; Ctrl-C stops them all.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")) or None)
    parser.add_argument("--data-dir", type=Path, default=HERE / "var", help="database and server data")
    parser.add_argument("--smoke", action="store_true", help="start, fetch one page, stop")
    args = parser.parse_args(argv)
    # `kill PID` stops the demo as cleanly as Ctrl-C does. Ctrl-C's handler is
    # set explicitly: a shell starting us in the background hands us SIGINT
    # ignored, and the site would inherit that and outlive us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, signal.default_int_handler)

    data_dir = args.data_dir.resolve()
    external = bool(os.environ.get("REDIS_URL"))
    (data_dir / "redis").mkdir(parents=True, exist_ok=True)
    server = RedisServer(data_dir=None if external else str(data_dir / "redis"))
    site: subprocess.Popen[bytes] | None = None
    worker: subprocess.Popen[bytes] | None = None
    try:
        server.start()
        env = {
            **os.environ,
            "REDIS_URL": server.url,
            "DEMO_DB": str(data_dir / "db.sqlite3"),
            "DJANGO_SETTINGS_MODULE": "example_project.settings",
        }
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(env, "shell", "--no-imports", "-c", CREATE_SUPERUSER)
        port = args.port or (DEFAULT_PORT if not args.smoke and port_free(DEFAULT_PORT) else free_port())
        base = f"http://127.0.0.1:{port}"
        site = start_site(env, port)
        worker = start_worker(env)
        status = wait_for(base + "/", site)
        print(banner(server, base, site, worker), flush=True)
        if args.smoke:
            print(f"Smoke test: GET / answered {status}.", flush=True)
            print(smoke_api(base), flush=True)
            manage(env, "shell", "--no-imports", "-c", RUN_ONE_TASK)
            return 0 if status == 200 else 1
        site.wait()
    except KeyboardInterrupt:
        print("\nStopping.")
    finally:
        stop_process(site, timeout=20)
        stop_process(worker, timeout=20)
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
