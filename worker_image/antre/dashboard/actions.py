"""The dashboard's actions: replay, purge (delete) and cancel, each confirmed first.

One endpoint, ``POST /queues/{queue}/actions``, with the CSRF token checked before it runs
(:mod:`.access`). Without ``confirmed=yes`` it changes nothing and answers a confirmation page
that names the action and how many jobs it touches, with the exact ids carried on; confirming
posts those ids again. A dead-letter group is named by a digest of its error and resolved to ids
at confirmation time, so what is confirmed is what runs. The changes go through the client's
protocol operations (:meth:`antre.AsyncQueue.replay`, ``purge``, ``cancel``), as ``antre dlq``
and the API do, in chunks of at most a thousand ids.
"""

from __future__ import annotations

from typing import Final
from urllib.parse import urlencode

from aiohttp import web

from antre import errors
from antre.client import AsyncQueue
from antre.dashboard import pages, reading, views
from antre.dashboard.access import page_context, read_form
from antre.dashboard.state import Dashboard, PageError, dashboard_of

#: Most jobs one confirmation may carry (a full dead-letter window).
MAX_IDS: Final = reading.MAX_GROUP_SCAN
#: Ids per call (the client splits further to the scripts' own bound).
CHUNK: Final = 1000
#: Ids listed on the confirmation page (all are carried in the form).
SHOWN_IDS: Final = 50

_QUESTIONS: Final = {
    "replay": ("Replay {n} dead job(s) of queue {queue}?",
               "They go back to the head of the ready list with a fresh attempt budget.",
               "Replay {n}"),
    "purge": ("Delete {n} dead job(s) of queue {queue} for good?",
              "Their records and idempotency keys are deleted; this cannot be undone.",
              "Delete {n}"),
    "cancel": ("Cancel job {job} of queue {queue}?",
               "It is withdrawn and will not run; its record is kept as cancelled.",
               "Cancel the job"),
}


async def run_action(request: web.Request) -> web.StreamResponse:
    dashboard = dashboard_of(request)
    queue = dashboard.queue(request.match_info["queue"])
    form = await read_form(request)
    back = pages.back_target(dashboard, form.get("back"), queue.name)
    if dashboard.settings.read_only:
        raise PageError(403, "Read-only", "This dashboard is read-only: it shows queues but "
                        "changes nothing.", back=back)
    action = form.get("action")
    if action not in _QUESTIONS:
        raise PageError(400, "Unknown action", f"action: got {str(action)[:40]!r}; must be "
                        "replay, purge or cancel.", back=back)
    ids = [value for value in form.getall("ids", []) if isinstance(value, str)]
    group = form.get("group")
    if isinstance(group, str) and group and not ids:
        ids = await _group_ids(queue, group, form.get("scan"))
    bad = [job_id for job_id in ids if not reading.valid_job_id(job_id)]
    if bad:
        raise PageError(400, "Bad job id", f"ids: {bad[0][:40]!r} is not a job id.", back=back)
    ids = list(dict.fromkeys(ids))
    if not ids:
        raise PageError(400, "Nothing selected", "Select at least one job.", back=back)
    if len(ids) > MAX_IDS or (action == "cancel" and len(ids) != 1):
        raise PageError(400, "Too many jobs", f"ids: {len(ids)} given; at most {MAX_IDS} (one "
                        "for cancel).", back=back)
    if form.get("confirmed") != "yes":
        return await _confirmation(dashboard, request, queue.name, str(action), ids, back)
    raise web.HTTPSeeOther(_with_notice(back, **await _perform(queue, str(action), ids)))


async def _group_ids(queue: AsyncQueue, group: str, scan_value: object) -> list[str]:
    scan = pages.small_count(scan_value, max_digits=6)
    if scan is None:
        scan = reading.DEFAULT_GROUP_SCAN
    depth = await queue.stats()
    groups = await reading.read_dead_groups(queue, depth, scan=scan)  # fresh: what runs now
    for error, ids in groups.ids_by_error.items():
        if pages.group_key(error) == group:
            return ids
    return []


async def _confirmation(dashboard: Dashboard, request: web.Request, queue: str, action: str,
                        ids: list[str], back: str) -> web.Response:
    question, explanation, button = _QUESTIONS[action]
    values = {"n": views.number(len(ids)), "queue": queue, "job": ids[0]}
    body = dashboard.render(
        "confirm.html", queue=queue, action=action, ids=ids, shown_ids=ids[:SHOWN_IDS],
        question=question.format(**values), explanation=explanation,
        button=button.format(**values), back=back, queue_names=dashboard.queue_names(),
        **page_context(dashboard, request))
    return web.Response(text=body, content_type="text/html")


async def _perform(queue: AsyncQueue, action: str, ids: list[str]) -> dict[str, str]:
    if action == "cancel":
        try:
            was = await queue.cancel(ids[0])
        except errors.JobBusy:
            return {"done": "busy"}
        except errors.JobNotFound:
            return {"done": "gone"}
        return {"done": "finished" if was in ("done", "cancelled") else "cancelled", "was": was}
    changed = 0
    for first in range(0, len(ids), CHUNK):
        chunk = ids[first:first + CHUNK]
        if action == "replay":
            changed += len(await queue.replay(chunk, limit=len(chunk)))
        else:
            changed += await queue.purge(chunk, limit=len(chunk))
    return {"done": "replayed" if action == "replay" else "purged", "n": str(changed),
            "of": str(len(ids))}


def _with_notice(back: str, **notice: str) -> str:
    path, _, query = back.partition("?")
    kept = [part for part in query.split("&")
            if part and part.split("=", 1)[0] not in ("done", "n", "of", "was")]
    return path + "?" + "&".join([*kept, urlencode(notice)])
