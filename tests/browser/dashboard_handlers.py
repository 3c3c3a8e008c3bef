"""Handlers of the worker the browser tests run (``antre worker --handlers dashboard_handlers``).

``send_email`` succeeds after sleeping ``payload["sleep_s"]`` (default 0). ``charge`` fails
permanently with "upstream refused the charge" until the file named by ``payload["fixed"]``
exists, so a test can dead-letter jobs, "deploy the fix" by creating the file, then replay them.
"""

from __future__ import annotations

import asyncio
import os

import antre


@antre.handler("send_email")
async def send_email(job: antre.Job) -> None:
    await asyncio.sleep(float((job.payload or {}).get("sleep_s", 0)))


@antre.handler("charge")
async def charge(job: antre.Job) -> None:
    if not os.path.exists(job.payload["fixed"]):
        raise antre.Permanent("upstream refused the charge")
