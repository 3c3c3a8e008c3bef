"""The operator with its watches as they were before the server-side label selector: every
Deployment, CronJob and Service of the cluster reaches kopf, which filters by label in the
process. Only for the before/after figures of ``bench/operator_scale.py``; takes the
operator's arguments.
"""

from __future__ import annotations

import sys
from typing import Any

from antre_operator import __main__ as operator_main
from antre_operator import handlers

_configure = handlers.configure_kopf


def configure_without_selectors(kopf_settings: Any, ours: Any) -> None:
    _configure(kopf_settings, ours)
    for selector in list(kopf_settings.watching.label_selectors):
        del kopf_settings.watching.label_selectors[selector]


handlers.configure_kopf = configure_without_selectors

if __name__ == "__main__":
    sys.exit(operator_main.main(sys.argv[1:]))
