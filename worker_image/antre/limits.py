"""The bounds of what a producer may ask for and of every duration and count setting, defined
once: the client's encoder (:mod:`antre.protocol.enqueue`), the settings (:mod:`antre.settings`,
:mod:`antre.backoff`, the API's), the HTTP API's OpenAPI schema (:mod:`antre.openapi`) and the
command line all use these, so each refuses the same values.

Plain numbers (integers, so messages print them exactly); a leaf: it imports nothing.
"""

from __future__ import annotations

from typing import Final

DAY_S: Final = 86_400
WEEK_S: Final = 7 * DAY_S
TEN_YEARS_S: Final = 10 * 365 * DAY_S

#: Most runs a job may be given (``max_attempts``, ``ANTRE_MAX_ATTEMPTS``).
MAX_ATTEMPTS: Final = 1000
#: The longest delay an enqueue or a ``Retry`` may ask for: ten years. Far beyond any real
#: schedule, and far below where a time in milliseconds stops being exact in Redis.
MAX_DELAY_S: Final = TEN_YEARS_S
#: The longest a record, a dead letter or an idempotency key is kept.
MAX_TTL_S: Final = TEN_YEARS_S
#: The longest lease, wait, pause or interval: a lease, a shutdown's grace, a reaper interval, a
#: lock's deferral, a retry's base delay, a request body's arrival.
MAX_WAIT_S: Final = DAY_S
#: The longest single run of a handler, and the longest retry delay.
MAX_RUN_S: Final = WEEK_S
#: The longest a durable write waits for its replicas.
MAX_DURABLE_TIMEOUT_S: Final = 60
#: Most times a job waits for a busy resource before it is dead-lettered.
MAX_LOCK_DEFERRALS: Final = 1_000_000
#: Largest encoded payload, and largest request body: Redis's default bulk string limit.
MAX_BYTES: Final = 512 * 1024 * 1024
#: Most connections one API process holds open.
MAX_CONNECTIONS: Final = 100_000
