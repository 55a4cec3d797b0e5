"""Where share-nothing test nodes cannot be made, pipeline.testing.netns says why (the cluster
test then fails with that reason instead of skipping)."""

from __future__ import annotations

import pytest

from pipeline.testing import netns


def test_not_root_is_named(monkeypatch):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(netns.NamespaceError, match="need root .*uid 1000"):
        netns.check_tools()


@pytest.mark.parametrize(("tool", "package"), [("ip", "iproute2"), ("unshare", "util-linux")])
def test_a_missing_tool_is_named_with_its_package(monkeypatch, tool, package):
    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    real = netns.shutil.which
    monkeypatch.setattr(netns.shutil, "which", lambda name: None if name == tool else real(name))
    with pytest.raises(netns.NamespaceError, match=f"`{tool}` is not installed.*{package}"):
        netns.check_tools()


def test_a_failing_ip_command_is_named():
    with pytest.raises(netns.NamespaceError, match="`ip link show no-such-link0` failed"):
        netns._ip("link", "show", "no-such-link0")
