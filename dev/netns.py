"""Network namespaces for fault tests: every process on a host of its own, partitions on demand.

`NetworkLab` builds a bridge in the root namespace (the clients' side, address .1) and one
namespace per host, each joined to the bridge by a veth pair, all in a /24 of 10.0.0.0/8 that no
route of the machine uses. A partition between two hosts is a pair of blackhole routes (one in
each namespace), which also cuts connections already open; healing deletes them. Names start with
`odr<pid>` (pid: the lab owner's, five digits), so labs never clash, and `sweep_stale()` removes
what a killed owner left behind. Needs root and `ip` (iproute2).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from dataclasses import dataclass

PREFIX = "odr"
_NAME = re.compile(rf"^{PREFIX}(\d{{5}})")


class NetnsUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, or no iproute2)."""


def unavailable_reason() -> str | None:
    """Why namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2 (`ip`)"
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=check)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def sweep_stale() -> list[str]:
    """Delete the namespaces and links of labs whose owner process is gone; returns their names."""
    removed = []
    names = [line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.strip()]
    links = [m.group(1) for m in re.finditer(r"^\d+: ([^:@]+)", _ip("-o", "link", "show", check=False).stdout, re.M)]
    for name in names + links:
        m = _NAME.match(name)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        if name in names:
            _ip("netns", "delete", name, check=False)
        else:
            _ip("link", "delete", name, check=False)
        removed.append(name)
    return removed


@dataclass(frozen=True)
class Host:
    name: str
    netns: str
    ip: str


class NetworkLab:
    """A bridge, and hosts added with `add_host`; `close()` (or the context manager) removes all."""

    def __init__(self) -> None:
        reason = unavailable_reason()
        if reason is not None:
            raise NetnsUnavailable(reason)
        sweep_stale()
        self.tag = f"{PREFIX}{os.getpid() % 100000:05d}"
        self.bridge = f"{self.tag}br"
        self.hosts: dict[str, Host] = {}
        self.blocked: set[frozenset[str]] = set()
        self._veths: list[str] = []
        self._netns: list[str] = []
        self.network = self._free_network()
        self._addresses = self.network.hosts()
        self.client_ip = str(next(self._addresses))
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{self.client_ip}/{self.network.prefixlen}", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _free_network() -> ipaddress.IPv4Network:
        """A /24 in 10.0.0.0/8 that overlaps no route here, chosen from the pid (then probing)."""
        routes = _ip("-4", "route", "show", "table", "all", check=False).stdout
        used = []
        for m in re.finditer(r"(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", routes):
            try:
                used.append(ipaddress.ip_network(m.group(1), strict=False))
            except ValueError:
                continue
        start = os.getpid() % 50000
        for i in range(50000):
            n = start + i
            candidate = ipaddress.IPv4Network(f"10.{100 + (n // 250) % 150}.{n % 250}.0/24")
            if not any(candidate.overlaps(u) for u in used if u.prefixlen > 0):
                return candidate
        raise NetnsUnavailable("no free /24 in 10.0.0.0/8")

    def add_host(self, name: str) -> Host:
        """A namespace `<tag>-<name>` with loopback up and an address on the bridge."""
        index = len(self.hosts)
        netns = f"{self.tag}-{name}"
        outside, inside = f"{self.tag}v{index}", f"{self.tag}p{index}"
        ip = str(next(self._addresses))
        _ip("netns", "add", netns)
        self._netns.append(netns)
        _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
        self._veths.append(outside)
        _ip("link", "set", inside, "netns", netns)
        _ip("link", "set", outside, "master", self.bridge)
        _ip("link", "set", outside, "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "addr", "add", f"{ip}/{self.network.prefixlen}", "dev", inside)
        _ip("-n", netns, "link", "set", inside, "up")
        host = Host(name, netns, ip)
        self.hosts[name] = host
        return host

    def exec_prefix(self, name: str) -> list[str]:
        """The argv prefix that runs a command on host `name`."""
        return ["ip", "netns", "exec", self.hosts[name].netns]

    # --- partitions ----------------------------------------------------------------------------

    def block(self, a: str, b: str) -> None:
        """No packet between hosts `a` and `b` (either may be "clients": the bridge side)."""
        pair = frozenset((a, b))
        if pair in self.blocked or a == b:
            return
        self._route("add", a, b)
        self._route("add", b, a)
        self.blocked.add(pair)

    def unblock(self, a: str, b: str) -> None:
        pair = frozenset((a, b))
        if pair not in self.blocked:
            return
        self._route("delete", a, b)
        self._route("delete", b, a)
        self.blocked.discard(pair)

    def isolate(self, name: str, keep: tuple[str, ...] = ()) -> list[tuple[str, str]]:
        """Cut `name` from every other host (and the clients) except those in `keep`."""
        cut = []
        for other in [*self.hosts, "clients"]:
            if other != name and other not in keep:
                self.block(name, other)
                cut.append((name, other))
        return cut

    def heal(self) -> None:
        for pair in list(self.blocked):
            a, b = sorted(pair)
            self.unblock(a, b)

    def _ip_of(self, name: str) -> str:
        return self.client_ip if name == "clients" else self.hosts[name].ip

    def _route(self, action: str, src: str, dst: str) -> None:
        args = ["route", action, "blackhole", f"{self._ip_of(dst)}/32"]
        if src == "clients":
            _ip(*args, check=action == "add")
        else:
            _ip("-n", self.hosts[src].netns, *args, check=action == "add")

    # --- cleanup -------------------------------------------------------------------------------

    def close(self) -> None:
        """Remove every route, namespace and link of the lab (safe to call twice, and after a
        partial set-up)."""
        for pair in list(self.blocked):
            a, b = sorted(pair)
            for src, dst in ((a, b), (b, a)):
                if src == "clients":
                    _ip("route", "delete", "blackhole", f"{self._ip_of(dst)}/32", check=False)
        self.blocked.clear()
        for netns in self._netns:
            _ip("netns", "delete", netns, check=False)
        for veth in self._veths:
            _ip("link", "delete", veth, check=False)
        _ip("link", "delete", self.bridge, check=False)
        self._netns.clear()
        self._veths.clear()

    def __enter__(self) -> NetworkLab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
