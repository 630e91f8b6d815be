# SPDX-License-Identifier: MIT
"""pace for Python: soft real-time CPU reservations through libpace.

    import pace

    with pace.connect() as client:
        with client.reserve(period=0.010, utilization=0.3, kind="aligned") as r:
            while running:
                r.wait_next_allocation()    # a whole budget ahead
                do_one_frame()

Times are seconds (floats, as time.sleep takes them) or, where a name ends
in _ns, integer nanoseconds of CLOCK_MONOTONIC (time.monotonic_ns()).
Utilization is a fraction of one CPU: 0.3 is 30%.

Every refusal raises a PaceError (a subclass per reason: NoCapacity,
PermissionDenied, ...) whose text is the broker's own sentence, which names
what to change. Nothing here talks to the broker but libpace: this module
only turns Python values into libpace's and back.
"""

import ctypes
import ctypes.util
import dataclasses
import errno as _errno
import os
import threading
import time
from typing import List, Optional

__all__ = [
    "connect", "Client", "Reservation", "Grant", "Accounting", "Status", "CpuStatus", "NiceLevel",
    "PaceError", "Malformed", "UnsupportedVersion", "InvalidArgument", "NoCapacity", "NoSuchProcess",
    "PermissionDenied", "NoSuchReservation", "LimitExceeded", "Internal", "Busy", "ProtocolError",
    "TransportError", "default_socket", "SCOPES", "KINDS",
]

# ---- libpace's types (pace.h), field for field ----

_pid_t = ctypes.c_int
_uid_t = ctypes.c_uint

SCOPES = {"process": 0, "thread": 1, "tree": 2}
KINDS = {"default": 0, "slots": 1, "server": 2, "aligned": 3}
_SCOPE_NAMES = {v: k for k, v in SCOPES.items()}
_KIND_NAMES = {v: k for k, v in KINDS.items()}


class _ReserveParams(ctypes.Structure):
    _fields_ = [
        ("period_ns", ctypes.c_uint64),
        ("utilization_ppm", ctypes.c_uint32),
        ("pid", _pid_t),
        ("cpu", ctypes.c_int),
        ("scope", ctypes.c_int),
        ("tid", _pid_t),
        ("kind", ctypes.c_int),
    ]


class _Accounting(ctypes.Structure):
    _fields_ = [
        ("valid", ctypes.c_int),
        ("window_ns", ctypes.c_uint64),
        ("delivered_ns", ctypes.c_uint64),
        ("cpu_time_ns", ctypes.c_uint64),
        ("periods", ctypes.c_uint64),
        ("periods_blocked", ctypes.c_uint64),
        ("periods_wanted_more", ctypes.c_uint64),
    ]


class _Grant(ctypes.Structure):
    _fields_ = [
        ("id", ctypes.c_uint64),
        ("pid", _pid_t),
        ("uid", _uid_t),
        ("cpu", ctypes.c_int),
        ("kind", ctypes.c_int),
        ("period_ns", ctypes.c_uint64),
        ("budget_ns", ctypes.c_uint64),
        ("slot_ns", ctypes.c_uint64),
        ("requested_period_ns", ctypes.c_uint64),
        ("requested_utilization_ppm", ctypes.c_uint32),
        ("scope", ctypes.c_int),
        ("tid", _pid_t),
        ("threads", ctypes.c_uint32),
        ("phase_ns", ctypes.c_uint64),
        ("accounting", _Accounting),
        ("split_cpus", ctypes.c_uint64),
    ]


class _CpuStatus(ctypes.Structure):
    _fields_ = [
        ("cpu", ctypes.c_int),
        ("reserved_ppm", ctypes.c_uint32),
        ("free_ppm", ctypes.c_uint32),
        ("frame_ns", ctypes.c_uint64),
    ]


class _NiceLevel(ctypes.Structure):
    _fields_ = [("pid", _pid_t), ("tid", _pid_t), ("nice", ctypes.c_int)]


class _StatusReport(ctypes.Structure):
    _fields_ = [
        ("non_rt_share_ppm", ctypes.c_uint32),
        ("generation", ctypes.c_uint64),
        ("n_reservations", ctypes.c_size_t),
        ("reservations", ctypes.POINTER(_Grant)),
        ("n_cpus", ctypes.c_size_t),
        ("cpus", ctypes.POINTER(_CpuStatus)),
        ("on_behalf", ctypes.POINTER(ctypes.c_uint8)),
        ("n_nice_levels", ctypes.c_size_t),
        ("nice_levels", ctypes.POINTER(_NiceLevel)),
    ]


def _load():
    """libpace: $PACE_LIBPACE (a path, for a build tree), else the system's."""
    path = os.environ.get("PACE_LIBPACE") or ctypes.util.find_library("pace") or "libpace.so.0"
    lib = ctypes.CDLL(path, use_errno=True)
    handle = ctypes.c_void_p
    signatures = {
        "pace_connect": (ctypes.c_int, [ctypes.c_char_p, ctypes.POINTER(handle)]),
        "pace_close": (None, [handle]),
        "pace_reserve": (ctypes.c_int, [handle, ctypes.POINTER(_ReserveParams), ctypes.POINTER(_Grant)]),
        "pace_modify": (ctypes.c_int, [handle, ctypes.c_uint64, ctypes.POINTER(_ReserveParams),
                                       ctypes.POINTER(_Grant)]),
        "pace_release": (ctypes.c_int, [handle, ctypes.c_uint64]),
        "pace_status": (ctypes.c_int, [handle, ctypes.POINTER(ctypes.POINTER(_StatusReport))]),
        "pace_status_report_free": (None, [ctypes.POINTER(_StatusReport)]),
        "pace_reload": (ctypes.c_int, [handle]),
        "pace_reset": (ctypes.c_int, [handle]),
        "pace_next_allocation": (ctypes.c_uint64, [ctypes.POINTER(_Grant), ctypes.c_uint64]),
        "pace_wait_next_allocation": (ctypes.c_int, [ctypes.POINTER(_Grant), ctypes.POINTER(ctypes.c_uint64)]),
        "pace_strerror": (ctypes.c_char_p, [ctypes.c_int]),
        "pace_last_message": (ctypes.c_char_p, []),
        "pace_default_socket": (ctypes.c_char_p, []),
    }
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_lib = None
_lib_lock = threading.Lock()


def _libpace():
    global _lib
    with _lib_lock:
        if _lib is None:
            _lib = _load()
        return _lib


# ---- errors ----

_E_BASE = 1000


class PaceError(Exception):
    """A libpace call failed. code: libpace's negative code (a negative
    errno, or -(1000 + pace.proto's ErrorCode) for a refusal); reason: its
    short name (pace_strerror); sentence: the broker's own explanation,
    which names what to change, or None; str(): what was being done, then
    the sentence (or the reason)."""

    def __init__(self, code: int, reason: str, sentence: Optional[str] = None, doing: Optional[str] = None):
        text = sentence or reason
        super().__init__(f"{doing}: {text}" if doing else text)
        self.code = code
        self.reason = reason
        self.sentence = sentence


class Malformed(PaceError): pass
class UnsupportedVersion(PaceError): pass
class InvalidArgument(PaceError): pass
class NoCapacity(PaceError): pass
class NoSuchProcess(PaceError): pass
class PermissionDenied(PaceError): pass
class NoSuchReservation(PaceError): pass
class LimitExceeded(PaceError): pass
class Internal(PaceError): pass
class Busy(PaceError): pass
class ProtocolError(PaceError): pass


class TransportError(PaceError, OSError):
    """The broker could not be reached or the call failed locally: errno is set."""

    def __init__(self, code: int, reason: str, sentence: Optional[str] = None, doing: Optional[str] = None):
        PaceError.__init__(self, code, reason, sentence, doing)
        self.errno = -code
        self.strerror = reason

    def __str__(self) -> str:
        return PaceError.__str__(self)


_REFUSALS = {
    1: Malformed, 2: UnsupportedVersion, 3: InvalidArgument, 4: NoCapacity, 5: NoSuchProcess,
    6: PermissionDenied, 7: NoSuchReservation, 8: LimitExceeded, 9: Internal, 10: Busy, 100: ProtocolError,
}


def _error(lib, code: int, what: str) -> PaceError:
    reason = (lib.pace_strerror(code) or b"unknown error").decode(errors="replace")
    said = lib.pace_last_message() if code <= -_E_BASE else None
    sentence = said.decode(errors="replace") if said else None
    cls = _REFUSALS.get(-code - _E_BASE, PaceError) if code <= -_E_BASE else TransportError
    return cls(code, reason, sentence, what)


def _check(lib, r: int, what: str) -> int:
    if r < 0:
        raise _error(lib, r, what)
    return r


# ---- values ----

def _ns(seconds, name: str) -> int:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"{name} must be a number of seconds, not {type(seconds).__name__}")
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds, got {seconds!r}")
    ns = round(seconds * 1e9)
    if ns < 1 or ns >= 1 << 64:
        raise ValueError(f"{name} {seconds!r} s is out of range (1 ns to 584 years)")
    return ns


def _ppm(utilization) -> int:
    if isinstance(utilization, bool) or not isinstance(utilization, (int, float)):
        raise TypeError(f"utilization must be a fraction of one CPU (0.3 for 30%), not {type(utilization).__name__}")
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be a fraction of one CPU above 0 and at most 1 (0.3 for 30%), "
                         f"got {utilization!r}")
    return max(1, round(utilization * 1_000_000))


def _choice(value: str, table: dict, name: str) -> int:
    if value not in table:
        raise ValueError(f"{name} must be one of {', '.join(sorted(table))}, got {value!r}")
    return table[value]


def _int_arg(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < low or value > 0x7FFFFFFF:
        raise ValueError(f"{name} must be {low} or more, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class Accounting:
    """What the reservation received, measured by the dispatcher over about
    the last 2 s (window) and since it began."""
    window_ns: int
    delivered_ns: int
    cpu_time_ns: int
    periods: int
    periods_blocked: int
    periods_wanted_more: int

    @property
    def delivered(self) -> float:
        """CPU time received in the window, as a fraction of it."""
        return self.delivered_ns / self.window_ns if self.window_ns else 0.0


@dataclasses.dataclass(frozen=True)
class Grant:
    """A granted reservation, as the broker described it."""
    id: int
    pid: int
    uid: int
    cpu: int
    kind: str
    scope: str
    tid: int
    period_ns: int
    budget_ns: int
    slot_ns: int
    phase_ns: int
    requested_period_ns: int
    requested_utilization: float
    threads: int
    split_cpus: List[int]
    accounting: Optional[Accounting]
    on_behalf: bool = False

    @property
    def period(self) -> float:
        return self.period_ns / 1e9

    @property
    def budget(self) -> float:
        return self.budget_ns / 1e9

    @property
    def utilization(self) -> float:
        """The granted budget as a fraction of the granted period."""
        return self.budget_ns / self.period_ns if self.period_ns else 0.0

    @classmethod
    def _from(cls, g: _Grant, on_behalf: bool = False) -> "Grant":
        acct = g.accounting
        return cls(
            id=g.id, pid=g.pid, uid=g.uid, cpu=g.cpu, kind=_KIND_NAMES.get(g.kind, str(g.kind)),
            scope=_SCOPE_NAMES.get(g.scope, str(g.scope)), tid=g.tid, period_ns=g.period_ns,
            budget_ns=g.budget_ns, slot_ns=g.slot_ns, phase_ns=g.phase_ns,
            requested_period_ns=g.requested_period_ns,
            requested_utilization=g.requested_utilization_ppm / 1e6, threads=g.threads,
            split_cpus=[c for c in range(64) if g.split_cpus >> c & 1],
            accounting=Accounting(acct.window_ns, acct.delivered_ns, acct.cpu_time_ns, acct.periods,
                                  acct.periods_blocked, acct.periods_wanted_more) if acct.valid else None,
            on_behalf=on_behalf)


@dataclasses.dataclass(frozen=True)
class CpuStatus:
    cpu: int
    reserved: float
    free: float
    frame_ns: int


@dataclasses.dataclass(frozen=True)
class NiceLevel:
    pid: int
    tid: int
    nice: int


@dataclasses.dataclass(frozen=True)
class Status:
    """pacectl status, as values: every reservation (a split one once per
    piece), every CPU's reserved and free share, the threads held at a
    nice level."""
    non_rt_share: float
    generation: int
    reservations: List[Grant]
    cpus: List[CpuStatus]
    nice_levels: List[NiceLevel]


def default_socket() -> str:
    """The socket connect() uses without one: $PACE_SOCKET, else /run/pace/broker.sock."""
    return _libpace().pace_default_socket().decode()


# ---- the calls ----

class Client:
    """A connection to pace-broker. Usable from several threads (libpace
    serialises calls on it); not across fork(). Close it, or use it as a
    context manager: a reservation outlives its connection (it ends when
    released or when its process exits)."""

    def __init__(self, socket_path: Optional[str] = None):
        lib = _libpace()
        handle = ctypes.c_void_p()
        path = os.fsencode(socket_path) if socket_path is not None else None
        _check(lib, lib.pace_connect(path, ctypes.byref(handle)),
               f"connecting to {socket_path or default_socket()}")
        self._lib = lib
        self._handle = handle
        self._pid = os.getpid()

    def _live(self):
        if self._handle is None:
            raise ValueError("the pace client is closed")
        if os.getpid() != self._pid:
            raise RuntimeError("a pace client cannot be used across fork(): connect again in the child")
        return self._handle

    def close(self) -> None:
        if self._handle is not None:
            if os.getpid() == self._pid:
                self._lib.pace_close(self._handle)
            self._handle = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _params(self, period, utilization, pid, tid, cpu, scope, kind) -> _ReserveParams:
        return _ReserveParams(
            period_ns=_ns(period, "period"), utilization_ppm=_ppm(utilization), pid=_int_arg(pid, "pid", 0),
            cpu=-1 if cpu is None else _int_arg(cpu, "cpu", 0), scope=_choice(scope, SCOPES, "scope"),
            tid=_int_arg(tid, "tid", 0), kind=_choice(kind, KINDS, "kind"))

    def reserve(self, period: float, utilization: float, *, pid: int = 0, tid: int = 0,
                cpu: Optional[int] = None, scope: str = "process", kind: str = "default") -> "Reservation":
        """utilization of one CPU in every period seconds, for pid (0: this
        process) or, with scope="thread", for thread tid (0 with pid 0: the
        calling thread). kind: "slots" (the default), "server" or
        "aligned". cpu: None lets the broker choose."""
        params = self._params(period, utilization, pid, tid, cpu, scope, kind)
        grant = _Grant()
        _check(self._lib, self._lib.pace_reserve(self._live(), ctypes.byref(params), ctypes.byref(grant)),
               f"reserving {utilization:.4g} of a CPU every {period:.6g} s")
        return Reservation(self, grant)

    def status(self) -> Status:
        report = ctypes.POINTER(_StatusReport)()
        _check(self._lib, self._lib.pace_status(self._live(), ctypes.byref(report)), "asking for the status")
        try:
            s = report.contents
            flags = [bool(s.on_behalf[i]) if s.on_behalf else False for i in range(s.n_reservations)]
            return Status(
                non_rt_share=s.non_rt_share_ppm / 1e6, generation=s.generation,
                reservations=[Grant._from(s.reservations[i], flags[i]) for i in range(s.n_reservations)],
                cpus=[CpuStatus(c.cpu, c.reserved_ppm / 1e6, c.free_ppm / 1e6, c.frame_ns)
                      for c in (s.cpus[i] for i in range(s.n_cpus))],
                nice_levels=[NiceLevel(n.pid, n.tid, n.nice)
                             for n in (s.nice_levels[i] for i in range(s.n_nice_levels))])
        finally:
            self._lib.pace_status_report_free(report)

    def release(self, reservation_id: int) -> None:
        """Ends a reservation by id (the caller's own; root: anyone's)."""
        _check(self._lib, self._lib.pace_release(self._live(), _int_id(reservation_id)),
               f"releasing reservation {reservation_id}")

    def reload(self) -> str:
        """Root only: the broker re-reads its configuration. Its summary."""
        _check(self._lib, self._lib.pace_reload(self._live()), "reloading the configuration")
        said = self._lib.pace_last_message()
        return said.decode(errors="replace") if said else ""

    def reset(self) -> str:
        """Root only: every reservation is dropped. The broker's summary."""
        _check(self._lib, self._lib.pace_reset(self._live()), "resetting")
        said = self._lib.pace_last_message()
        return said.decode(errors="replace") if said else ""


def _int_id(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 64:
        raise ValueError(f"a reservation id is a positive int, got {value!r}")
    return value


class Reservation:
    """A live reservation. As a context manager it is released on exit (a
    reservation already gone, e.g. by an administrator's reset, is not an
    error there)."""

    def __init__(self, client: Client, grant: _Grant):
        self._client = client
        self._grant = grant
        self.released = False

    @property
    def id(self) -> int:
        return self._grant.id

    @property
    def grant(self) -> Grant:
        return Grant._from(self._grant)

    def modify(self, period: Optional[float] = None, utilization: Optional[float] = None, *,
               kind: str = "default", cpu: Optional[int] = None) -> Grant:
        """New parameters, all or nothing: refused, the reservation stays as
        it was. What is left out keeps what was asked for before; kind
        "default" keeps the kind."""
        g = self._grant
        period = g.requested_period_ns / 1e9 if period is None else period
        utilization = g.requested_utilization_ppm / 1e6 if utilization is None else utilization
        params = self._client._params(period, utilization, 0, 0, cpu, "process", kind)
        new = _Grant()
        lib = self._client._lib
        _check(lib, lib.pace_modify(self._client._live(), g.id, ctypes.byref(params), ctypes.byref(new)),
               f"modifying reservation {g.id} to {utilization:.4g} of a CPU every {period:.6g} s")
        self._grant = new
        return self.grant

    def release(self) -> None:
        self._client.release(self._grant.id)
        self.released = True

    def next_allocation_ns(self, now_ns: Optional[int] = None) -> int:
        """The start (time.monotonic_ns()) of the first allocation at or
        after now_ns: an aligned reservation's block, a server's window, a
        slots reservation's first slot after its longest gap."""
        now = time.monotonic_ns() if now_ns is None else now_ns
        return self._client._lib.pace_next_allocation(ctypes.byref(self._grant), now)

    def wait_next_allocation(self) -> int:
        """Sleeps until the next allocation starts; returns that start (ns).
        A signal's handler runs (and may raise) and the wait goes on, as
        time.sleep does."""
        lib = self._client._lib
        start = ctypes.c_uint64()
        while True:
            r = lib.pace_wait_next_allocation(ctypes.byref(self._grant), ctypes.byref(start))
            if r != -_errno.EINTR:
                break
        _check(lib, r, "waiting for the next allocation")
        return start.value

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(self, *exc) -> None:
        if self.released:
            return
        try:
            self.release()
        except NoSuchReservation:
            self.released = True

    def __repr__(self) -> str:
        g = self._grant
        return (f"<pace.Reservation {g.id}: {g.budget_ns / 1e6:.3f} ms every {g.period_ns / 1e6:.3f} ms "
                f"on CPU {g.cpu}, {_KIND_NAMES.get(g.kind, g.kind)}>")


def connect(socket_path: Optional[str] = None) -> Client:
    """A client of the broker at socket_path (None: default_socket())."""
    return Client(socket_path)
