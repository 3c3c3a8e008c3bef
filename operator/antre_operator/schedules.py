"""The reaper's cron schedules, as the CronJob API reads them (robfig/cron): pure.

The JobQueue CRD refuses the same schedules with the same patterns (a test keeps them equal), so
a schedule the CronJob API would refuse never gets past the JobQueue: the API server refuses it
at admission, naming ``spec.reaper.schedule``, and the operator's parser says the same.
No backslashes in any pattern: the same text is a CEL string in the CRD.
"""

from __future__ import annotations

import re
from typing import Final

#: The shape of the schedules the CRD admits: a macro, or five fields (the same pattern is in
#: crds/jobqueues.antre.dev.yaml). What each field may hold is in CRON_FIELDS.
SCHEDULE_RE: Final = re.compile(
    r"^(@(annually|yearly|monthly|weekly|daily|hourly|midnight)|\s*\S+(\s+\S+){4}\s*)$")

#: The names robfig/cron takes for months and days of the week (in any case), as numbers.
MONTHS: Final = {name: number for number, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
DAYS: Final = {name: number for number, name in enumerate(
    ("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_NAMES: Final = {**MONTHS, **DAYS}


#: A step robfig/cron (the CronJob API's parser) takes: any whole number from 1 that fits an
#: int64 (one larger than the field's span fires once per span, as `*/60` does for minutes;
#: /0 and a number too long for an int64 are refused).
STEP: Final = "[1-9][0-9]{0,17}"


def _cron_field(values: str, wildcard: str) -> str:
    """One field: a list of ``*``, values or ranges, each with an optional ``/step``."""
    atom = f"({wildcard}|({values})(-({values}))?)(/0*({STEP}))?"
    return f"^{atom}(,{atom})*$"


def _names(names: dict[str, int]) -> str:
    return f"(?i:{'|'.join(names)})"


#: (name, values it takes, full-match pattern) of each of the five fields. The CRD has one CEL
#: rule per field with the same pattern.
CRON_FIELDS: Final = (
    ("minute", "0-59", _cron_field("[0-5]?[0-9]", "[*]")),
    ("hour", "0-23", _cron_field("[01]?[0-9]|2[0-3]", "[*]")),
    ("day-of-month", "1-31 or ?", _cron_field("0?[1-9]|[12][0-9]|3[01]", "[*?]")),
    ("month", "1-12 or jan-dec", _cron_field(f"0?[1-9]|1[0-2]|{_names(MONTHS)}", "[*]")),
    ("day-of-week", "0-6 or sun-sat or ?", _cron_field(f"0?[0-6]|{_names(DAYS)}", "[*?]")),
)

#: A range whose ends are numbers or names, in a schedule written in lower case.
_END: Final = f"[0-9]+|{'|'.join(_NAMES)}"
CRON_RANGE_RE: Final = re.compile(f"({_END})-({_END})")
CRON_RANGE_MESSAGE: Final = ("a range a-b needs a <= b (names count as numbers: jan=1 ... "
                             "dec=12, sun=0 ... sat=6)")


def _cel_end(end: str) -> str:
    names = ", ".join(f'"{name}": {number}' for name, number in _NAMES.items())
    return f"({end} in {{{names}}} ? {{{names}}}[{end}] : int({end}))"


_START_CEL: Final = 'r.split("-")[0]'
_FINISH_CEL: Final = 'r.split("-")[1]'
#: The CRD's CEL rule for ranges: the same as :func:`schedule_problem`'s, names included.
CRON_RANGE_RULE: Final = (f'self.lowerAscii().findAll("({_END})-({_END})").all(r, '
                          f'{_cel_end(_START_CEL)} <= {_cel_end(_FINISH_CEL)})')


def cron_field_message(name: str, allowed: str) -> str:
    return (f"the {name} field takes {allowed}, *, ranges (a-b), lists (a,b) and steps "
            "(/n, n a whole number from 1, at most 18 digits)")


def _value(end: str) -> int:
    return _NAMES[end] if end in _NAMES else int(end)


def schedule_problem(schedule: str) -> str | None:
    """What is wrong with a schedule the CronJob API would refuse, or None."""
    if not SCHEDULE_RE.match(schedule):
        return ("must be a 5-field cron schedule such as '* * * * *' or one of "
                "@annually, @yearly, @monthly, @weekly, @daily, @midnight, @hourly")
    if schedule.startswith("@"):
        return None
    for (name, allowed, pattern), value in zip(CRON_FIELDS, schedule.split(),
                                                             strict=True):
        if not re.match(pattern, value):
            return cron_field_message(name, allowed)
    for start, end in CRON_RANGE_RE.findall(schedule.lower()):
        if _value(start) > _value(end):
            return CRON_RANGE_MESSAGE
    return None
