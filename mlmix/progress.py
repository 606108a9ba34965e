"""Progress of long computations: what is being done, what it will cost, and how far it is.

One helper for every long step of mlmix (analysis phases of ``Chain.summary``, distance curves,
mean first passage times, ``mlmix verify``, the MLM tabulation with its measured-rate cost line,
the matrix-free Krylov solvers):

* before the work, one line with the cost estimate: states, memory, and the expected time from
  the measured speed of this machine (:func:`flop_rate`, a timed dense product);
* then, on a terminal or in a notebook, a ``tqdm.auto`` bar with ETA; elsewhere (a pipe, a log
  file) no bar but exactly one line per phase, when it starts, so that a log says what is running.

Steps expected to take less than :func:`threshold` seconds (default 2; environment variable
``MLMIX_PROGRESS_THRESHOLD``) show nothing, so small problems stay quiet, unless a :class:`Progress`
is still running when that time (at least 2 s, :func:`late_after`) has passed (an estimate short of
the truth: an iterative solver's number of steps is not known before): then it says so, and names
its phases from there on. Output
goes to standard error only, never to standard output (:func:`write_stderr`: nothing with standard
error closed; a failing standard error is dropped, never fatal); ``progress=False`` in
Python and ``--no-progress`` on the command line turn everything off.

A single expensive method or property read on its own (``chain.spectral_gap``) is announced the same
way by the :func:`announced` decorator; inside a computation that is already announced (a
:class:`Progress` in a ``with`` block, e.g. ``Chain.summary``) it stays quiet.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import os
import sys
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Sequence, TypeVar

import numpy as np
from tqdm.auto import tqdm

#: Seconds below which a step is not announced (override: MLMIX_PROGRESS_THRESHOLD).
DEFAULT_THRESHOLD = 2.0
THRESHOLD_ENV = "MLMIX_PROGRESS_THRESHOLD"


def threshold() -> float:
    """Expected seconds from which a step is announced."""
    try:
        return float(os.environ.get(THRESHOLD_ENV, DEFAULT_THRESHOLD))
    except ValueError:
        return DEFAULT_THRESHOLD


def late_after() -> float:
    """Seconds after which a :class:`Progress` expected to be shorter than :func:`threshold` says it is
    still running: the threshold, but never less than :data:`DEFAULT_THRESHOLD` (a tiny threshold asks
    for the lines of every estimate above it, not for a line about every short computation)."""
    return max(threshold(), DEFAULT_THRESHOLD)


#: Operations below which no measurement is made: any machine does them in well under a second.
_SMALL = 1e8


#: Seconds over which :func:`flop_rate` times its products: long enough that other processes on a
#: loaded machine take their share of the cores during the measurement, as they will during the work.
RATE_WINDOW = 0.2


@functools.lru_cache(maxsize=1)
def flop_rate() -> float:
    """Floating-point operations per second of a dense float64 product on this machine, measured once
    per process: 2 * 512^3 over the median time of the 512 x 512 products of :func:`product_times`.

    The median, not the best: on a loaded machine the best of two short products caught the cores
    idle and announced a check at 10 s that took 62 s; the median over a fifth of a second sees
    the load the computation will share (calibration in docs/benchmarks.md, "Cost lines")."""
    return 2 * 512**3 / max(float(np.median(product_times())), 1e-9)


def product_times(window: float = RATE_WINDOW, most: int = 25) -> list[float]:
    """Seconds of each of at least 3 and at most ``most`` 512 x 512 float64 products, repeated for
    ``window`` seconds, after one untimed warm-up product (thread start-up)."""
    A = np.random.default_rng(0).random((512, 512))
    A @ A
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < most and (len(times) < 3 or time.perf_counter() - start < window):
        t0 = time.perf_counter()
        A @ A
        times.append(time.perf_counter() - t0)
    return times


def seconds_for(operations: float) -> float:
    """Expected seconds of ``operations`` floating-point operations at :func:`flop_rate` (small
    counts are not measured: they are announced by nobody)."""
    return operations / (1e9 if operations < _SMALL else flop_rate())


def product_seconds(P: Any) -> float:
    """Measured seconds of one product ``P @ v`` of a (sparse) matrix with a vector, best of three (one
    when the first takes over 0.05 s): a sparse product is bound by memory traffic, not by the dense
    flop rate of :func:`flop_rate` (10 to 15 times slower per operation on a 245,760-non-zero chain)."""
    v = np.ones(P.shape[1])
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        P @ v
        best = min(best, time.perf_counter() - start)
        if best > 0.05:
            break
    return best


#: Expected seconds of the first import of torch (the Krylov engine's arithmetic), about what it takes
#: on a loaded two-core machine; nothing once torch is imported.
TORCH_START = 2.0


def torch_start_seconds() -> float:
    """:data:`TORCH_START` while torch is not yet imported in this process, else 0."""
    return 0.0 if "torch" in sys.modules else TORCH_START


#: Expected seconds of the first import of transformers with its masked-LM classes (it follows torch's):
#: about what it takes on a quiet two-core machine (its model classes are imported on first use);
#: nothing once transformers is imported.
TRANSFORMERS_START = 4.0


def model_stack_seconds() -> float:
    """Expected seconds of importing what a masked LM needs and is not imported yet: torch
    (:func:`torch_start_seconds`) and transformers (:data:`TRANSFORMERS_START`)."""
    return torch_start_seconds() + (0.0 if "transformers" in sys.modules else TRANSFORMERS_START)


@contextlib.contextmanager
def if_late(text: str, *, enabled: bool = True) -> Iterator[None]:
    """Say ``mlmix: text (still running after N s) ...`` if the block, a step of unknown but usually
    short duration (a command's start-up), is still running after :func:`late_after` seconds; nothing
    otherwise, nor when not ``enabled``, nor inside :func:`no_announcements` or an announced
    computation (a :class:`Progress` or :func:`steps`, which already says what runs)."""
    if not enabled or _SILENT.get() or _RUNNING.get():
        yield
        return
    timer = threading.Timer(late_after(), lambda: say(f"{text} (still running after {format_seconds(late_after())}) ..."))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


#: Whether :func:`announce` is off for the whole command (``--no-progress``, :func:`no_announcements`).
_SILENT: contextvars.ContextVar[bool] = contextvars.ContextVar("mlmix_progress_silent", default=False)


@contextlib.contextmanager
def no_announcements(silent: bool = True) -> Iterator[None]:
    """Within the block, :func:`announce` says nothing when ``silent`` (``--no-progress`` reaches the
    steps that no option is passed to, such as loading a model inside a command)."""
    token = _SILENT.set(_SILENT.get() or bool(silent))
    try:
        yield
    finally:
        _SILENT.reset(token)


def announce(text: str, expected: float, *, enabled: bool = True) -> bool:
    """The cost line ``mlmix: text (about N s) ...`` of one step with no phases (an import, loading a
    model) before it runs, when it is ``enabled`` (and not inside :func:`no_announcements`) and
    ``expected`` seconds reach :func:`threshold`; whether it said so."""
    if not enabled or _SILENT.get() or expected < threshold():
        return False
    say(f"{text} (about {format_seconds(expected)}) ...")
    return True


def dense_seconds(n_states: int, cubes: float) -> float:
    """Expected seconds of a dense step costing ``cubes`` x N^3 floating-point operations."""
    return seconds_for(cubes * float(n_states) ** 3)


def format_seconds(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s" if seconds >= 1 else "< 1 s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _interactive(stream: Any) -> bool:
    """A terminal, or a notebook (tqdm.auto draws a widget there); never a closed or failed stream."""
    if stream is None or _STDERR_FAILED:
        return False
    return bool(getattr(stream, "isatty", lambda: False)()) or "ipykernel" in sys.modules


def say(text: str) -> None:
    """One line ``mlmix: text`` on standard error (:func:`write_stderr`)."""
    write_stderr(f"mlmix: {text}")


#: Whether a write to standard error failed (a full device, a closed pipe): later lines are dropped.
_STDERR_FAILED = False


def write_stderr(line: str) -> None:
    """Write ``line`` to standard error, never elsewhere: with standard error closed (``2>&-``, when
    ``sys.stderr`` is None and ``print`` would fall back to standard output, corrupting a JSON
    report) nothing is written; a failing write (``2>/dev/full``) is dropped with what it buffered,
    once, and every later line too, so that progress never costs the result."""
    global _STDERR_FAILED
    stream = sys.stderr
    if stream is None or _STDERR_FAILED:
        return
    try:
        stream.write(line + "\n")
        stream.flush()
    except OSError:
        _STDERR_FAILED = True
        _discard(stream)


def _discard(stream: Any) -> None:
    """Point a failing standard error at the null device, so that neither the lines it still buffers
    nor the interpreter's final flush fail again (best effort: a stream without a file descriptor is
    left as it is)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)
        stream.flush()
    except (OSError, ValueError, AttributeError):
        pass


#: Whether an announced computation (a Progress or steps) is running: the steps nested in it stay quiet.
_RUNNING: contextvars.ContextVar[bool] = contextvars.ContextVar("mlmix_progress_running", default=False)


class Progress:
    """The phases of one computation, announced and tracked (module docstring).

    ``phases``: (name, expected seconds) in the order they run; ``cost``: the estimate printed first
    (e.g. "4,096 states, 384 MiB"). Use ``with progress.phase(name): ...`` around each phase and
    :meth:`close` (or the object as a context manager) at the end. The bar's unit is an expected
    second, so its ETA is the remaining estimate scaled by the speed observed so far.
    """

    def __init__(self, title: str, phases: Sequence[tuple[str, float]], *, cost: str = "",
                 enabled: bool = True) -> None:
        self.title, self.expected, self.cost = title, dict(phases), cost
        total = sum(self.expected.values())
        self.shown = bool(enabled) and total >= threshold()
        self.bar = None
        self.current: str | None = None
        self._late: threading.Timer | None = None
        self._lock = threading.Lock()
        self._token: contextvars.Token | None = None
        self._done_expected = self._done_seconds = 0.0
        if not self.shown:
            if enabled:  # the estimate may be short of the truth (an iterative solver's count of steps)
                self._late = threading.Timer(late_after(), self._announce_late)
                self._late.daemon = True
                self._late.start()
            return
        say(f"{title}: {cost + ', ' if cost else ''}about {format_seconds(total)} expected "
             f"({', '.join(f'{n} {format_seconds(s)}' for n, s in phases)}; at {flop_rate() / 1e9:.1f} GFLOP/s "
             "measured here)")
        if _interactive(sys.stderr):

            self.bar = tqdm(total=total, desc=title, file=sys.stderr, leave=False,
                            bar_format="{l_bar}{bar}| [{elapsed}<{remaining}]")

    def _announce_late(self) -> None:
        """A computation expected below :func:`threshold` is still running after :func:`late_after`
        seconds: the cost line and the phase running now, then one line per later phase (plain lines,
        also on a terminal)."""
        with self._lock:
            if self.shown or self._late is None:
                return
            self.shown = True
            total = sum(self.expected.values())
            say(f"{self.title}: {self.cost + ', ' if self.cost else ''}still running after "
                f"{format_seconds(late_after())} (about {format_seconds(total)} expected)")
            if self.current is not None:
                say(f"{self.title}: {self.current} {self._expected_line(self.current)}")

    def pace(self) -> float | None:
        """Measured seconds per expected second so far, shrunk towards 1 until a good share of the work
        is done: (s + w) / (e + w) over the finished phases (s measured seconds, e expected), with w a
        quarter of the whole estimate, so that one mis-estimated short phase does not swing the ETA of
        the rest (a stationary law expected at 17 s and done in 0.1 s leaves the pace at 0.9, not 0).
        None before a phase worth a tenth of a second has finished."""
        if self._done_expected < 0.1:
            return None
        w = 0.25 * sum(self.expected.values())
        return (self._done_seconds + w) / (self._done_expected + w)

    def _expected_line(self, name: str) -> str:
        """'(expected 40 s)' before the first phase ends; afterwards the expectation of this phase and
        of the rest scaled by :meth:`pace`, so that the ETA follows the measured progress."""
        expected = self.expected.get(name, 0.0)
        pace = self.pace()
        if pace is None:
            return f"(expected {format_seconds(expected)})"
        names = list(self.expected)
        rest = sum(self.expected[n] for n in names[names.index(name):]) if name in self.expected else expected
        return (f"(expected {format_seconds(pace * expected)} at the pace so far, {pace:.1f}x the estimate; "
                f"ETA {format_seconds(pace * rest)})")

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        with self._lock:
            self.current = name
            if self.shown and self.bar is None:
                say(f"{self.title}: {name} {self._expected_line(name)}")
        if self.bar is not None:
            self.bar.set_description_str(f"{self.title}: {name}")
        start = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self._done_seconds += time.perf_counter() - start
                self._done_expected += self.expected.get(name, 0.0)
            if self.bar is not None:
                self.bar.update(self.expected.get(name, 0.0))

    def close(self) -> None:
        with self._lock:
            if self._late is not None:
                self._late.cancel()
                self._late = None
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Progress":
        self._token = _RUNNING.set(True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _RUNNING.reset(self._token)
            self._token = None
        self.close()


class Counter:
    """A count of ``total`` units of work (``update(k)`` after each k), e.g. the forward passes of a
    tabulation whose cost line the caller printed: on a terminal or in a notebook a ``tqdm.auto`` bar
    with ETA; elsewhere a line at each further tenth done, with the elapsed time and the ETA
    extrapolated from the rate so far; nothing when not ``enabled``. A context manager.

    ``quiet_below`` (seconds; for work whose cost was not announced because its rate was not known):
    the bar appears only after that long, and a line only once the whole count, extrapolated from
    the rate so far, is expected to take that long."""

    def __init__(self, title: str, total: int, *, unit: str = "", enabled: bool = True,
                 quiet_below: float = 0.0) -> None:
        self.title, self.total, self.unit, self.enabled = title, int(total), unit, bool(enabled)
        self.quiet_below = float(quiet_below)
        self.done, self.next_tenth, self.t0 = 0, 1, time.perf_counter()
        self.bar = None
        if self.enabled and _interactive(sys.stderr):

            self.bar = tqdm(total=self.total, desc=title, unit=f" {unit}" if unit else "it", file=sys.stderr,
                            smoothing=0.05, delay=self.quiet_below)

    def update(self, k: int) -> None:
        self.done += int(k)
        if self.bar is not None:
            self.bar.update(k)
            return
        if not self.enabled or self.total <= 0 or self.done * 10 < self.next_tenth * self.total:
            return
        self.next_tenth = self.done * 10 // self.total + 1
        elapsed = time.perf_counter() - self.t0
        left = elapsed * (self.total - self.done) / self.done
        if elapsed + left < self.quiet_below:
            return
        say(f"{self.title}: {self.done:,}/{self.total:,} {self.unit} ({100 * self.done / self.total:.0f}%), "
            f"{format_seconds(elapsed)} elapsed, ETA {format_seconds(left)}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> "Counter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Convergence:
    """Progress of an iterative solver, as its callback ``(matvecs, residual, target)``: a line every
    ``every`` seconds with the operator applications, the residual against its target and an ETA
    extrapolated from the residual's geometric decrease since the first call (the iterations needed
    are not known before, so there is no bar); nothing when not ``enabled``."""

    def __init__(self, what: str, enabled: bool, every: float = 5.0) -> None:
        self.what, self.enabled, self.every = what, enabled, every
        self.t0 = self.last = time.perf_counter()
        self.first: tuple[int, float] | None = None

    def __call__(self, matvecs: int, residual: float, target: float) -> None:
        now = time.perf_counter()
        if self.first is None and residual > 0:
            self.first = (matvecs, residual)
        if not self.enabled or now - self.last < self.every:
            return
        self.last = now
        eta = "?"
        if self.first and residual > 0 and matvecs > self.first[0] and residual < self.first[1]:
            rate = math.log(self.first[1] / residual) / (matvecs - self.first[0])
            left = max(math.log(residual / target), 0.0) / rate if target > 0 else 0.0
            eta = format_seconds(left * (now - self.t0) / matvecs)
        say(f"{self.what}: {matvecs} operator applications, {format_seconds(now - self.t0)}: residual "
            f"{residual:.2e} (target {target:.1e}), ETA {eta}")


#: One step of a plan for :func:`announced`: (phase name, expected seconds, what computes it; None for
#: the decorated call itself, which is the last step).
Step = tuple[str, float, "Callable[[], object] | None"]
F = TypeVar("F", bound=Callable[..., Any])


def announced(phase: str) -> Callable[[F], F]:
    """Decorator for an expensive method of an object that has ``progress`` (bool: announce at all) and
    ``_progress_plan(phase, name) -> (title, cost, steps)`` (``name``: the method's), ``steps`` the :data:`Step` list of the phases
    still to run, the decorated call last. Called on its own, the method gets a :class:`Progress`
    over those phases (cost line, then a bar or one line per phase; quiet below :func:`threshold`),
    the earlier steps computed first, each in its phase; called inside an announced computation, it
    just runs."""
    def decorate(method: F) -> F:
        @functools.wraps(method)
        def run(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if _RUNNING.get():
                return method(obj, *args, **kwargs)
            title, cost, plan = obj._progress_plan(phase, method.__name__)
            with Progress(title, [(name, seconds) for name, seconds, _ in plan], cost=cost,
                          enabled=obj.progress) as bar:
                try:
                    for name, _, compute in plan[:-1]:
                        with bar.phase(name):
                            compute()
                except Exception:  # noqa: BLE001 - not cached: the call below meets it again if it needs that step
                    pass
                with bar.phase(plan[-1][0]):
                    return method(obj, *args, **kwargs)
        return run  # type: ignore[return-value]
    return decorate


def steps(items: Iterable[Any], title: str, *, total: int, expected: float, cost: str = "", enabled: bool = True,
          name: Any = None) -> Iterator[Any]:
    """Iterate over ``items`` (``total`` of them, ``expected`` seconds in all) with the cost line and a
    bar with ETA on a terminal; elsewhere one line per item when ``name`` (item -> its label) is
    given, else the cost line only. Announced computations in the loop body stay quiet."""
    token = _RUNNING.set(True)
    try:
        yield from _steps(items, title, total, expected, cost, enabled, name)
    finally:
        _RUNNING.reset(token)


def _steps(items: Iterable[Any], title: str, total: int, expected: float, cost: str, enabled: bool,
           name: Any) -> Iterator[Any]:
    if not enabled or expected < threshold():
        yield from items
        return
    say(f"{title}: {cost + ', ' if cost else ''}{total:,} steps, about {format_seconds(expected)} expected")
    if _interactive(sys.stderr):

        with tqdm(items, total=total, desc=title, file=sys.stderr, leave=False) as bar:
            for item in bar:
                if name is not None:
                    bar.set_postfix_str(str(name(item)))
                yield item
        return
    for i, item in enumerate(items):
        if name is not None:
            say(f"{title} [{i + 1}/{total}]: {name(item)}")
        yield item
