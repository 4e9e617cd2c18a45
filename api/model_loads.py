"""How many models one user's requests may load (--load-on-demand, --max-model-loads-per-user):
a load takes the server's cores for seconds and its memory for as long as the model stays, and
loads happen one at a time for everyone, so one user naming model after model must not keep the
server loading."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque

from .errors import APIError

LOAD_WINDOW_SECONDS = 60.0


class LoadsPerUser:
    """At most ``most`` loads for each user in any LOAD_WINDOW_SECONDS."""

    def __init__(self, most: int) -> None:
        self.most = most
        # Each user's loads in the window, the user who loaded last at the end: those whose
        # loads have all left the window are forgotten from the front.
        self._loads: OrderedDict[str, deque[float]] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, user: str) -> None:
        """Count a load for ``user``; an APIError (429, with Retry-After) where they have had their share."""
        now = time.monotonic()
        with self._lock:
            while self._loads and now - next(iter(self._loads.values()))[-1] >= LOAD_WINDOW_SECONDS:
                self._loads.popitem(last=False)
            loads = self._loads.setdefault(user, deque())
            while loads and now - loads[0] >= LOAD_WINDOW_SECONDS:
                loads.popleft()
            if len(loads) >= self.most:
                wait = math.ceil(LOAD_WINDOW_SECONDS - (now - loads[0]))
                raise APIError(429, f"You have had {self.most} models loaded by your requests within the last minute, the most "
                                    f"this server lets one user (--max-model-loads-per-user {self.most}). Ask a loaded model "
                                    f"(GET /v1/models lists them), or try again in {wait} s.",
                               type="rate_limit_error", param="model", code="model_load_rate_limit",
                               headers={"Retry-After": str(wait)})
            loads.append(now)
            self._loads.move_to_end(user)
