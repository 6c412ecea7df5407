"""Troupe's actor layer: sessions hosted in Ray actors (or in this process), and their clients."""

import time as _time

IMPORTED_AT: float = _time.time()
"""When this process began importing the actor layer (``actors.boot``: a host's start-up stages)."""
