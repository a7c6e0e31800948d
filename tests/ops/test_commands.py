"""The operator commands through call_command, against the suite's real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_semaphore import get_semaphore
from django_semaphore.core.tally import tally
from django_semaphore.testing import free_port

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.fixture
def held():
    tally.flush()  # an earlier test's counts are not this one's (the counters shown are the processes')
    sem = get_semaphore("reports")
    permits = [sem.acquire(label="export", auto_renew=False), sem.acquire(weight=2, auto_renew=False)]
    yield permits
    sem.force_release_all()


def test_status_table(held) -> None:
    get_semaphore("single").set_limit(2)
    out = run("semaphore_status")
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["NAME", "LIMIT", "USED", "WAIT"]
    reports = next(line for line in lines if line.startswith("reports"))
    assert reports.split()[:4] == ["reports", "3", "3", "0"]
    assert "[##########]" in reports and reports.endswith("allow")
    assert next(line for line in lines if line.startswith("single")).split()[1] == "2*"
    assert "single (settings: 1)" in out
    assert "search (0 keys)" in out


def test_status_filters_and_lists_holders(held) -> None:
    out = run("semaphore_status", "reports", "--holders")
    assert "single" not in out and "weighted" not in out
    assert "reports: 2 holder(s)" in out
    for permit in held:
        assert permit.token[:8] in out
    assert "export" in out and str(os.getpid()) in out


def test_status_json_schema(held) -> None:
    get_semaphore("search", key="alice").acquire(auto_renew=False)
    tally.flush()
    data = json.loads(run("semaphore_status", "reports", "search", "--json", "--holders"))
    assert data["schema"] == 2
    reports, search = data["semaphores"]
    assert set(reports) >= {
        "name", "keyed", "partitions", "limit", "configured_limit", "override", "used", "holders", "waiting",
        "utilisation", "oldest_holder_age_s", "fence", "counters", "on_error", "lease_s", "busiest", "holder_list",
        "truncated",
    }  # fmt: skip
    assert (reports["used"], reports["holders"], reports["utilisation"]) == (3, 2, 1.0)
    assert reports["fence"] == max(permit.fence for permit in held)
    assert reports["counters"]["acquired"] == 2  # every process's count (this one's, flushed above)
    assert {h["label"] for h in reports["holder_list"]} == {"export", None}
    assert search["keyed"] and search["partitions"] == 1 and not search["truncated"]
    assert search["busiest"][0]["key"] == "alice" and search["holder_list"][0]["key"] == "alice"


def test_status_interval_refreshes(held) -> None:
    out = run("semaphore_status", "reports", "--json", "--interval", "0.1", "--count", "3")
    snapshots = [json.loads(line) for line in out.splitlines()]
    assert len(snapshots) == 3 and all(s["semaphores"][0]["used"] == 3 for s in snapshots)


@pytest.mark.parametrize("interval", ["nan", "NaN", "inf", "-inf", "1e309", "1e300", "0", "-0", "-1"])
def test_status_interval_must_be_a_usable_number_of_seconds(held, interval: str) -> None:
    with pytest.raises(CommandError, match="--interval must be a number of seconds") as caught:
        run("semaphore_status", f"--interval={interval}", "--count", "2")
    assert caught.value.returncode == 1


@pytest.mark.parametrize("count", ["0", "-3"])
def test_status_count_must_be_positive(count: str) -> None:
    with pytest.raises(CommandError, match="--count must be 1 or more"):
        run("semaphore_status", "--interval", "1", "--count", count)


@pytest.mark.parametrize("interval", ["nan", "inf", "0"])
def test_status_interval_from_a_shell_is_one_line_not_a_traceback(interval: str) -> None:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-m", "django", "semaphore_status", "--interval", interval, "--count", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("CommandError: --interval must be")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


@pytest.mark.processes
@pytest.mark.parametrize("arguments", [["--interval", "0.1"], ["--interval", "0.1", "--json"]], ids=["table", "json"])
def test_status_piped_into_head_stops_quietly_when_head_exits(held, arguments: list[str]) -> None:
    """``semaphore_status --interval 1 | head``: once head has its lines and exits, no BrokenPipeError."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    with subprocess.Popen(
        [sys.executable, "-m", "django", "semaphore_status", *arguments],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as command:
        try:
            assert command.stdout is not None and command.stdout.readline()  # each refresh reaches the pipe
            command.stdout.close()  # what head does once it has printed its lines
            command.wait(timeout=30)
        finally:
            if command.poll() is None:  # only the process this test started, by its pid
                command.kill()
                command.wait()
        assert command.stderr is not None
        error = command.stderr.read()
    assert "Traceback" not in error and "BrokenPipeError" not in error, error
    assert command.returncode == 0


def test_a_redis_error_that_is_no_outage_is_one_line_too(redis_client) -> None:
    """A key another program overwrote (WRONGTYPE): still one line for the operator, not a traceback."""
    redis_client.set(get_semaphore("reports").keys.holders, "not a sorted set")
    with pytest.raises(CommandError, match=r"^Redis answered an error .*WRONGTYPE"):
        run("semaphore_status", "reports")


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(CommandError, match=r"Unknown semaphore 'nope'.*reports, search, single, weighted"):
        run("semaphore_status", "nope")
    with pytest.raises(CommandError, match="Unknown semaphore"):
        run("semaphore_release", "nope", "--all", "--noinput")


def test_redis_down_is_one_line_and_exit_status_1() -> None:
    with override_settings(SEMAPHORE_CONNECTION=f"redis://127.0.0.1:{free_port()}/0"):
        with pytest.raises(CommandError, match="Redis is unreachable") as caught:
            run("semaphore_status")
        assert caught.value.returncode == 1
        with pytest.raises(CommandError, match="Redis is unreachable"):
            run("semaphore_release", "reports", "--all", "--noinput")
        with pytest.raises(CommandError, match="Redis is unreachable"):
            run("semaphore_limit", "reports", "4")


def test_redis_down_from_a_shell() -> None:
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "-m", "django", "semaphore_status"], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("CommandError: Redis is unreachable")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_release_by_token_prefix_with_noinput(held) -> None:
    out = run("semaphore_release", "reports", "--token", held[0].token[:6], "--noinput")
    assert f"Released {held[0].token} from reports" in out
    assert [h.token for h in get_semaphore("reports").status().holders] == [held[1].token]


def test_release_asks_first(held, monkeypatch) -> None:
    answers = iter(["no", "yes"])
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    with pytest.raises(CommandError, match="Cancelled"):
        run("semaphore_release", "reports", "--all")
    assert get_semaphore("reports").status().holder_count == 2
    out = run("semaphore_release", "reports", "--all")
    assert "Released 2 permit(s)." in out
    assert get_semaphore("reports").status().holder_count == 0


def test_release_unknown_or_ambiguous_token(held) -> None:
    with pytest.raises(CommandError, match="No holder of reports has a token starting with 'zz'"):
        run("semaphore_release", "reports", "--token", "zz", "--noinput")
    with pytest.raises(CommandError, match="ambiguous"):
        run("semaphore_release", "reports", "--token", "", "--noinput")


def test_release_a_key_of_a_keyed_semaphore() -> None:
    alice = get_semaphore("search", key="alice").acquire(auto_renew=False)
    bob = get_semaphore("search", key="bob").acquire(auto_renew=False)
    out = run("semaphore_release", "search", "--key", "alice", "--all", "--noinput")
    assert f"Released {alice.token} from search [key alice]" in out
    assert bob.token not in out
    out = run("semaphore_release", "search", "--token", bob.token[:8], "--noinput")  # found in any key
    assert "[key bob]" in out


@pytest.mark.parametrize("decoding", [False, True])
def test_release_expired_reclaims_only_those(decoding: bool, redis_server, settings) -> None:
    if decoding:  # a connection whose replies are str, as a site's own client may be set up
        settings.SEMAPHORE_CONNECTION = f"{redis_server.url}?decode_responses=True"
    sem = get_semaphore("weighted")
    kept = sem.acquire(auto_renew=False)
    stale = sem.acquire(lease=0.05, auto_renew=False)
    time.sleep(0.3)  # let the short lease run out (nothing has read the semaphore since)
    out = run("semaphore_release", "weighted", "--expired")
    assert f"Reclaimed expired {stale.token} from weighted" in out
    assert "Reclaimed 1 expired permit(s)." in out
    assert [h.token for h in sem.status().holders] == [kept.token]
    assert stale.release() is False
    sem.force_release_all()


def test_limit_set_and_clear() -> None:
    assert "reports: limit is now 5 (settings say 3)." in run("semaphore_limit", "reports", "5")
    assert get_semaphore("reports").status().limit == 5
    assert "limit is 3 (settings)" in run("semaphore_limit", "reports", "--clear")
    for ambiguous in ([], ["5", "--pause"], ["--pause", "--resume"], ["--clear", "--add", "1"]):
        with pytest.raises(CommandError, match="Give one of"):
            run("semaphore_limit", "reports", *ambiguous)
    for out_of_range in ("0", str(10**10)):
        with pytest.raises(CommandError, match=r"from 1 to .*--pause"):
            run("semaphore_limit", "reports", out_of_range)
    with pytest.raises(CommandError, match="keyed"):
        run("semaphore_limit", "search", "3")
    run("semaphore_limit", "search", "4", "--key", "alice")
    assert get_semaphore("search", key="alice").status().limit == 4


def test_limit_pause_and_resume() -> None:
    sem = get_semaphore("reports")
    held = sem.acquire(auto_renew=False)
    assert "reports: paused; nothing new is granted" in run("semaphore_limit", "reports", "--pause")
    attempt = sem.attempt(wait=0)
    assert attempt.paused and attempt.permit is None
    assert held is not None and held.release() is True  # holders finish as usual
    assert "reports: resumed; limit is 3 (settings)." in run("semaphore_limit", "reports", "--resume")
    assert sem.status().override is None
    run("semaphore_limit", "reports", "--pause")
    row = next(line for line in run("semaphore_status").splitlines() if line.startswith("reports"))
    assert row.split()[1] == "paused*"
    run("semaphore_limit", "reports", "--resume")
    # Resuming what is not paused changes nothing: a stale command must not clear another operator's limit.
    run("semaphore_limit", "reports", "5")
    with pytest.raises(CommandError, match="not paused; nothing changed"):
        run("semaphore_limit", "reports", "--resume")
    assert sem.status().limit == 5
    # Any limit of 1 or more ends a pause too.
    run("semaphore_limit", "reports", "--pause")
    run("semaphore_limit", "reports", "2")
    assert sem.acquire(auto_renew=False) is not None
    sem.force_release_all()


def test_limit_add_changes_the_limit_in_force_atomically() -> None:
    assert "reports: limit is now 5 (settings say 3)." in run("semaphore_limit", "reports", "--add", "2")
    assert "reports: limit is now 4 (settings say 3)." in run("semaphore_limit", "reports", "--add", "-1")
    assert "limit is now 0: paused" in run("semaphore_limit", "reports", "--add", "-10")
    assert "resumed" in run("semaphore_limit", "reports", "--resume")
    with pytest.raises(CommandError, match="--add takes"):
        run("semaphore_limit", "reports", "--add", str(10**10))
    run("semaphore_limit", "search", "--key", "alice", "--add", "1")
    assert get_semaphore("search", key="alice").status().limit == 3
    with pytest.raises(CommandError, match="keyed"):
        run("semaphore_limit", "search", "--pause")
