"""A process that stalls the server under test the moment a release hands a permit to a waiter.

It listens to the server's keyspace notifications for the mutex's keys and,
once armed, sends SIGSTOP to the server's pid at the next hand-off: a push to
a waiter's wake list that follows a removal from the line (a hand-off takes
the waiter out of the line, then pushes its grant; a waiter ending its own
wait pushes a note without leaving). The new holder then has its permit, on
a claim of one waiter TTL, and its renewal to the full lease meets a stopped
server. A process of its own, so no other thread holds the interpreter lock
when the notification comes; it imports nothing of Django.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import redis


def run(url: str, base: str, pid: int, ready: Any, armed: Any, fired: Any) -> None:
    """SIGSTOP ``pid`` at the first hand-off of the semaphore whose keys start with ``base`` once ``armed``."""
    client = redis.Redis.from_url(url)
    client.config_set("notify-keyspace-events", "Kzl")  # sorted sets and lists
    pubsub = client.pubsub()
    channel = f"__keyspace@0__:{base}"
    pubsub.psubscribe(f"{channel}*")
    ready.set()
    left_line = False
    for message in pubsub.listen():
        if message["type"] != "pmessage":
            continue
        key, event = message["channel"].decode()[len(channel) :], message["data"]
        if key == "queue" and event == b"zrem":
            left_line = True
        elif key.startswith("wake:") and event == b"rpush":
            if left_line and armed.is_set():
                os.kill(pid, signal.SIGSTOP)  # the server this run started, by pid
                armed.clear()
                fired.set()
            left_line = False
        elif key == "alive" and event == b"zadd":
            left_line = False  # a heartbeat: another call
