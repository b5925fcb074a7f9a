"""One engine, one worker thread: requests wait in a bounded FIFO and run one at a time.

The engine is not thread-safe (static decode buffers, one KV cache per batch shape), so every call
into it happens on this thread under `lock`. Engine events travel back to the request's asyncio task
through its own asyncio.Queue. Cancellation is cooperative: the worker checks the job's flag before
passing on each engine event (every block, or every denoising step for step streams) and then closes
the engine's generator, which frees the engine for the next job. A job whose last event was passed
on counts as completed, whatever its request does afterwards.
"""
from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from orl.engine import DecodeConfig, DoneEvent, Engine, Event


class QueueFull(Exception):
    pass


@dataclass(frozen=True)
class ErrorEvent:
    """The engine raised: passed to the waiting request in place of further engine events."""
    error: Exception


@dataclass
class Job:
    prompt_ids: list[int]
    cfg: DecodeConfig
    steps: bool                          # emit one event per denoising step (web page)
    loop: asyncio.AbstractEventLoop
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    started_at: float | None = None      # perf_counter when the worker picked it up

    def emit(self, event: Event | ErrorEvent) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the request's event loop is closed (server shutting down): nobody listens
            self.cancelled.set()


@dataclass
class Stats:
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    rejected: int = 0      # the engine refused the request (a ValueError: a 400, e.g. over the KV cache budget)
    runs: int = 0          # jobs the engine ran (a job cancelled while waiting did not run)
    engine_s: float = 0.0  # their wall time

    def mean_job_s(self) -> float:
        return self.engine_s / self.runs if self.runs else 0.0


class EngineWorker:
    def __init__(self, engine: Engine, queue_size: int):
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size}")
        self.engine = engine
        self.queue_size = queue_size
        self.lock = threading.Lock()  # held while the engine runs; take it for any other engine call
        self.stats = Stats()
        self.running: Job | None = None
        self._waiting: deque[Job] = deque()
        self._cv = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._loop, name="dlmrt-worker", daemon=True)

    @property
    def queued(self) -> int:
        return len(self._waiting)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cv:
            self._stopping = True
            for job in [*self._waiting, self.running]:
                if job is not None:
                    job.cancelled.set()
            self._cv.notify_all()
        self._thread.join(timeout=30)

    def submit(self, job: Job) -> None:
        with self._cv:
            if len(self._waiting) >= self.queue_size:
                raise QueueFull(f"the request queue is full ({self.queue_size} waiting); retry later")
            self._waiting.append(job)
            self._cv.notify()

    def cancel(self, job: Job) -> None:
        """Idempotent; a finished job is unaffected, a waiting one leaves the queue at once."""
        with self._cv:
            job.cancelled.set()
            if job in self._waiting:
                self._waiting.remove(job)
                self.stats.cancelled += 1

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._waiting and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    return
                job = self.running = self._waiting.popleft()
            try:
                with self.lock:
                    self._run(job)
            finally:
                self.running = None

    def _run(self, job: Job) -> None:
        job.started_at = time.perf_counter()
        events = self.engine.run([job.prompt_ids], job.cfg, trace=job.steps, step_events=job.steps)
        outcome, counted = "completed", False
        try:
            for event in events:
                # checked before passing the event on, not after: the request cancels its job once it has
                # the last event, and that job completed
                if job.cancelled.is_set():
                    outcome = "cancelled"
                    break
                if isinstance(event, DoneEvent):  # counted (and the worker idle) before the client can see it:
                    self._count(job, outcome)  # a /health polled right after the answer is current
                    counted = True
                job.emit(event)  # stamped with engine time (event.at), whatever the client's pace
        except Exception as e:  # reported to the waiting request; the worker lives on
            outcome = "rejected" if isinstance(e, ValueError) else "failed"  # as streams.engine_error answers
            if not counted:
                self._count(job, outcome)
                counted = True
            job.emit(ErrorEvent(e))
        finally:
            events.close()
            if not counted:
                self._count(job, outcome)

    def _count(self, job: Job, outcome: str) -> None:
        with self._cv:  # cancel() counts from the event loop's thread
            setattr(self.stats, outcome, getattr(self.stats, outcome) + 1)
            self.stats.runs += 1
            self.stats.engine_s += time.perf_counter() - job.started_at
            self.running = None
