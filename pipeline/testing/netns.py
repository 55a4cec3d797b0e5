"""Share-nothing test nodes on one machine: Linux network and mount namespaces, for cluster tests.

`Bridge()` (a context manager) owns a Linux bridge on a private /24 subnet (10.X.Y.0/24, one no
address or route of the host uses) whose first address, `host_ip`, is the host's. `bridge.node()`
adds a network namespace joined to the bridge by a veth pair: loopback plus one address on the
subnet, no route anywhere else. `bridge.spawn(node, argv)` runs a command in that namespace under
`unshare -m` with fresh tmpfs mounts on /tmp and /dev/shm: a node shares no network, temp dir or
shared memory with the host or another node (it does see the installed files, the venv and the
repository, as machines booted from one image do).

Needs root, `ip` (iproute2) and `unshare` (util-linux): otherwise, or when a command fails,
`NamespaceError` says which, so a test that needs the nodes fails with the reason (it never skips).
Leaving the `with`, also on an error, SIGKILLs every process in each namespace by pid (found
through /proc/PID/ns/net) and deletes the namespaces, veths and the bridge; `bridge.kill(node)`
does the first half at any time (a node that dies at once, as when a machine is switched off).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# inside a node: private /tmp and /dev/shm, then the command (argv follows "sh" as $@)
_PRIVATE_MOUNTS = 'mount -t tmpfs tmpfs /tmp && mount -t tmpfs tmpfs /dev/shm && exec "$@"'


class NamespaceError(RuntimeError):
    """The namespaces cannot be made here (not root, a tool missing) or an `ip` command failed."""


@dataclass(frozen=True)
class Node:
    name: str  # the network namespace's name (`ip netns exec NAME ...`)
    ip: str
    veth: str  # the host end of its veth pair, in the bridge


def check_tools() -> None:
    """NamespaceError unless this process can make namespaces: root, `ip` and `unshare`."""
    if os.geteuid() != 0:
        raise NamespaceError(
            f"network namespaces need root (this runs as uid {os.geteuid()}): run as root, as"
            " CI does"
        )
    for tool, package in (("ip", "iproute2"), ("unshare", "util-linux")):
        if shutil.which(tool) is None:
            raise NamespaceError(f"`{tool}` is not installed: apt-get install -y {package}")


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise NamespaceError(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def _free_subnet() -> str:
    """'10.X.Y.' of a /24 that none of the host's addresses or routes mentions."""
    used = _ip("-4", "-o", "addr") + _ip("-4", "route")
    for _ in range(100):
        prefix = f"10.{random.randint(64, 250)}.{random.randint(1, 250)}."
        if prefix not in used:
            return prefix
    raise NamespaceError("no free 10.X.Y.0/24 subnet found for the test bridge")


class Bridge:
    """A bridge on a private /24 and the namespaced nodes on it; removed entirely on exit."""

    def __init__(self) -> None:
        self.tag = f"{random.randrange(16**4):04x}"  # names stay within IFNAMSIZ (15 chars)
        self.name = f"plbr{self.tag}"
        self.nodes: list[Node] = []
        self.host_ip = ""

    def __enter__(self) -> Bridge:
        check_tools()
        try:
            self.prefix = _free_subnet()
            self.host_ip = f"{self.prefix}1"
            _ip("link", "add", "name", self.name, "type", "bridge")
            _ip("addr", "add", f"{self.host_ip}/24", "dev", self.name)
            _ip("link", "set", self.name, "up")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def node(self) -> Node:
        """A new network namespace on the bridge, with the next address of the subnet."""
        i = len(self.nodes) + 2
        node = Node(name=f"pl{self.tag}n{i}", ip=f"{self.prefix}{i}", veth=f"plv{self.tag}n{i}")
        peer = f"plp{self.tag}n{i}"
        _ip("netns", "add", node.name)
        self.nodes.append(node)
        _ip("link", "add", node.veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", node.veth, "master", self.name)
        _ip("link", "set", node.veth, "up")
        _ip("link", "set", peer, "netns", node.name)
        _ip("-n", node.name, "link", "set", peer, "name", "eth0")
        _ip("-n", node.name, "addr", "add", f"{node.ip}/24", "dev", "eth0")
        _ip("-n", node.name, "link", "set", "eth0", "up")
        _ip("-n", node.name, "link", "set", "lo", "up")
        return node

    def spawn(
        self, node: Node, argv: list[str], env: dict[str, str], log: Path
    ) -> subprocess.Popen:
        """Start `argv` in `node`'s namespace with private /tmp and /dev/shm; output to `log`."""
        with open(log, "wb") as out:
            return subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    node.name,
                    "unshare",
                    "-m",
                    "sh",
                    "-c",
                    _PRIVATE_MOUNTS,
                    "sh",
                    *argv,
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def pids(self, node: Node) -> dict[int, str]:
        """The processes in `node`'s network namespace: pid -> command line."""
        try:
            want = os.stat(f"/run/netns/{node.name}").st_ino
        except FileNotFoundError:
            return {}
        found = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                if os.stat(f"/proc/{pid}/ns/net").st_ino != want:
                    continue
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    found[int(pid)] = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue  # gone meanwhile, or not ours to read
        return found

    def kill(self, node: Node, timeout: float = 10.0) -> list[int]:
        """SIGKILL every process in `node`'s namespace, by pid, until none is left; the pids."""
        killed: list[int] = []
        deadline = time.monotonic() + timeout
        while pids := self.pids(node):
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise NamespaceError(f"processes in {node.name} survive SIGKILL: {pids}")
            time.sleep(0.05)
        return sorted(set(killed))

    def close(self) -> None:
        """Kill every node's processes; delete the namespaces, veths and the bridge. Every step
        is tried; the first failure is raised at the end."""
        errors: list[Exception] = []
        for node in self.nodes:
            for step in (
                lambda n=node: self.kill(n),
                lambda n=node: _ip("link", "del", n.veth) if _link_exists(n.veth) else None,
                lambda n=node: _ip("netns", "del", n.name),
            ):
                try:
                    step()
                except Exception as e:  # noqa: BLE001 - keep tearing down, report after
                    errors.append(e)
        self.nodes = []
        if _link_exists(self.name):
            try:
                _ip("link", "del", self.name)
            except NamespaceError as e:
                errors.append(e)
        if errors:
            raise errors[0]


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()
