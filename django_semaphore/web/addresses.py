"""Client addresses as servers and proxies write them, reduced to the address that identifies a client.

The per-IP key must give each client one partition whatever form its
address arrives in. A dual-stack listener (bound to ``::``) reports IPv4
clients as IPv4-mapped IPv6 (``::ffff:a.b.c.d``) and NAT64 gateways as
``64:ff9b::a.b.c.d``; grouped by /64 like native IPv6, every IPv4 client
would share one partition. Some proxies append a port (``a.b.c.d:port``,
``[v6]:port``); kept verbatim, each connection would get a fresh one.
"""

from __future__ import annotations

import ipaddress
import re

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# RFC 6052's well-known prefix; the IPv4 address is the last 32 bits.
NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_BRACKETED = re.compile(r"^\[([^\[\]]+)\](?::[0-9]{1,5})?$")
_IPV4_WITH_PORT = re.compile(r"^([0-9.]+):[0-9]{1,5}$")


def parse_address(text: str) -> IPAddress | None:
    """The address in ``text`` (``a.b.c.d``, ``a.b.c.d:port``, ``v6``, ``[v6]``, ``[v6]:port``), or None.

    IPv4-mapped and NAT64 addresses come back as the IPv4 address they carry;
    an IPv6 zone (``%eth0``) is dropped, since it names the server's
    interface, not the client.
    """
    text = text.strip()
    match = _BRACKETED.match(text) or _IPV4_WITH_PORT.match(text)
    if match:
        text = match.group(1)
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if address.version == 4:
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return ipaddress.IPv6Address(address.packed)


def client_network(address: IPAddress, ipv6_prefix: int) -> str:
    """An IPv4 address as itself; an IPv6 one as its ``/ipv6_prefix`` network, which one client usually owns."""
    if address.version == 4:
        return str(address)
    return str(ipaddress.IPv6Network((address, ipv6_prefix), strict=False))
