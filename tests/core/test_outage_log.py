"""A Redis outage is logged as an event, not once per request (issue 20, item 4).

One record when it starts (the cause, the policy applied), at most one
summary per ``SEMAPHORE_OUTAGE_LOG_INTERVAL`` while it lasts, one record when
it ends with its duration; and the guards enforce the limits again as soon as
Redis answers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from django.test import Client

from django_semaphore import BackendUnavailable, get_semaphore
from django_semaphore.core.outages import LET_THROUGH, REFUSED, RELEASE, RENEWAL, OutageLog
from django_semaphore.testing import RedisServer

from ..support.guards import declare
from ..support.load import Workers

OUTAGE_SECONDS = 5.0
MOST_RECORDS = 20


def semaphore_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name.startswith("django_semaphore")]


class Requests(Workers):
    """Threads sending the guarded view's requests through Django in a loop, keeping each outcome and when."""

    def __init__(self, threads: int) -> None:
        super().__init__(threads)
        self.answers: list[tuple[float, str, int]] = []  # (finished at, outcome, status)

    def _run(self, index: int) -> None:
        client = Client()
        while not self.stop.is_set():
            response = client.get("/surface/reported/", headers={"Accept": "application/json"})
            outcome = response.json()["outcome"] if response.status_code == 200 else "full"
            with self.lock:
                self.answers.append((time.monotonic(), outcome, response.status_code))
            time.sleep(0.005)

    def since(self, moment: float) -> list[tuple[float, str, int]]:
        with self.lock:
            return [answer for answer in self.answers if answer[0] >= moment]

    def until(self, condition: object, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():  # type: ignore[operator]
            assert time.monotonic() < deadline, "the load did not get there in time"
            time.sleep(0.02)


@pytest.mark.processes
def test_a_five_second_outage_under_load_is_a_handful_of_records(settings, own_server: RedisServer, caplog) -> None:
    declare(settings, guarded={"limit": 2, "lease": 10, "on_error": "allow"})
    with caplog.at_level(logging.DEBUG, logger="django_semaphore"), Requests(threads=8) as load:
        load.until(lambda: sum(outcome == "acquired" for _, outcome, _ in load.since(0)) >= 8)
        own_server.freeze()
        frozen = time.monotonic()
        try:
            load.until(lambda: sum(outcome == "error_allowed" for _, outcome, _ in load.since(frozen)) >= 8)
            load.until(lambda: time.monotonic() - frozen >= OUTAGE_SECONDS)
        finally:
            own_server.thaw()
        back = time.monotonic()
        load.until(lambda: any(outcome in ("acquired", "full") for _, outcome, _ in load.since(back)))
        # Enforcement, not luck: the limit turns requests away again.
        load.until(lambda: sum(outcome == "acquired" for _, outcome, _ in load.since(back)) >= 8)
    enforced = min(at for at, outcome, _ in load.since(back) if outcome in ("acquired", "full"))
    during = Counter(outcome for _, outcome, _ in load.since(frozen) if _ < back)
    records = semaphore_records(caplog)
    print(
        f"{len(records)} records for a {back - frozen:.1f} s outage under 8 threads ({dict(during)}); "
        f"limits enforced again {enforced - back:.2f} s after Redis resumed"
    )
    for record in records:
        print(f"  {record.levelname} {record.name}: {record.getMessage()}")
    assert during["error_allowed"] >= 8 and all(status != 500 for _, _, status in load.answers)
    assert len(records) <= MOST_RECORDS
    messages = [record.getMessage() for record in records if record.name == "django_semaphore.outages"]
    assert "an outage begins" in messages[0] and "on_error='allow'" in messages[0]
    assert any("Redis answers again after an outage of" in message and LET_THROUGH in message for message in messages)
    assert enforced - back < 1.0


@pytest.mark.processes
@pytest.mark.django_db  # response.close() sends request_finished, which tidies database connections
def test_a_failed_release_is_told_truthfully(client: Client, settings, own_server: RedisServer, caplog) -> None:
    declare(settings, guarded={"on_error": "allow"})
    stream = client.get("/surface/reported-stream/")  # holds its permit until closed
    permit = stream.wsgi_request.semaphore.permit
    own_server.stop()
    with caplog.at_level(logging.DEBUG, logger="django_semaphore"):
        stream.close()  # the release fails: counted, retried in the background
    (record,) = semaphore_records(caplog)
    message = record.getMessage()
    assert "releasing a permit of 'guarded' (retried in the background" in message, message
    assert "<Permit" not in message and "on_error='allow'" in message
    assert repr(permit).endswith("release unconfirmed>")


# -- the account itself, on a clock of the test's own --------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock_log(settings) -> tuple[Clock, OutageLog]:
    settings.SEMAPHORE_OUTAGE_LOG_INTERVAL = 10
    declare(settings, guarded={"on_error": "allow"}, sitewide={"on_error": "deny"})
    clock = Clock()
    return clock, OutageLog(clock)


def outage_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "django_semaphore.outages"]


def down(text: str = "Connection refused") -> BackendUnavailable:
    """As the engine raises it: the redis-py error behind it."""
    error = BackendUnavailable(f"Redis unavailable for semaphore 'guarded': {text}", name="guarded")
    error.__cause__ = redis.ConnectionError(text)
    return error


def test_a_start_one_summary_per_interval_and_an_end(clock_log, caplog) -> None:
    clock, log = clock_log
    with caplog.at_level(logging.DEBUG, logger="django_semaphore"):
        for second in range(35):  # 35 s of outage, 5 calls a second
            for _ in range(5):
                log.unavailable("guarded", down(), LET_THROUGH, where="GET /search/")
            log.unavailable("sitewide", down(), REFUSED)
            if second % 10 == 0:
                log.unavailable("guarded", down(), RENEWAL)
                log.unavailable("guarded", down(), RELEASE)
            clock.now += 1
        log.answered()
        log.answered()  # a healthy call: nothing more to say
    start, *summaries, end = outage_messages(caplog)
    assert start.startswith("Redis unavailable (Connection refused): an outage begins, first met by")
    assert "semaphore 'guarded' on GET /search/: on_error='allow' lets guarded work run unguarded" in start
    assert len(summaries) == 3  # at 10, 20 and 30 s
    assert "Redis still unavailable: for 10 s" in summaries[0]
    assert "'guarded' (on_error='allow'): 51 let through unguarded, 1 renewals failed" in summaries[0]
    assert "'sitewide' (on_error='deny'): 10 refused" in summaries[0]
    assert "Redis answers again after an outage of 35.0 s" in end
    assert "'guarded' (on_error='allow'): 175 let through unguarded, 4 renewals failed, 4 releases left" in end
    assert "'sitewide' (on_error='deny'): 35 refused" in end


def test_a_flapping_server_is_still_a_handful_of_records_per_interval(clock_log, caplog) -> None:
    clock, log = clock_log
    with caplog.at_level(logging.DEBUG, logger="django_semaphore"):
        for _ in range(1000):  # 100 s of one call failing, the next answered
            log.unavailable("guarded", down(), LET_THROUGH)
            clock.now += 0.05
            log.answered()
            clock.now += 0.05
    messages = outage_messages(caplog)
    assert len(messages) <= 3 * 100 / 10 + 2, messages
    assert "an outage begins" in messages[0]
    assert any("brief recoveries" in message or "in between, briefly" in message for message in messages)


def test_a_later_outage_starts_with_a_record_of_its_own(clock_log, caplog) -> None:
    clock, log = clock_log
    with caplog.at_level(logging.DEBUG, logger="django_semaphore"):
        log.unavailable("guarded", down(), LET_THROUGH)
        clock.now += 2
        log.answered()
        clock.now += 3600
        log.unavailable("sitewide", down("Timeout reading from socket"), REFUSED)
        clock.now += 1
        log.answered()
    first_start, first_end, second_start, second_end = outage_messages(caplog)
    assert "an outage begins" in first_start and "outage of 2.0 s" in first_end
    assert "Timeout reading from socket" in second_start and "on_error='deny' refuses guarded work" in second_start
    assert "outage of 1.0 s" in second_end


def test_an_outage_soon_after_the_last_is_told_by_the_summary_not_a_start_of_its_own(clock_log, caplog) -> None:
    clock, log = clock_log
    with caplog.at_level(logging.DEBUG, logger="django_semaphore"):
        log.unavailable("guarded", down(), LET_THROUGH)
        clock.now += 1
        log.answered()  # the end is recorded
        clock.now += 3
        for _ in range(20):  # again, 3 s later, for 20 s
            log.unavailable("guarded", down(), LET_THROUGH)
            clock.now += 1
        log.answered()
    _start, _end, summary, *rest = outage_messages(caplog)
    assert "Redis unavailable again soon after the last outage" in summary
    assert rest and "Redis answers again" in rest[-1]


def test_the_engine_stays_quiet_while_redis_answers(settings, caplog) -> None:
    declare(settings)
    sem = get_semaphore("guarded")
    sem.status()  # the first call logs, once, how this server runs the scripts (core/scripts.py)
    with caplog.at_level(logging.DEBUG, logger="django_semaphore"):
        threads = [threading.Thread(target=lambda: sem.acquire(wait=10).release()) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert semaphore_records(caplog) == []


def test_the_failure_policy_pages_example_is_what_the_log_says(settings, caplog) -> None:
    """docs/guides/failure-policy.md shows a 95 s outage's records: these are the ones this code writes for it."""
    settings.SEMAPHORES = {"reports": {"limit": 4, "on_error": "allow"}, "billing": {"limit": 2, "on_error": "deny"}}
    settings.SEMAPHORE_OUTAGE_LOG_INTERVAL = 60
    clock = Clock()
    clock.now = 0.0
    log = OutageLog(clock)

    error = down("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    with caplog.at_level(logging.DEBUG, logger="django_semaphore"):
        for tenth in range(950):  # ten calls a second for 95 s
            clock.now = tenth / 10
            if tenth == 0:
                log.unavailable("reports", error, LET_THROUGH, where="GET /reports/export/")
            elif tenth % 4 == 0:
                log.unavailable("billing", error, REFUSED)
            else:
                log.unavailable("reports", error, LET_THROUGH)
            if tenth in (30, 500):
                log.unavailable("reports", error, RELEASE)
        clock.now = 95.3
        log.answered()
    written = [f"WARNING {r.name}: {r.getMessage()}" for r in caplog.records if r.name == "django_semaphore.outages"]
    page = (Path(__file__).resolve().parents[2] / "docs" / "guides" / "failure-policy.md").read_text()
    shown = page.split("```text\n", 1)[1].split("```", 1)[0].splitlines()
    assert written == shown
