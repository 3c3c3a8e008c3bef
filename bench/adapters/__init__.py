"""One small adapter per job library: its no-op, warm-up and slow jobs, how to enqueue them
(one call per job, and the bulk API where the library has one) and how its default worker is
started. A module is imported only when its library is benchmarked, after ``BENCH_REDIS_URL``
is set, because several libraries bind their broker at import time."""

from __future__ import annotations

import importlib
from typing import Any

#: Library name -> module defining ``ADAPTER`` and the jobs its workers import.
MODULES = {
    "antre": "bench.adapters.antre_jobs",
    "arq": "bench.adapters.arq_jobs",
    "rq": "bench.adapters.rq_jobs",
    "saq": "bench.adapters.saq_jobs",
    "celery": "bench.adapters.celery_jobs",
    "dramatiq": "bench.adapters.dramatiq_jobs",
    "huey": "bench.adapters.huey_jobs",
    "taskiq": "bench.adapters.taskiq_jobs",
}


def load(name: str) -> Any:
    return importlib.import_module(MODULES[name]).ADAPTER
