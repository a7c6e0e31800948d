"""The core under misuse and interruption: shared objects, cancelled tasks,
failing receivers, forked processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from django_semaphore import Semaphore
from django_semaphore.core import renewal
from django_semaphore.core.conf import SemaphoreConfig
from django_semaphore.core.renewal import renewer
from django_semaphore.signals import semaphore_acquired
from django_semaphore.testing import find_binary

from ..support.polling import wait_until


def make(limit: int = 2, **options: object) -> Semaphore:
    return Semaphore(SemaphoreConfig.from_options("robust", {"limit": limit, **options}))


def test_threads_sharing_one_semaphore_each_leave_with_their_own_permit() -> None:
    shared = make(2)
    entered = threading.Barrier(2)
    first_left = threading.Event()
    tokens: dict[str, str] = {}

    def first() -> None:
        with shared as permit:
            tokens["first"] = permit.token
            entered.wait(5)
        first_left.set()

    def second() -> None:
        with shared as permit:
            tokens["second"] = permit.token
            entered.wait(5)
            first_left.wait(5)
            # The first thread has left: only its own permit went back.
            holders = [h.token for h in shared.status().holders]
            assert holders == [permit.token]

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(tokens) == 2
    assert shared.status().used == 0


def test_tasks_sharing_one_semaphore_each_leave_with_their_own_permit() -> None:
    async def scenario() -> None:
        shared = make(2)
        both_in = asyncio.Event()
        first_out = asyncio.Event()
        inside = 0

        async def meet() -> None:
            nonlocal inside
            inside += 1
            if inside == 2:
                both_in.set()
            await both_in.wait()

        async def first() -> None:
            async with shared:
                await meet()
            first_out.set()

        async def second() -> None:
            async with shared as permit:
                await meet()
                await first_out.wait()
                assert [h.token for h in (await shared.astatus()).holders] == [permit.token]

        await asyncio.wait_for(asyncio.gather(first(), second()), 30)
        assert (await shared.astatus()).used == 0

    asyncio.run(scenario())


def test_cancelled_waiter_leaves_the_line_at_once() -> None:
    async def scenario() -> None:
        sem = make(1)
        holder = await sem.aacquire()
        assert holder is not None
        waiter = asyncio.create_task(make(1).aacquire(wait=30))
        while (await sem.astatus()).waiting == 0:
            await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        status = await sem.astatus()
        assert status.waiting == 0  # not left to block the line until its heartbeat lapses
        await holder.arelease()
        assert (await sem.astatus()).used == 0

    asyncio.run(scenario())


def test_a_failing_signal_receiver_does_not_cost_the_permit() -> None:
    def broken(sender: str, **kwargs: object) -> None:
        raise RuntimeError("metrics backend down")

    semaphore_acquired.connect(broken)
    try:
        sem = make(1)
        permit = sem.acquire()
        assert permit is not None and permit.held
        assert permit.release() is True
        assert sem.status().used == 0
    finally:
        semaphore_acquired.disconnect(broken)


def test_a_dropped_permit_is_no_longer_renewed() -> None:
    sem = make(1, lease=30)
    permit = sem.acquire()
    assert permit is not None and permit in renewer._due
    token = permit.token
    del permit
    assert all(p.token != token for p in list(renewer._due.keys()))


def _child_renews_nothing(queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    queue.put(len(renewer._due))


@pytest.mark.processes
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_forked_child_does_not_renew_the_parents_permits() -> None:
    sem = make(1, lease=30)
    permit = sem.acquire()
    assert permit is not None
    fork = multiprocessing.get_context("fork")
    queue = fork.Queue()
    child = fork.Process(target=_child_renews_nothing, args=(queue,))
    child.start()
    try:
        assert queue.get(timeout=10) == 0
        child.join(10)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()
            child.join(5)
    assert permit.release() is True


def test_the_asyncio_twin_of_a_cache_client_retries_as_often_as_it() -> None:
    from django_semaphore.core.connection import _async_from_sync, get_client

    sync_client = get_client()
    sync_retry = sync_client.connection_pool.connection_kwargs.get("retry")
    twin = _async_from_sync(sync_client)
    expected = 0 if sync_retry is None else sync_retry._retries
    assert twin.connection_pool.connection_kwargs["retry"]._retries == expected


def _running(pid: int) -> bool:
    """Alive and not a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.processes
def test_no_server_outlives_a_killed_test_run() -> None:
    """A run killed outright (no clean-up) takes the servers it started with it."""
    script = (
        "from django_semaphore.testing import RedisServer\n"
        "import sys, time\n"
        "server = RedisServer(sys.argv[1]).start()\n"
        "print(server.process.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", script, find_binary()], stdout=subprocess.PIPE, text=True)
    server_pid = 0
    try:
        assert run.stdout is not None
        server_pid = int(run.stdout.readline())
        run.kill()  # no finally, no atexit: only the parent-death signal can stop the server
        run.wait(10)
        deadline = time.monotonic() + 10
        while _running(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(server_pid), "the server outlived the run that started it"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
        if server_pid and _running(server_pid):  # only when the assertion failed: still ours
            os.kill(server_pid, signal.SIGKILL)


def test_a_permit_renewed_later_than_the_threads_next_look_does_not_wake_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tracking a request's permit must not cost a thread switch; a lease shorter than a look still wakes it."""
    # A look every 30 s: the short lease below is then due well before the thread's next look,
    # wherever the thread stands in its round (with 1 s it may be about to look anyway).
    monkeypatch.setattr(renewal, "LOOK_EVERY", 30.0)
    sem = Semaphore(SemaphoreConfig.from_options("wake", {"limit": 5, "lease": 120}))
    sem.acquire(lease=0.3).release()  # wakes the thread, which goes back to sleep for LOOK_EVERY
    time.sleep(0.2)
    wakes = []
    notify = renewer._wakeup.notify

    def counted(*args: object) -> None:
        # Only the wakes tracking a permit sends: the metrics' next flush, scheduled once per interval
        # by whichever call counts first after a flush, wakes the thread on its own (run_at).
        if sys._getframe(1).f_code is type(renewer)._schedule.__code__:
            wakes.append(1)
        notify(*args)

    monkeypatch.setattr(renewer._wakeup, "notify", counted)
    for _ in range(20):
        sem.acquire().release()  # first renewal due in 40 s, after the thread's next look
    assert wakes == []
    # The thread may already be due to look before the short lease's renewal (another test's clean-up
    # retried, a job of its own): then waking it is not needed, and not done.
    asleep_until = renewer._asleep_until
    short = sem.acquire(lease=0.6)  # renewal due in 0.2 s, before the thread's next look
    try:
        assert wakes or asleep_until <= short.next_renewal(), (asleep_until, short.next_renewal())
        time.sleep(0.8)
        assert short.is_held()  # the server still has it past its first lease: it was renewed
    finally:
        short.release()


def test_a_clean_up_being_run_still_counts_as_pending_until_redis_has_answered() -> None:
    """``pending()`` reaching 0 means every clean-up has had its effect: a caller waits on it, then reads Redis."""
    sem = Semaphore(SemaphoreConfig.from_options("settling", {"limit": 2, "lease": 30}))
    permit = sem.acquire(auto_renew=False)
    assert permit is not None
    running, go_on = threading.Event(), threading.Event()

    def on_reply(reply: object) -> None:
        running.set()
        go_on.wait(5)

    renewer.reconcile(sem.calls.release(permit.token), within=5, on_reply=on_reply, soon=True)
    try:
        assert running.wait(5)
        assert renewer.pending() == 1  # Redis has run it; the clean-up itself is not over
    finally:
        go_on.set()
    wait_until(lambda: renewer.pending() == 0, timeout=5)
    assert sem.status().used == 0


def test_a_clean_up_dropped_while_it_runs_is_not_put_back_by_an_outage(monkeypatch: pytest.MonkeyPatch) -> None:
    """``drop_pending`` forgets the clean-up being run too: its outage neither requeues it nor holds up later ones."""
    sem = Semaphore(SemaphoreConfig.from_options("dropped", {"limit": 2, "lease": 30}))
    first, second = sem.acquire(auto_renew=False), sem.acquire(auto_renew=False)
    assert first is not None and second is not None
    doomed = sem.calls.release(first.token)
    running, fail = threading.Event(), threading.Event()
    run = renewal.scripts.run

    def failing_once(client: object, call: object) -> object:
        if call is doomed:
            running.set()
            fail.wait(5)
            raise redis.ConnectionError("the server went away")
        return run(client, call)  # type: ignore[arg-type]

    monkeypatch.setattr(renewal.scripts, "run", failing_once)
    monkeypatch.setattr(renewal, "RETRY_AFTER_ERROR", 60.0)  # an outage's pause: longer than the test waits
    renewer.reconcile(doomed, within=30, soon=True)
    assert running.wait(5)
    renewer.drop_pending()
    assert renewer.pending() == 0
    settled = threading.Event()
    renewer.reconcile(sem.calls.release(second.token), within=30, on_reply=lambda reply: settled.set(), soon=True)
    fail.set()
    assert settled.wait(5)
    wait_until(lambda: renewer.pending() == 0, timeout=5)
    assert sem.status().used == 1  # the second given back; the first, dropped, still held (its lease ends it)
    first.release()
