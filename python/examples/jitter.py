#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A periodic measurement loop beside CPU hogs, with and without a pace
reservation: how late each job starts and how long until it is done.

Each job releases at a period boundary, does WORK seconds of CPU work
(counted in its own CPU time, so preemption does not shorten it) and
records its start latency (start - release) and response time (done -
release); a job not done by the next release missed its deadline.
Without a reservation the loop sleeps to each boundary and takes its
turn with the hogs; with one (kind "aligned") it sleeps with
wait_next_allocation() and its budget comes in one block from there.

    sudo PACE_SOCKET=/run/pace/broker.sock python3 jitter.py --seconds 10

Starts its own hogs (SCHED_OTHER spinners, HOGS on every CPU) and kills
them. The third mode is the kernel's own reservation, SCHED_DEADLINE with
the same runtime and period (root), as the reference.
"""

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import pace  # noqa: E402


def busy(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def set_deadline(runtime_ns, period_ns):
    """The calling thread to SCHED_DEADLINE (root): the kernel's own
    reservation, as the reference beside pace."""
    import ctypes
    import platform

    class Attr(ctypes.Structure):
        _fields_ = [("size", ctypes.c_uint32), ("policy", ctypes.c_uint32), ("flags", ctypes.c_uint64),
                    ("nice", ctypes.c_int32), ("priority", ctypes.c_uint32), ("runtime", ctypes.c_uint64),
                    ("deadline", ctypes.c_uint64), ("period", ctypes.c_uint64)]

    nr = {"x86_64": 314, "aarch64": 274}.get(platform.machine())
    if nr is None:
        raise OSError(f"sched_setattr's number on {platform.machine()} is not known here")
    libc = ctypes.CDLL(None, use_errno=True)
    attr = Attr(size=ctypes.sizeof(Attr), policy=6, runtime=runtime_ns, deadline=period_ns, period=period_ns)
    if libc.syscall(nr, 0, ctypes.byref(attr), 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"SCHED_DEADLINE: {os.strerror(err)}")


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


def measure(args, period_ns, reservation=None):
    """The loop: one job a period, released at each period boundary (with
    a reservation: at each allocation's start), until args.seconds pass."""
    jobs, late, resp, missed, miss_at = 0, [], [], 0, []
    t0 = time.monotonic_ns()
    end = t0 + round(args.seconds * 1e9)
    release = (t0 // period_ns + 1) * period_ns
    while True:
        if reservation:
            release = reservation.wait_next_allocation()
        else:
            now = time.monotonic_ns()
            if release > now:
                time.sleep((release - now) / 1e9)
        start = time.monotonic_ns()
        if start >= end:
            break
        busy(args.work)
        done = time.monotonic_ns()
        jobs += 1
        late.append((start - release) / 1e3)
        resp.append((done - release) / 1e3)
        if done > release + period_ns:
            missed += 1
            miss_at.append((release - t0) / 1e9)
        if not reservation:
            # The next boundary after this job: a job that overran skips
            # the releases it missed, as the reserved loop does.
            release = (done // period_ns + 1) * period_ns
    return jobs, late, resp, missed, miss_at


def run_deadline(args, period_ns):
    # The kernel admits a deadline task only with every CPU of its root
    # domain allowed: the loop's CPU alone where it is a domain of its own
    # (pace's cpusets can make it one), else every CPU (the hogs are on
    # every CPU for that case).
    runtime = round(args.util * period_ns)
    try:
        set_deadline(runtime, period_ns)
    except PermissionError:
        os.sched_setaffinity(0, args.all_cpus)
        set_deadline(runtime, period_ns)
    return measure(args, period_ns)


def run(mode, args):
    period_ns = round(args.period * 1e9)
    if mode == "cfs":
        return measure(args, period_ns)
    if mode == "pace":
        with pace.connect(args.socket) as client:
            with client.reserve(args.period, args.util, kind="aligned", cpu=args.cpu) as reservation:
                return measure(args, period_ns, reservation)
    if mode == "deadline":
        # In a thread of its own, which ends with it: the modes after this
        # one run as they did before.
        result = []
        worker = threading.Thread(target=lambda: result.append(run_deadline(args, period_ns)))
        worker.start()
        worker.join()
        if not result:
            raise SystemExit("jitter.py: the SCHED_DEADLINE run failed (root is needed)")
        return result[0]
    raise SystemExit(f"jitter.py: unknown mode {mode!r} (cfs, pace, deadline)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--period", type=float, default=0.010, help="seconds (0.010)")
    p.add_argument("--work", type=float, default=0.002, help="CPU seconds a job (0.002)")
    p.add_argument("--util", type=float, default=0.4, help="the reservation, a fraction of the CPU (0.4)")
    p.add_argument("--seconds", type=float, default=5.0, help="per mode (5)")
    p.add_argument("--cpu", type=int, default=1)
    p.add_argument("--hogs", type=int, default=2, help="SCHED_OTHER spinners on each CPU (2)")
    p.add_argument("--socket", default=None, help="the broker's socket ($PACE_SOCKET)")
    p.add_argument("--modes", default="cfs,pace,deadline",
                   help="cfs (no reservation), pace, deadline (SCHED_DEADLINE, the kernel's own)")
    p.add_argument("--verbose", action="store_true", help="when each missed deadline was released")
    args = p.parse_args()

    args.all_cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {args.cpu})
    hogs = [subprocess.Popen([sys.executable, "-c",
                              f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
            for cpu in sorted(args.all_cpus) for _ in range(args.hogs)]
    try:
        time.sleep(0.3)
        print(f"period {args.period * 1e3:g} ms, {args.work * 1e3:g} ms of work a job, {args.hogs} hogs on each "
              f"CPU, the loop on CPU {args.cpu} (deadline: anywhere), {args.seconds:g} s a mode; start latency and "
              f"response time in us")
        print(f"{'mode':<6} {'jobs':>5} {'start p50':>10} {'start p99':>10} {'resp p50':>10} {'resp p99':>10} "
              f"{'resp max':>10} {'missed':>8}")
        for mode in args.modes.split(","):
            jobs, late, resp, missed, miss_at = run(mode, args)
            if not jobs:
                print(f"{mode:<6} no job ran")
                continue
            print(f"{mode:<6} {jobs:>5} {statistics.median(late):>10.0f} {pct(late, 0.99):>10.0f} "
                  f"{statistics.median(resp):>10.0f} {pct(resp, 0.99):>10.0f} {max(resp):>10.0f} "
                  f"{missed / jobs:>7.1%}", flush=True)
            if args.verbose and miss_at:
                print(f"       missed at {', '.join(f'{t:.2f}' for t in miss_at[:20])} s"
                      f"{' ...' if len(miss_at) > 20 else ''}")
    finally:
        for h in hogs:
            h.kill()
            h.wait()


if __name__ == "__main__":
    main()
