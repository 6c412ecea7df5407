"""Group commit: one thread owns the write connection and commits queued work together.

A commit costs far more than the rows it carries (a WAL frame flush, lock handling, a
checkpoint now and then), so a store that committed each append separately would spend most
of its time committing when a hundred sessions stream at once. Instead every write is a *job*
on a queue; the writer thread takes everything queued, runs it in one ``BEGIN IMMEDIATE``
transaction, each job inside its own SAVEPOINT (a job that fails is rolled back alone), commits,
and only then resolves each caller's future, on the caller's own event loop. Callers never wait
on a lock, and the loop never blocks on SQLite.

``BEGIN IMMEDIATE`` takes SQLite's write lock up front, so writers in other processes (actors
sharing the file) queue on ``busy_timeout`` at the start of a transaction, instead of failing
with "database is locked" when a read transaction tries to become a write one.

A database file deleted (or replaced) while open is still written happily by SQLite: the open
descriptor keeps the unlinked inode alive, every commit succeeds, and nothing a reader opens
later will ever see it. So before each COMMIT the writer checks that the path still names the
file it opened (``FileIdentity``: one ``stat`` per transaction, not per event); if not, the
transaction is rolled back, its callers get a ``StoreError`` saying what happened, and every
later write fails the same way.
"""

from __future__ import annotations

import asyncio
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from orchestrator.core.errors import StoreError, TroupeError

__all__ = ["JOB_SAVEPOINT", "FileIdentity", "GroupCommitWriter", "InlineGroupWriter"]

T = TypeVar("T")

_MAX_GROUP: Final = 4096
"""Most jobs in one transaction: bounds a transaction's size and the latency of its first job."""


@dataclass(frozen=True, slots=True)
class FileIdentity:
    """Which file a path named when the store opened it: its device and inode."""

    path: str
    device: int
    inode: int

    @classmethod
    def of(cls, path: str) -> FileIdentity:
        """The file ``path`` names now."""
        found = os.stat(path)
        return cls(path, found.st_dev, found.st_ino)

    def problem(self) -> str | None:
        """Why a write to the file opened as ``path`` would be lost, or ``None`` while it is still there."""
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return (
                f"the database file {self.path} was deleted (or moved) while the store had it open: "
                "writes would go to a file no reader can open, so none is accepted; restore the file "
                "and restart the process, or start over with a new store"
            )
        except OSError as error:
            return f"the database file {self.path} cannot be checked ({error})"
        if (now.st_dev, now.st_ino) != (self.device, self.inode):
            return (
                f"the database file {self.path} was replaced by another file (inode {now.st_ino}, "
                f"opened as {self.inode}) while the store had it open: writes would go to the old file, "
                "which no reader can open any more, so none is accepted; restart the process to use the new file"
            )
        return None


@dataclass(slots=True)
class _Job:
    work: Callable[[sqlite3.Connection], Any]
    """Runs on the writer thread, inside the group's transaction and the job's savepoint."""
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]


class GroupCommitWriter:
    """The write thread of one store object.

    ``submit`` may be called from any event loop in any thread. Work queued before ``stop`` is
    completed; anything after it fails with ``StoreError``.
    """

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        *,
        name: str,
        describe: str,
        busy_timeout: float = 30.0,
        watch: str | None = None,
    ) -> None:
        """Start the thread; it opens its connection with ``connect`` before taking work.

        Args:
            connect: opens the write connection (and creates the schema); runs on the thread.
            name: the thread's name.
            describe: the store, for error messages (its URL).
            busy_timeout: seconds to wait for another process's write lock before failing.
            watch: the database file: every commit first checks it was not deleted or replaced.
        """
        self._connect = connect
        self._describe = describe
        self.busy_timeout = busy_timeout
        self._watch = watch
        self._identity: FileIdentity | None = None
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._stopping = False
        self._ready = threading.Event()
        self._failure: StoreError | None = None
        self.commits = 0
        """Transactions committed so far (a diagnostic: group commit keeps it far below appends)."""
        # A daemon thread: a store that is never closed must not keep the interpreter alive. A
        # transaction cut off at exit is rolled back, like a crash; nothing acknowledged is lost.
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def idle_connection(self) -> sqlite3.Connection | None:
        """A connection the caller may read on now, without a thread: none (this one is the writer thread's)."""
        return None

    def submit(self, work: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``work`` for the next transaction; the future resolves after its commit."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            # Checked under the lock that stop() takes, so no job can land behind the sentinel.
            if self._stopping:
                raise self.closed_error()
            if self._failure is not None:
                raise StoreError(self._failure.message)
            self._queue.put(_Job(work, loop, future))
        return future

    def wait_ready(self) -> None:
        """Block until the connection is open and the schema exists (for reader threads)."""
        self._ready.wait()
        if self._failure is not None:
            raise StoreError(self._failure.message)

    def stop(self) -> None:
        """Refuse new work and let the thread finish what is queued. Does not wait."""
        with self._lock:
            if not self._stopping:
                self._stopping = True
                self._queue.put(None)

    def join(self) -> None:
        """Wait for the thread to finish (blocking: call it from a worker thread)."""
        self._thread.join()

    def closed_error(self) -> StoreError:
        """The error for use after ``close``."""
        return StoreError(f"the store {self._describe} is closed: open it again with open_store({self._describe!r})")

    def _open(self) -> sqlite3.Connection:
        """Open the write connection and note which file it opened."""
        conn = self._connect()
        if self._watch is not None:
            try:
                self._identity = FileIdentity.of(self._watch)
            except OSError:
                conn.close()
                raise
        return conn

    def _run(self) -> None:
        try:
            conn = self._open()
        except (sqlite3.Error, OSError, StoreError) as error:
            detail = error.message if isinstance(error, StoreError) else str(error)
            self._failure = StoreError(
                f"cannot open the store {self._describe}: {detail}; check that the path is a writable file location"
            )
            self._ready.set()
            self._fail_until_stopped()
            return
        self._ready.set()
        try:
            stopping = False
            while not stopping:
                jobs, stopping = self._take_group()
                try:
                    self._commit_group(conn, jobs)
                except Exception as error:  # never let the thread die: later callers would hang
                    if conn.in_transaction:
                        conn.rollback()
                    self._fail_all(jobs, f"the write failed unexpectedly ({error!r})")
                # A finished job's work refers to its store: holding it while blocked on the queue
                # would keep a dropped store (and so this thread) alive.
                del jobs
        finally:
            conn.close()

    def _take_group(self) -> tuple[list[_Job], bool]:
        """Block for the next job, then take everything else queued; and whether to stop."""
        first = self._queue.get()
        if first is None:
            return [], True
        jobs = [first]
        # Everything that queued while the last transaction ran goes into this one.
        while len(jobs) < _MAX_GROUP:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is None:
                return jobs, True
            jobs.append(job)
        return jobs, False

    def _commit_group(self, conn: sqlite3.Connection, jobs: list[_Job], *, begun: bool = False) -> None:
        """Run ``jobs`` in one transaction (``begun``: the caller has started it) and settle them."""
        if not jobs:
            if begun:
                conn.execute("ROLLBACK")
            return
        try:
            if not begun:
                _begin_immediate(conn, self.busy_timeout)
        except sqlite3.Error as error:
            self._fail_all(jobs, _lock_timeout(error))
            return
        try:
            outcomes = _run_together(conn, jobs)
            if outcomes is None:
                outcomes = _run_apart(conn, jobs)
            lost = self._identity.problem() if self._identity is not None else None
            if lost is not None:  # committing would acknowledge writes nobody will ever read
                conn.execute("ROLLBACK")
                self._failure = StoreError(f"{self._describe}: {lost}")
                _settle([(job, False, StoreError(f"{self._describe}: {lost}; nothing was written")) for job in jobs])
                return
            conn.execute("COMMIT")
        except sqlite3.Error as error:
            # An I/O error, a full disk, or an error that made SQLite roll back on its own: none of
            # the group is durable, so none of it may be acknowledged.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._fail_all(jobs, f"the write transaction failed and was rolled back ({error})")
            return
        self.commits += 1
        _settle([(job, ok, value) for job, (ok, value) in zip(jobs, outcomes, strict=True)])

    def _fail_all(self, jobs: list[_Job], reason: str) -> None:
        _settle([(job, False, StoreError(f"{self._describe}: {reason}; nothing was written")) for job in jobs])

    def _fail_until_stopped(self) -> None:
        assert self._failure is not None
        while (job := self._queue.get()) is not None:
            _settle([(job, False, StoreError(self._failure.message))])


class InlineGroupWriter(GroupCommitWriter):
    """Group commit on the caller's event loop thread, with no writer thread.

    Every job submitted during one turn of the loop is committed together at the start of the
    next turn, in one transaction. The loop blocks for that transaction (a fraction of a
    millisecond for a typical group), which under load is cheaper than handing each group to a
    thread and back: the two threads would otherwise take turns holding the interpreter lock.
    While another process holds the file's write lock the loop does not wait: the group (growing
    meanwhile) is tried again a fraction of a millisecond later. Session hosts use it; the thread
    writer stays the default for everything else.
    """

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        *,
        name: str,
        describe: str,
        busy_timeout: float = 30.0,
        watch: str | None = None,
    ) -> None:
        # No thread: the parent's __init__ (which starts one) is deliberately not called.
        self._connect = connect
        self._describe = describe
        self.busy_timeout = busy_timeout
        self._watch = watch
        self._identity: FileIdentity | None = None
        self._lock = threading.Lock()
        self._stopping = False
        self._failure: StoreError | None = None
        self._conn: sqlite3.Connection | None = None
        self._pending: list[_Job] = []
        self._scheduled = False
        self.commits = 0
        self._busy_since: float | None = None
        self._retry = 0.0

    def _connection(self) -> sqlite3.Connection:
        with self._lock:
            if self._conn is None:
                try:
                    self._conn = self._open()
                except (sqlite3.Error, OSError, StoreError) as error:
                    detail = error.message if isinstance(error, StoreError) else str(error)
                    self._failure = StoreError(
                        f"cannot open the store {self._describe}: {detail}; "
                        "check that the path is a writable file location"
                    )
                    raise self._failure from None
            return self._conn

    def submit(self, work: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue ``work`` for the commit at the start of the loop's next turn."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if self._stopping:
            raise self.closed_error()
        if self._failure is not None:
            raise StoreError(self._failure.message)
        self._pending.append(_Job(work, loop, future))
        if not self._scheduled:
            self._scheduled = True
            # Everything the sessions append during this turn of the loop goes in one transaction.
            loop.call_soon(self._run_pending)
        return future

    def _run_pending(self, *, wait: bool = False) -> None:
        """Commit what is pending; ``wait``: block for the write lock (when stopping)."""
        self._scheduled = False
        if not self._pending:
            return
        try:
            conn = self._connection()
        except StoreError as error:
            jobs, self._pending = self._pending, []
            self._fail_all(jobs, error.message)
            return
        if not wait and not self._begin(conn):
            return
        jobs, self._pending = self._pending, []
        try:
            self._commit_group(conn, jobs, begun=not wait)
        except Exception as error:  # never leave a caller waiting
            if conn.in_transaction:
                conn.rollback()
            self._fail_all(jobs, f"the write failed unexpectedly ({error!r})")

    def _begin(self, conn: sqlite3.Connection) -> bool:
        """Take the write lock, or, while another process holds it, try again soon.

        Waiting here would block the loop, and with it every session of this host, for as long
        as the other process writes; instead the loop goes on and the group (growing meanwhile)
        is retried a fraction of a millisecond later. ``busy_timeout`` still bounds the wait.
        """
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            if not _lock_busy(error):
                jobs, self._pending = self._pending, []
                self._fail_all(jobs, f"could not start a write transaction ({error})")
                return False
            now = time.monotonic()
            if self._busy_since is None:
                self._busy_since = now
            elif now - self._busy_since > self.busy_timeout:
                self._busy_since = None
                jobs, self._pending = self._pending, []
                self._fail_all(jobs, _lock_timeout(error))
                return False
            self._retry = _next_retry(self._retry)
            self._scheduled = True
            asyncio.get_running_loop().call_later(self._retry, self._run_pending)
            return False
        self._busy_since = None
        self._retry = 0.0
        return True

    def wait_ready(self) -> None:
        """Open the connection (and the schema) if it is not open yet; readers call this first."""
        self._connection()

    def idle_connection(self) -> sqlite3.Connection | None:
        """The writer's connection, to read on the loop, when it is open and between transactions.

        It sees what is committed, as a reader thread's would; a read on it blocks the loop, so
        it is for lookups that are known to be small.
        """
        conn = self._conn
        return conn if conn is not None and not conn.in_transaction else None

    def stop(self) -> None:
        """Commit what is queued, then refuse new work."""
        with self._lock:
            self._stopping = True
        self._run_pending(wait=True)

    def join(self) -> None:
        """Close the connection."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


JOB_SAVEPOINT: Final = "job"
"""The savepoint each job of a group runs in: a job that raises is rolled back to it, alone."""
GROUP_SAVEPOINT: Final = "jobs"
"""The savepoint around a group's jobs run together (``_run_together``)."""


def _run_together(conn: sqlite3.Connection, jobs: list[_Job]) -> list[tuple[bool, Any]] | None:
    """Run every job in one savepoint; ``None`` when one raised (the group's work is undone then).

    The common case: no job fails, and two statements cover the group instead of two per job.
    A job that fails, or needs its own savepoint (``ROLLBACK TO job``: a replay), raises here,
    and the group is run again apart (``_run_apart``), each job in its own savepoint.
    """
    conn.execute(f"SAVEPOINT {GROUP_SAVEPOINT}")
    outcomes: list[tuple[bool, Any]] = []
    try:
        for job in jobs:
            outcomes.append((True, job.work(conn)))
    except Exception:
        conn.execute(f"ROLLBACK TO {GROUP_SAVEPOINT}")
        conn.execute(f"RELEASE {GROUP_SAVEPOINT}")
        return None
    conn.execute(f"RELEASE {GROUP_SAVEPOINT}")
    return outcomes


def _run_apart(conn: sqlite3.Connection, jobs: list[_Job]) -> list[tuple[bool, Any]]:
    """Run each job in its own savepoint: one that fails leaves no trace and fails only itself."""
    outcomes: list[tuple[bool, Any]] = []
    for job in jobs:
        conn.execute(f"SAVEPOINT {JOB_SAVEPOINT}")
        try:
            value = job.work(conn)
        except (TroupeError, sqlite3.Error) as error:
            conn.execute(f"ROLLBACK TO {JOB_SAVEPOINT}")
            conn.execute(f"RELEASE {JOB_SAVEPOINT}")
            outcomes.append((False, _as_store_error(error)))
        except Exception as error:  # a bug in the work itself: report it, keep writing
            conn.execute(f"ROLLBACK TO {JOB_SAVEPOINT}")
            conn.execute(f"RELEASE {JOB_SAVEPOINT}")
            outcomes.append((False, error))
        else:
            conn.execute(f"RELEASE {JOB_SAVEPOINT}")
            outcomes.append((True, value))
    return outcomes


_FIRST_RETRY: Final = 0.0001
_LAST_RETRY: Final = 0.002


def _lock_busy(error: sqlite3.OperationalError) -> bool:
    """Whether ``error`` means another connection holds the write lock (retry, do not fail)."""
    return error.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _next_retry(delay: float) -> float:
    """The wait before the next attempt to take the write lock (``0``: the first attempt failed)."""
    return min(delay * 1.5, _LAST_RETRY) if delay else _FIRST_RETRY


def _lock_timeout(error: sqlite3.Error) -> str:
    return (
        f"could not start a write transaction ({error}); another process may hold the "
        "write lock for longer than busy_timeout"
    )


def _begin_immediate(conn: sqlite3.Connection, busy_timeout: float) -> None:
    """Take the write lock, retrying every fraction of a millisecond while another process holds it.

    SQLite's own busy handler sleeps in growing steps (1, 2, 5, 10, 15, 20, 25 ms...), so with
    several host processes writing one file a commit could wait tens of milliseconds for a lock
    that was free again after a fraction of one. Retrying here (the connection's own busy timeout
    is zero) keeps the handoff fast; ``busy_timeout`` still bounds the wait.
    """
    deadline = time.monotonic() + busy_timeout
    delay = _next_retry(0.0)
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as error:
            if not _lock_busy(error) or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = _next_retry(delay)


def _as_store_error(error: TroupeError | sqlite3.Error) -> TroupeError:
    if isinstance(error, TroupeError):
        return error
    return StoreError(f"SQLite refused the write: {error}")


def _settle(outcomes: list[tuple[_Job, bool, Any]]) -> None:
    """Resolve the jobs' futures on their own loops (futures are not thread-safe).

    One hand-off per loop for the whole group, not one per job: each ``call_soon_threadsafe``
    wakes the loop through its self-pipe, and on the loop's own thread no hand-off is needed.
    """
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Job, bool, Any]]] = {}
    for outcome in outcomes:
        by_loop.setdefault(outcome[0].loop, []).append(outcome)
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for loop, group in by_loop.items():
        if loop is running:
            _resolve(group)
            continue
        try:
            loop.call_soon_threadsafe(_resolve, group)
        except RuntimeError:  # that loop is closed: nobody is waiting for the answer
            pass


def _resolve(outcomes: list[tuple[_Job, bool, Any]]) -> None:
    for job, ok, value in outcomes:
        if job.future.done():  # the caller was cancelled; the write stands regardless
            continue
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)
