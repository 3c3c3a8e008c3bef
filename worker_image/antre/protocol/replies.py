"""Numbers in script replies, bounded: pure.

Every count or time antre's scripts return is far below 2**53 (a job count, a millisecond
timestamp). A server that answers with a number beyond it (another server, or a hostile one a
JobQueue author runs: a 400-digit count) gives a reply of a shape no Redis running antre's
scripts gives; it fails here as ValueError, like any other malformed reply, instead of as an
OverflowError in a caller's arithmetic (a float division, ``math.ceil``) far from the read.
"""

from __future__ import annotations

from typing import Any, Final

#: The largest magnitude a reply's number may have: every integer up to it is exact as a float.
MAX_REPLY_INT: Final = 2**53 - 1


def bounded_int(value: Any) -> int:
    """``int(value)`` when its magnitude is at most :data:`MAX_REPLY_INT`, else ValueError
    (the message never quotes the value: it may be megabytes long)."""
    try:
        number = int(value)
    except OverflowError:  # int() of an infinite float
        raise ValueError("a number in a reply is not finite") from None
    if not -MAX_REPLY_INT <= number <= MAX_REPLY_INT:
        raise ValueError(f"a number in a reply is out of range (beyond {MAX_REPLY_INT})")
    return number
