"""Commands of the asyncio clients packed by hiredis, as redis-py packs the sync clients'.

redis-py's asyncio connections pack every command in Python, argument by argument, even with
hiredis installed (its sync connections use hiredis's packer): 22 us for a claim's EVALSHA of
23 arguments against 2 us, and an ``enqueue_many`` call of 200 jobs carries 1,600. The bytes
are the same, and so are the errors for what cannot be sent (``DataError``,
``UnicodeEncodeError``): an argument hiredis does not take goes to redis-py's packer. Only
clients that encode as UTF-8, strictly (antre's), are switched.
"""

from __future__ import annotations

import functools
from typing import Any

import redis.connection
import redis.exceptions
from redis.utils import HIREDIS_AVAILABLE

#: redis-py's own serializer for its sync connections (not in every redis-py 5 release).
_SERIALIZER: Any = getattr(redis.connection, "HiredisRespSerializer", None)


class _HiredisPacking:
    _packer: Any = _SERIALIZER() if _SERIALIZER is not None else None

    def pack_command(self, *args: Any) -> list[bytes]:
        try:
            return self._packer.pack(*args)  # type: ignore[no-any-return]
        except redis.exceptions.DataError:
            # hiredis takes exact ints, strs, bytes and floats only: anything else (an IntEnum)
            # is sent, or refused, as redis-py's own packer does.
            return super().pack_command(*args)  # type: ignore[misc,no-any-return]


@functools.cache
def _packing(connection_class: type) -> type:
    return type(connection_class.__name__, (_HiredisPacking, connection_class), {})


def packed_by_hiredis(client: Any) -> Any:
    """``client`` (an asyncio ``Redis``), its connections from now on packing with hiredis when
    it is installed; a client of another encoding, or without a pool, as it was."""
    pool = getattr(client, "connection_pool", None)
    if not HIREDIS_AVAILABLE or _SERIALIZER is None or pool is None:
        return client
    options = pool.connection_kwargs
    if (str(options.get("encoding", "utf-8")).lower().replace("_", "-") not in ("utf-8", "utf8")
            or options.get("encoding_errors", "strict") != "strict"):
        return client
    if not issubclass(pool.connection_class, _HiredisPacking):
        pool.connection_class = _packing(pool.connection_class)
    return client
