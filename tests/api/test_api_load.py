"""A bounded loopback load check: 2,000 enqueues from 20 concurrent aiohttp clients against
``antre api`` started as a real process (through ``bench/api_load.py``).

Prints requests/s and latency percentiles for the record; asserts only correctness: every
request answered 202, every job id distinct and present in Redis.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench" / "api_load.py"


def _bench_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_load", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["api_load"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_two_thousand_enqueues_from_twenty_clients(redis_client: Any, redis_url: str,
                                                   figures: list[str]) -> None:
    result = _bench_module().measure(redis_url, total=2000, concurrency=20, queue="load")
    figures.append(f"[api load] {result.total} enqueues, {result.concurrency} clients: "
                   f"{result.requests_per_s} req/s, p50 {result.p50_ms} ms, "
                   f"p99 {result.p99_ms} ms, max {result.max_ms} ms")
    assert result.statuses == {"202": 2000}
    assert result.job_ids == 2000
    assert result.jobs_found == 2000
