"""The config the scheduler serves for the sim's RM: what the limit checks hold allocations to.

An operator may change an RM's config while the sim runs (``korral config apply`` through
rmproxy's admin endpoint), and the scheduler then places work under the new queue max and
user/group limits. So, given the REST address, the sim reads ``/ws/v1/config?rmID=`` every
``POLL`` seconds and again before it reports a limit violation (``confirm``): a change is adopted
from then on (``apply``), and a violation that holds no more under the config served now is not
one. rmproxy records a change once the workers have taken it, so an allocation made under the new
config can reach the RM before ``/ws/v1/config`` shows it: a violation is confirmed by a read that
started at least ``SETTLE`` seconds after its allocation arrived. Each change is kept (when in the
run, old and new checksum, by whom) for the summary. Without a REST address only the workload's
own ``config_updates`` change the limits.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import urllib.parse
from typing import Callable

from common.config import config_checksum
from common.config.loader import file_checksum, strip_checksum
from common.restclient import RestClient, RestError

__all__ = ["ServedConfig", "POLL", "SETTLE", "BY_WORKLOAD", "BY_OTHER"]

log = logging.getLogger(__name__)

POLL = 0.5  # seconds between two reads of the served config
SETTLE = 0.5  # a read this long after an allocation arrived shows the config it was made under
BY_WORKLOAD = "the workload's config update"
BY_OTHER = "not by this RM (an operator's korral config, or another client)"


class ServedConfig:
    """The served config's checksum as the checks last adopted it, and the changes seen.

    ``guard`` is the lock the checks run under (``SimCluster.lock``): a change is compared and
    adopted holding it, so the allocation being checked and the limits agree; the HTTP read
    itself holds no lock of this class (a later read wins over an earlier one that answers late).
    """

    def __init__(self, rest_address: str, rm_id: str, text: str, guard: threading.RLock,
                 clock: Callable[[], float], started: float) -> None:
        self.client = RestClient(rest_address, timeout=5.0) if rest_address else None
        self.path = f"/ws/v1/config?rmID={urllib.parse.quote(rm_id, safe='')}"
        self.guard, self.clock, self.started = guard, clock, started
        self.checksum = config_checksum(text)
        self.changes: list[dict] = []  # {"t", "old", "new", "by"}
        self.expected: set[str] = set()  # checksums of the workload's own updates
        self.error = ""  # why the last read failed
        self._lock = threading.Lock()
        self._reads = itertools.count(1)
        self._adopted_read = 0
        self._last_read_at = float("-inf")  # when the last successful read started (clock)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> tuple[str, str] | None:
        """(text, checksum) the scheduler serves now; None when it cannot be read (``error`` says why)."""
        if self.client is None:
            return None
        try:
            raw = self.client.send("GET", self.path, headers={"Accept": "application/x-yaml"}).decode("utf-8")
        except (RestError, UnicodeDecodeError) as exc:
            if str(exc) != self.error:
                log.warning("cannot read the served config: %s", exc)
            self.error = str(exc)
            return None
        self.error = ""
        return strip_checksum(raw), file_checksum(raw) or config_checksum(raw)

    def refresh(self, apply: Callable[[str], None]) -> bool:
        """Read the served config; when it changed, record it and ``apply(text)`` (under ``guard``).
        True when the limits changed."""
        with self._lock:
            number, started = next(self._reads), self.clock()
        got = self.read()
        if got is None:
            return False
        text, checksum = got
        with self.guard, self._lock:
            if number < self._adopted_read:
                return False  # a read that started later was adopted already
            self._adopted_read = number
            self._last_read_at = max(self._last_read_at, started)
            if checksum == self.checksum:
                return False
            by = BY_WORKLOAD if checksum in self.expected else BY_OTHER
            self._record(checksum, by)
            apply(text)
            return True

    def confirm(self, arrived: float, apply: Callable[[str], None]) -> bool:
        """Before a limit violation of an allocation that arrived at ``arrived`` (clock) is reported:
        read the served config, and when no read has started ``SETTLE`` seconds after the arrival
        yet, wait for then and read again. True when the limits changed (check it again). Called
        holding ``guard``: the RM's callbacks wait, so the usage stays as it was."""
        if self.refresh(apply):
            return True
        if self.client is None or self._last_read_at >= arrived + SETTLE:
            return False
        time.sleep(max(0.0, arrived + SETTLE - self.clock()))
        return self.refresh(apply)

    def workload_update(self, text: str, apply: Callable[[str], None]) -> None:
        """The workload's own ``UpdateConfiguration`` of ``text`` was accepted: adopt it now."""
        checksum = config_checksum(text)
        with self.guard, self._lock:
            self.expected.add(checksum)
            if checksum != self.checksum:
                self._record(checksum, BY_WORKLOAD)
                apply(text)

    def _record(self, checksum: str, by: str) -> None:
        t = round(self.clock() - self.started, 2)
        self.changes.append({"t": t, "old": self.checksum, "new": checksum, "by": by})
        log.info("the served config changed at %.2fs: %s -> %s (%s)", t, self.checksum, checksum, by)
        self.checksum = checksum

    def start(self, apply: Callable[[str], None]) -> "ServedConfig":
        """Poll every ``POLL`` seconds on a daemon thread until ``stop``."""
        if self.client is not None:
            def run() -> None:
                while not self._stop.wait(POLL):
                    self.refresh(apply)

            self._thread = threading.Thread(target=run, name="sim-served-config", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
