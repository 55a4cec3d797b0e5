"""run/early_start.py: Ray's start runs in a thread while the driver goes on (here, with Ray's
start replaced by a stand-in: no Ray), its error reaches the driver, and the thread that
started Ray outlives ray.init (Ray's processes die with the thread that spawned them)."""

from __future__ import annotations

import threading

import pytest
from support import SOURCES_CONFIG

from pipeline.config import load_config
from pipeline.run import early_start, ray_env


@pytest.fixture
def cfg(tmp_path):
    overrides = ["dedup.exact=false", "dedup.near.enabled=false"]  # no compile child
    return load_config(SOURCES_CONFIG, output_uri=str(tmp_path), overrides=overrides)


def _stand_in(monkeypatch, release: threading.Event, error: Exception | None = None):
    started = []

    def ensure_ray(cfg):
        started.append(threading.current_thread())
        assert release.wait(30)
        if error is not None:
            raise error

    monkeypatch.setattr(ray_env, "ensure_ray", ensure_ray)
    monkeypatch.setattr(ray_env, "ray_is_up", lambda: False)
    return started


def test_the_driver_goes_on_while_ray_starts_and_waits_for_it(cfg, monkeypatch):
    release = threading.Event()
    started = _stand_in(monkeypatch, release)
    early = early_start.EarlyStart.begin(cfg)
    assert not release.is_set()  # begin returned while Ray's start was still under way
    release.set()
    early.wait_for_ray()
    (thread,) = started
    assert thread is not threading.main_thread() and thread.is_alive()  # parked, not ended
    assert early.clock.split()["ray start"] >= 0


def test_what_ray_init_raised_is_raised_where_the_driver_waits(cfg, monkeypatch):
    release = threading.Event()
    _stand_in(monkeypatch, release, RuntimeError("no raylet"))
    early = early_start.EarlyStart.begin(cfg)
    release.set()
    with pytest.raises(RuntimeError, match="no raylet"):
        early.wait_for_ray()
    early.settle()  # and nothing left to wait for


def test_a_cluster_run_starts_nothing_early(cfg, monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    started = _stand_in(monkeypatch, threading.Event())
    early = early_start.EarlyStart.begin(cfg)
    assert started == [] and early.compile_child is None
