"""Per-address keys that a client can neither dodge nor share with others (issue 12, items 1 and 2).

An IPv4 client must keep its own partition however its address reaches
Django: plain, IPv4-mapped from a dual-stack listener (``::ffff:a.b.c.d``),
through NAT64 (``64:ff9b::a.b.c.d``), or with a port a proxy appended. And
an address that cannot be parsed must never become a fresh partition: it is
keyed as the connecting address (``REMOTE_ADDR``).
"""

from __future__ import annotations

import json

import pytest
from django.test import Client, RequestFactory

from django_semaphore import get_semaphore
from django_semaphore.web.partition_keys import key_for

from ..support.dual_stack import DualStackServer
from ..support.guards import declare, hold, used
from ..support.heard import heard
from ..support.polling import wait_until

IP_URL = "/surface/keyed/ip/"  # @semaphore("guarded", key="ip"), limit 1
CLIENT, OTHER, OUR_PROXY = "203.0.113.7", "198.51.100.1", "10.0.0.2"


@pytest.fixture(autouse=True)
def surface(settings) -> None:
    declare(settings)


def partition_of(address: str) -> str:
    """The "ip" key of a request from ``address`` (directly, or through a proxy), as the app computes it."""
    return key_for(RequestFactory().get("/", REMOTE_ADDR=address, HTTP_X_FORWARDED_FOR=address), "ip")


def known_keys() -> set[str]:
    return set(get_semaphore("guarded").partitions().values())


# -- item 1: dual-stack and NAT64 -----------------------------------------------

SAME_CLIENT = [
    "::ffff:203.0.113.7",  # IPv4-mapped, as a dual-stack listener reports it
    "::ffff:cb00:7107",  # the same, in hex
    "::FFFF:203.0.113.7",
    "64:ff9b::203.0.113.7",  # the well-known NAT64 prefix (RFC 6052)
    "64:ff9b::cb00:7107",
]
OTHER_CLIENTS = ["::ffff:198.51.100.1", "64:ff9b::198.51.100.1", "::ffff:10.0.0.1", "198.51.100.1"]


def test_mapped_and_nat64_addresses_are_keyed_by_their_ipv4_address(client: Client) -> None:
    permit = hold(key=partition_of(CLIENT))
    try:
        with heard() as answers:
            for form in SAME_CLIENT:
                assert client.get(IP_URL, REMOTE_ADDR=form).status_code == 503, form
            for other in OTHER_CLIENTS:
                assert client.get(IP_URL, REMOTE_ADDR=other).json()["outcome"] == "acquired", other
    finally:
        permit.release()
    assert answers.of(get_semaphore("guarded", key=partition_of(CLIENT)))[1] == len(SAME_CLIENT)
    assert known_keys() == {partition_of(CLIENT), partition_of(OTHER), partition_of("10.0.0.1")}
    assert not any("::/" in key for key in known_keys())  # nobody landed in a shared IPv6 /64


def test_mapped_addresses_in_forwarded_for_are_unwrapped_too(client: Client, settings) -> None:
    settings.SEMAPHORE_IP_META_KEY = "HTTP_X_FORWARDED_FOR"
    permit = hold(key=partition_of(CLIENT))
    try:
        for form in SAME_CLIENT:
            assert client.get(IP_URL, HTTP_X_FORWARDED_FOR=f"{OTHER}, {form}").status_code == 503, form
        assert client.get(IP_URL, HTTP_X_FORWARDED_FOR=f"{CLIENT}, ::ffff:{OTHER}").status_code == 200
    finally:
        permit.release()


def test_ipv4_clients_of_a_real_dual_stack_listener_keep_their_own_partitions() -> None:
    """Over real sockets to a server bound to ``[::]``: two IPv4 clients, two partitions."""
    with DualStackServer() as server:
        status, body = server.get(IP_URL, source="127.0.0.2")
        assert status == 200 and json.loads(body)["outcome"] == "acquired"
        assert known_keys() == {partition_of("127.0.0.2")}  # not "::/64"
        # The server's thread gives the request's permit back as it closes the response, which may be after
        # the client has read it: the permit is free once Redis says so, not after a guessed pause.
        wait_until(lambda: used(key=partition_of("127.0.0.2")) == 0)
        permit = hold(key=partition_of("127.0.0.2"))
        try:
            assert server.get(IP_URL, source="127.0.0.2")[0] == 503
            assert server.get(IP_URL, source="127.0.0.3")[0] == 200  # another IPv4 client is not shut out
        finally:
            permit.release()
    assert known_keys() == {partition_of("127.0.0.2"), partition_of("127.0.0.3")}


# -- item 2: ports, and what cannot be parsed ----------------------------------

WITH_PORTS = [
    "203.0.113.7:50123",
    "203.0.113.7:1",
    " 203.0.113.7:8080 ",
    "[::ffff:203.0.113.7]:443",
    "[64:ff9b::cb00:7107]:80",
    "[::ffff:203.0.113.7]",
]


@pytest.mark.parametrize("proxies", [1, 2])
def test_addresses_with_a_port_stay_in_the_clients_partition(client: Client, settings, proxies: int) -> None:
    settings.SEMAPHORE_IP_META_KEY = "HTTP_X_FORWARDED_FOR"
    settings.SEMAPHORE_TRUSTED_PROXIES = proxies
    permit = hold(key=partition_of(CLIENT))
    try:
        for form in WITH_PORTS:
            appended = form if proxies == 1 else f"{form}, {OUR_PROXY}:3128"
            header = f"{OTHER}:80, {appended}"
            assert client.get(IP_URL, REMOTE_ADDR=OUR_PROXY, HTTP_X_FORWARDED_FOR=header).status_code == 503, form
    finally:
        permit.release()
    assert known_keys() <= {partition_of(CLIENT)}


def test_bracketed_ipv6_with_a_port_is_grouped_by_its_prefix(client: Client, settings) -> None:
    settings.SEMAPHORE_IP_META_KEY = "HTTP_X_FORWARDED_FOR"
    permit = hold(key=partition_of("2001:db8:5::1"))
    try:
        for form in ("[2001:db8:5::1]:443", "[2001:db8:5::2]", "[2001:db8:5:0:ffff::9]:1"):
            assert client.get(IP_URL, HTTP_X_FORWARDED_FOR=form).status_code == 503, form
        assert client.get(IP_URL, HTTP_X_FORWARDED_FOR="[2001:db8:6::1]:443").status_code == 200
    finally:
        permit.release()


def test_a_port_on_remote_addr_is_dropped(client: Client) -> None:
    permit = hold(key=partition_of(CLIENT))
    try:
        assert client.get(IP_URL, REMOTE_ADDR=f"{CLIENT}:50123").status_code == 503
        assert client.get(IP_URL, REMOTE_ADDR=f"[::ffff:{CLIENT}]:50123").status_code == 503
    finally:
        permit.release()


UNPARSEABLE = [
    "unknown",  # what some proxies write for a unix socket
    "_hidden",  # an obfuscated RFC 7239 identifier
    "garbage",
    "203.0.113.7:http",
    "203.0.113.7:",
    "203.0.113.07",
    "999.1.1.1",
    "1.2.3.4.5",
    "[2001:db8::1",
    "[]:80",
    "::ffff:203.0.113.7:80",
    "{guarded}:holders",
    "\x00",
    "🙂",
    "a" * 5000,
]


@pytest.mark.parametrize("proxies", [1, 2])
def test_unparseable_entries_are_keyed_as_the_connecting_address(client: Client, settings, proxies: int) -> None:
    """A client that writes nonsense where its address goes shares the proxy's partition, never a fresh one."""
    settings.SEMAPHORE_IP_META_KEY = "HTTP_X_FORWARDED_FOR"
    settings.SEMAPHORE_TRUSTED_PROXIES = proxies
    permit = hold(key=partition_of(OUR_PROXY))
    try:
        with heard() as answers:
            for entry in UNPARSEABLE:
                header = f"{CLIENT}, {entry}" if proxies == 1 else f"{CLIENT}, {entry}, {OUR_PROXY}"
                answer = client.get(IP_URL, REMOTE_ADDR=OUR_PROXY, HTTP_X_FORWARDED_FOR=header)
                assert answer.status_code == 503, entry
    finally:
        permit.release()
    assert known_keys() == {partition_of(OUR_PROXY)}
    assert answers.of(get_semaphore("guarded", key=partition_of(OUR_PROXY)))[1] == len(UNPARSEABLE)
