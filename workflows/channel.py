"""A pipe from the task processes of a Luigi run to the process that runs its worker.

With `--workers N` Luigi forks a process per task. What a task has to tell the whole run (how far
its stage has got, for the run's progress line; an error line, printed once at the run's end) must
reach the worker's process, and Luigi carries nothing there: a task's `set_status_message` goes
straight to the scheduler, which for `--local-scheduler` is a copy in the task's own process.

`open_channel()` makes the pipe in the worker's process before any task process is forked, so every
one inherits its write end. A message is one JSON object on one line, written by one `write` of at
most PIPE_BUF bytes: such a write is atomic, so messages of several processes never interleave. The
write end does not block: a progress message that finds the pipe full is dropped (the next one
says more), and an error line waits a little for the reader. The worker's process reads them with
`receive()`; a task that runs in that process (`--workers 1`) writes to the same pipe.
"""

from __future__ import annotations

import json
import os
import select
import time

# How long an error line waits for room in a full pipe before its sender prints it itself.
SEND_SECONDS = 5.0


class Channel:
    def __init__(self):
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)
        self.owner = os.getpid()  # the worker's process
        self._partial = b""

    def send(self, message: dict, *, must_arrive: bool = False) -> bool:
        """Write one message; False when it was dropped (too long, the pipe full or closed)."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8")
        if len(data) > select.PIPE_BUF:
            return False
        deadline = time.monotonic() + (SEND_SECONDS if must_arrive else 0.0)
        while True:
            try:
                os.write(self.write_fd, data)
                return True
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.01)
            except OSError:  # closed: the worker's process has ended the run
                return False

    def wait(self, timeout: float) -> None:
        """Until a message can be read, at most `timeout` seconds."""
        select.select([self.read_fd], [], [], timeout)

    def receive(self) -> list[dict]:
        """Every whole message written so far (in the worker's process)."""
        chunks = [self._partial]
        while True:
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        *lines, self._partial = b"".join(chunks).split(b"\n")
        return [json.loads(line) for line in lines if line]

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            try:
                os.close(fd)
            except OSError:
                pass


current: Channel | None = None


def open_channel() -> Channel:
    global current
    current = Channel()
    return current


def close_channel() -> None:
    global current
    if current is not None and current.owner == os.getpid():
        current.close()
        current = None


def send(message: dict, *, must_arrive: bool = False) -> bool:
    """`message` to the run's worker process, from any process of the run; False outside a run."""
    return current is not None and current.send(message, must_arrive=must_arrive)
