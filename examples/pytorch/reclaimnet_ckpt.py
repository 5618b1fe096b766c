"""Tiny helper for the ReclaimNet job contract (see the README, "Jobs").

Usage::

    ck = Checkpointer()                 # installs the checkpoint signal handler
    if ck.restore_dir: load state from ck.restore_dir
    ck.ready()                          # state restored, handler installed
    while training:
        one_step()
        if ck.requested:                # at a step boundary, never in the handler
            ck.save(lambda d: torch.save(state, os.path.join(d, "state.pt")))

The signal handler only sets a flag: writing a checkpoint from inside a
signal handler would interrupt the training step half way and could
deadlock inside torch. The checkpoint is written at the next step boundary.
"""

import datetime
import os
import signal
import sys
import time

COMPLETE_MARKER = ".complete"
FAILED_MARKER = ".failed"
EXIT_CHECKPOINTED = 85  # "checkpoint written, restart me from it"
# How long save() waits for ReclaimNet to take the previous checkpoint.
TAKE_TIMEOUT_S = 10.0


def _parse_deadline(text):
    text = (text or "").strip()
    if not text:
        return None
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.datetime.fromisoformat(text)


class Checkpointer:
    """Reads the RECLAIMNET_* environment and speaks the checkpoint protocol.

    Outside ReclaimNet (no RECLAIMNET_CKPT_DIR) nothing is ever requested and
    save() does nothing, so a script runs unchanged on a laptop.
    """

    def __init__(self):
        env = os.environ
        self.job_id = env.get("RECLAIMNET_JOB_ID", "local")
        self.ckpt_dir = env.get("RECLAIMNET_CKPT_DIR") or None
        self.restore_dir = env.get("RECLAIMNET_RESTORE_DIR") or None
        self.restart_count = int(env.get("RECLAIMNET_RESTART_COUNT", "0"))
        self.deadline_file = env.get("RECLAIMNET_DEADLINE_FILE") or None
        self.ready_file = env.get("RECLAIMNET_READY_FILE") or None
        self._deadline = _parse_deadline(env.get("RECLAIMNET_DEADLINE"))
        self._deadline_mtime = None
        self._deadline_checked = 0.0
        self._requested = False
        name = env.get("RECLAIMNET_CKPT_SIGNAL", "USR1")
        signum = int(name) if name.isdigit() else getattr(signal, "SIG" + name)
        signal.signal(signum, self._on_signal)

    def _on_signal(self, signum, frame):
        # Only a flag: the checkpoint is written at the next step boundary.
        self._requested = True

    @property
    def requested(self):
        """True once the agent asked for a checkpoint that is not written yet."""
        return self._requested

    def ready(self):
        """Say that state is restored and the handler installed.

        ReclaimNet measures the restart time up to this call and sends no
        checkpoint signal before it.
        """
        if self.ready_file:
            with open(self.ready_file, "w"):
                pass

    def save(self, write):
        """Write a checkpoint: write(dir) writes the files, then the marker.

        Returns True on success. On failure (e.g. a full disk) the partial
        files are removed, the reason is left in .failed, and the job goes on.
        """
        self._requested = False
        d = self.ckpt_dir
        if d is None:
            return False
        if not self._previous_taken(d):
            print("reclaimnet: checkpoint skipped: the previous one was not taken within %.0f s" % TAKE_TIMEOUT_S,
                  file=sys.stderr, flush=True)
            return False
        try:
            write(d)
            for name in os.listdir(d):
                path = os.path.join(d, name)
                if os.path.isfile(path):
                    with open(path, "rb") as f:
                        os.fsync(f.fileno())
            with open(os.path.join(d, COMPLETE_MARKER), "w"):
                pass
            return True
        except Exception as e:  # torch.save raises RuntimeError for I/O errors too
            reason = "%s: %s" % (type(e).__name__, e)
            print("reclaimnet: checkpoint failed: " + reason, file=sys.stderr, flush=True)
            try:
                for name in os.listdir(d):
                    os.remove(os.path.join(d, name))
                with open(os.path.join(d, FAILED_MARKER), "w") as f:
                    f.write(reason + "\n")
            except OSError:
                pass  # the supervisor's timeout abandons it
            return False

    @staticmethod
    def _previous_taken(d):
        """Wait until d exists again without a marker.

        ReclaimNet moves a completed checkpoint directory away and puts an
        empty one in its place; files written before that would land in the
        checkpoint being moved, and the marker alone in the new one.
        """
        end = time.monotonic() + TAKE_TIMEOUT_S
        while True:
            try:
                names = os.listdir(d)
                if COMPLETE_MARKER not in names and FAILED_MARKER not in names:
                    return True
            except FileNotFoundError:
                pass  # between the move and the fresh directory
            if time.monotonic() >= end:
                return False
            time.sleep(0.01)

    def deadline(self):
        """The pending reclaim deadline (aware datetime, UTC) or None.

        Reads RECLAIMNET_DEADLINE_FILE at most every 0.2 s, so calling this
        every step is cheap; the file is replaced atomically by the agent.
        """
        now = time.monotonic()
        if self.deadline_file is None or now - self._deadline_checked < 0.2:
            return self._deadline
        self._deadline_checked = now
        try:
            st = os.stat(self.deadline_file)
            if st.st_mtime_ns != self._deadline_mtime:
                with open(self.deadline_file) as f:
                    self._deadline = _parse_deadline(f.read())
                self._deadline_mtime = st.st_mtime_ns
        except (OSError, ValueError):
            pass  # keep the last value we read
        return self._deadline
