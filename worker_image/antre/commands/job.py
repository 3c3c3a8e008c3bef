"""``antre job``: one job with its lifecycle history."""

from __future__ import annotations

import argparse
import json
from typing import Final

from antre.commands import Command, format_ms, json_flag, open_queue, print_json


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_id", help="the id enqueue printed")
    json_flag(parser)


def run(args: argparse.Namespace) -> int:
    info = open_queue(args).get(args.job_id)
    if args.json:
        print_json(info.to_dict())
        return 0
    print(f"job {info.id}  type={info.type}  status={info.status}  "
          f"attempt={info.attempt}/{info.max_attempts}")
    if info.idempotency_key:
        print(f"  idempotency_key: {info.idempotency_key}")
    if info.resource_key:
        print(f"  resource_key:    {info.resource_key}")
    if info.outcome:
        print(f"  outcome:         {info.outcome}")
    if info.last_error:
        print(f"  last_error:      {info.last_error}")
    print(f"  payload:         {json.dumps(info.payload)[:500]}")
    for step, result in info.steps.items():
        print(f"  step {step}: {json.dumps(result)[:200]}")
    print("  history:")
    for event in info.history:
        bits = [f"{format_ms(event.at_ms)}  {event.event:<14}"]
        if event.attempt is not None:
            bits.append(f"attempt={event.attempt}")
        if event.worker:
            bits.append(f"worker={event.worker}")
        if event.error:
            bits.append(f"error={event.error}")
        print("    " + "  ".join(bits))
    return 0


COMMAND: Final = Command("job", "show one job with its lifecycle history", configure, run)
