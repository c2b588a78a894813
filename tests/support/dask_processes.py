"""A real Dask cluster for the tests: `dask scheduler` and `dask worker` processes started on 127.0.0.1.

The workers run this checkout's code (PYTHONPATH: its `src` and its root, so a plugin defined here loads
there) with the environment the test gives them (the S3 tests' endpoint and keys: the workers' own
credentials, as a real cluster's). Starting waits on conditions (the scheduler's file, the workers
registered), never a fixed sleep; the processes are stopped, each by its own id, when the cluster closes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

ROOT = Path(__file__).resolve().parents[2]
START_LIMIT = 180.0  # seconds a start may take on a loaded machine before the test fails (a hang guard)


class DaskProcesses:
    """A scheduler and `workers` worker processes (each with its nanny and one thread); `address` is the
    scheduler's tcp://127.0.0.1:PORT, `client()` a connected `distributed.Client`."""

    def __init__(self, folder: Path, workers: int = 2, env: Mapping[str, str] | None = None) -> None:
        self.folder = folder
        self.env = {**os.environ, **(env or {}),
                    "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)]),
                    "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
        if sys.version_info < (3, 11, 9):
            # CPython gh-106883: before 3.11.9, a collection inside sys._current_frames() (Dask's profiler
            # samples every worker's threads with it) can deadlock against a thread that exits, and a
            # worker hangs for good (seen here: a task's deadline thread exiting). Not sampled here.
            self.env["DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED"] = "False"
        self.processes: list[subprocess.Popen[bytes]] = []
        scheduler_file = folder / "scheduler.json"
        self.processes.append(self._start(["scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                           "--scheduler-file", str(scheduler_file)], "scheduler"))
        self.address = self._wait_for_address(scheduler_file)
        for i in range(workers):
            self.processes.append(self._start(
                ["worker", self.address, "--host", "127.0.0.1", "--nthreads", "1", "--nworkers", "1",
                 "--no-dashboard", "--memory-limit", "0", "--name", f"w{i}",
                 "--local-directory", str(folder / f"w{i}")], f"worker{i}"))
        self._client: Any = None
        self.client().wait_for_workers(workers, timeout=START_LIMIT)

    def _start(self, args: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.folder / f"{log}.log", "wb") as out:  # the child writes to its own copy
            return subprocess.Popen([sys.executable, "-m", "dask", *args], stdout=out, stderr=subprocess.STDOUT,
                                    env=self.env, cwd=self.folder, start_new_session=True)

    def _wait_for_address(self, scheduler_file: Path) -> str:
        deadline = time.monotonic() + START_LIMIT
        while time.monotonic() < deadline:
            if self.processes[0].poll() is not None:
                raise RuntimeError("the dask scheduler exited: " + (self.folder / "scheduler.log").read_text())
            try:
                return str(json.loads(scheduler_file.read_text())["address"])
            except (OSError, ValueError, KeyError):
                time.sleep(0.1)  # the file is not written yet: look again (a condition, not a timing)
        raise RuntimeError("the dask scheduler wrote no address")

    def client(self) -> Any:
        """A client of the scheduler (one, kept while the cluster runs)."""
        if self._client is None:
            from distributed import Client

            self._client = Client(self.address, timeout=START_LIMIT)
        return self._client

    def logs(self) -> str:
        """Everything the processes wrote (for a failing test's message)."""
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.folder.glob("*.log")))

    def close(self) -> None:
        """Stop the client, then each process this cluster started (SIGTERM to its own group)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        for proc in reversed(self.processes):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(60)


class KillFirstTask(WorkerPlugin):
    """A worker plugin: the first task any worker starts kills that worker's process, once in the whole
    cluster (a file created exclusively decides which), as a machine lost mid-run would."""

    name = "ckptview-kill-first-task"

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def transition(self, key: Any, start: str, finish: str, **kwargs: Any) -> None:
        if finish != "executing":
            return
        try:
            fd = os.open(self.flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, str(key).encode())
        os.close(fd)
        os._exit(1)
