# SPDX-License-Identifier: MIT
"""Fixtures: a real pace-broker in a private runtime directory (as
nobody when the tests run as root, as the daemon would), and as root a
real pace-dispatcher beside it. Paths come from meson (PACE_BROKER,
PACE_DISPATCHER, PACE_LIBPACE); the package from the source tree."""

import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pace  # noqa: E402

CONFIG = {"slot_us": 1000, "non_rt_share": 0.25, "non_rt_max_gap_ms": 20, "reserve_root_processes": True}


def _wait_for(predicate, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.02)
    raise TimeoutError(f"{what} after {seconds} s")


class Daemons:
    def __init__(self, tmp):
        self.dir = tmp
        self.socket = os.path.join(tmp, "broker.sock")
        self.config = os.path.join(tmp, "pace.json")
        self.procs = []

    def log(self, name):
        try:
            with open(os.path.join(self.dir, name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def _start(self, argv, log, user=None):
        out = open(os.path.join(self.dir, log), "w")
        kwargs = {}
        if user is not None:
            kwargs = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=out, **kwargs)
        out.close()
        self.procs.append(p)
        return p

    def start_broker(self):
        exe = os.environ["PACE_BROKER"]
        user = None
        if os.geteuid() == 0:
            user = pwd.getpwnam("nobody")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
        self.broker = self._start([exe, "--config", self.config, "--runtime-dir", self.dir], "broker.log", user)
        _wait_for(lambda: os.path.exists(self.socket) or self.broker.poll() is not None, 5, "no broker socket")
        if self.broker.poll() is not None:
            raise RuntimeError("pace-broker exited:\n" + self.log("broker.log"))

    def start_dispatcher(self):
        exe = os.environ["PACE_DISPATCHER"]
        self.dispatcher = self._start([exe, "--config", self.config, "--runtime-dir", self.dir], "dispatcher.log")
        # Ready once it has put the table in force on a CPU.
        _wait_for(lambda: "in force" in self.log("dispatcher.log") or self.dispatcher.poll() is not None, 10,
                  "the dispatcher put no table in force")
        if self.dispatcher.poll() is not None:
            raise RuntimeError("pace-dispatcher exited:\n" + self.log("dispatcher.log"))

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


@pytest.fixture
def daemons():
    tmp = tempfile.mkdtemp(prefix="pace-python.")
    os.chmod(tmp, 0o755)
    d = Daemons(tmp)
    with open(d.config, "w") as f:
        json.dump(CONFIG, f)
    try:
        yield d
    finally:
        d.stop()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def broker(daemons):
    """A broker alone: admission, the table, no dispatching."""
    daemons.start_broker()
    return daemons


@pytest.fixture
def client(broker):
    with pace.connect(broker.socket) as c:
        yield c


@pytest.fixture
def stack(daemons):
    """Broker and dispatcher: reservations that run. Root only."""
    if os.geteuid() != 0:
        pytest.skip("the dispatcher needs root (SCHED_FIFO)")
    if os.cpu_count() < 2:
        pytest.skip("needs two CPUs")
    daemons.start_broker()
    daemons.start_dispatcher()
    return daemons
