"""``make demo``: the example site with everything it needs, stopped together on Ctrl-C.

Starts a Redis-protocol server on a free loopback port (unless REDIS_URL is
set) with its data under example_project/var/, migrates, creates the demo
superuser, and runs the site. ``--smoke`` does all of that, fetches one page
and stops: the test suite uses it to prove the start-up path works.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from django_semaphore.testing import RedisServer, free_port  # noqa: E402

DEMO_USER, DEMO_PASSWORD = "admin", "admin"
CREATE_SUPERUSER = f"""
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username={DEMO_USER!r}).exists():
    User.objects.create_superuser({DEMO_USER!r}, "admin@example.com", {DEMO_PASSWORD!r})
"""


def manage(env: dict[str, str], *args: str) -> None:
    subprocess.run([sys.executable, str(HERE / "manage.py"), *args], env=env, check=True, cwd=ROOT)


def wait_for(url: str, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return int(response.status)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")) or None)
    parser.add_argument("--smoke", action="store_true", help="start, fetch one page, stop")
    args = parser.parse_args(argv)
    # `kill PID` stops the demo as cleanly as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

    (HERE / "var").mkdir(exist_ok=True)
    server = RedisServer(data_dir=str(HERE / "var" / "redis") if not os.environ.get("REDIS_URL") else None)
    if not server.external_url:
        Path(server.data_dir).mkdir(parents=True, exist_ok=True)
    site = None
    try:
        server.start()
        env = {**os.environ, "REDIS_URL": server.url, "DJANGO_SETTINGS_MODULE": "example_project.settings"}
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(env, "shell", "-c", CREATE_SUPERUSER)
        port = args.port or (8000 if not args.smoke and _port_free(8000) else free_port())
        base = f"http://127.0.0.1:{port}"
        site = subprocess.Popen(
            [sys.executable, str(HERE / "manage.py"), "runserver", f"127.0.0.1:{port}", "--noreload"],
            env=env,
            cwd=ROOT,
        )
        wait_for(base + "/")
        print(
            f"\n  Redis:     {server.url}{' (started for you)' if not server.external_url else ''}"
            f"\n  Site:      {base}/"
            f"\n  Admin:     {base}/admin/   (user {DEMO_USER!r}, password {DEMO_PASSWORD!r})"
            "\n  Stop with Ctrl-C.\n",
            flush=True,
        )
        if args.smoke:
            return 0
        site.wait()
    except KeyboardInterrupt:
        print("\nStopping.")
    finally:
        if site is not None and site.poll() is None:
            site.terminate()
            try:
                site.wait(timeout=10)
            except subprocess.TimeoutExpired:
                site.kill()
                site.wait()
        server.stop()
    return 0


def _port_free(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


if __name__ == "__main__":
    sys.exit(main())
