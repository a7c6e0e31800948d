"""A new project set up from README and docs/install.md alone gets what they promise.

``django-admin startproject``, then the README's settings block (and the
install guide's STATIC_ROOT), the README's decorator example as a view, and
the commands the README lists: the guarded view answers and turns the next
request away, the dashboard's page and its collected CSS and JS are there,
and ``check --deploy`` fails with E015 while plain ``check`` passes when Redis
is down. Every step runs in a subprocess, as a user's shell would.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from django_semaphore.testing import free_port

from .test_docs import PYTHON, settings_namespace

README_SETTINGS = next(b for b in PYTHON if b.where.startswith("README.md") and b.is_settings)
README_VIEW = next(b for b in PYTHON if b.where.startswith("README.md") and "@semaphore(" in b.code)
INSTALL_STATIC = next(b for b in PYTHON if b.where.startswith("docs/install.md") and "STATIC_ROOT" in b.code)

VISIT = """
import re

from django.contrib.auth import get_user_model
from django.test import Client
from django_semaphore import get_semaphore

client = Client()
print("first", client.get("/export/").status_code)
held = [get_semaphore("reports").acquire() for _ in range(4)]
busy = client.get("/export/")
print("full", busy.status_code, busy["Retry-After"])
for permit in held:
    permit.release()
get_user_model().objects.create_superuser("ops", "ops@example.com", "x")
client.login(username="ops", password="x")
page = client.get("/admin/django_semaphore/semaphoredashboard/")
print("dashboard", page.status_code)
assets = re.findall(r'/static/(django_semaphore/[\\w/.-]+)', page.content.decode())
print("assets", " ".join(sorted(set(assets))))
"""


def manage(site: Path, *args: str, redis_url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "mysite.settings", "SITE_REDIS_URL": redis_url}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=site, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def site(tmp_path: Path, key_prefix: str) -> Path:
    subprocess.run([sys.executable, "-m", "django", "startproject", "mysite", str(tmp_path)], check=True)
    readme = settings_namespace(README_SETTINGS)
    settings = tmp_path / "mysite" / "settings.py"
    text = settings.read_text() + "\nDEBUG = False\nALLOWED_HOSTS = ['testserver']\n"
    added_apps = [app for app in readme["INSTALLED_APPS"] if app is not Ellipsis and f"'{app}'" not in text]
    text += f"\nINSTALLED_APPS += {added_apps!r}\n"
    text += f"CACHES = {readme['CACHES']!r}\n"
    text += "CACHES['default']['LOCATION'] = __import__('os').environ['SITE_REDIS_URL']  # this test's server\n"
    text += f"SEMAPHORES = {readme['SEMAPHORES']!r}\nSEMAPHORE_KEY_PREFIX = {key_prefix!r}\n"
    settings.write_text(text + INSTALL_STATIC.code)
    # README's view, with a body: its `...` answers nothing.
    view = README_VIEW.code.replace("def export(request): ...", "def export(request):\n    return HttpResponse('done')")
    (tmp_path / "mysite" / "views.py").write_text("from django.http import HttpResponse\n" + view)
    urls = tmp_path / "mysite" / "urls.py"
    urls.write_text(urls.read_text() + "\nfrom . import views\n\nurlpatterns += [path('export/', views.export)]\n")
    return tmp_path


def test_a_project_set_up_from_the_readme_works(site: Path, redis_server) -> None:
    url = redis_server.url
    assert manage(site, "migrate", "--noinput", redis_url=url).returncode == 0
    deploy = manage(site, "check", "--deploy", "--tag", "django_semaphore_redis", redis_url=url)
    assert deploy.returncode == 0 and "no issues" in deploy.stdout, deploy.stderr
    collected = manage(site, "collectstatic", "--noinput", redis_url=url)
    assert collected.returncode == 0, collected.stderr
    visit = manage(site, "shell", "--no-imports", "-c", VISIT, redis_url=url)
    assert visit.returncode == 0, visit.stderr
    lines = dict(line.split(" ", 1) for line in visit.stdout.splitlines())
    assert lines["first"] == "200"
    assert re.fullmatch(r"503 \d+", lines["full"])
    assert lines["dashboard"] == "200"
    assets = lines["assets"].split()
    assert {"django_semaphore/css/dashboard.css", "django_semaphore/js/dashboard.js"} <= set(assets)
    for asset in assets:  # what a web server serving STATIC_ROOT (or WhiteNoise) will find
        assert (site / "staticfiles" / asset).is_file(), asset


def test_check_deploy_catches_a_down_redis_and_plain_check_does_not_need_it(site: Path) -> None:
    down = f"redis://127.0.0.1:{free_port()}/0"
    assert manage(site, "check", redis_url=down).returncode == 0
    deploy = manage(site, "check", "--deploy", redis_url=down)
    assert deploy.returncode != 0
    assert "django_semaphore.E015" in deploy.stderr and "cannot be reached" in deploy.stderr
