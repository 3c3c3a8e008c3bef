"""Print the settings tables of README.md and docs/api.md, derived from the settings'
declarations (antre.fields); tests/worker/test_settings_env.py checks the docs hold them.

    python scripts/settings_tables.py
"""

from __future__ import annotations

from antre import api, fields, settings
from antre.dashboard.state import DashboardSettings

HEADER = "| flag | env | default | meaning |\n|---|---|---|---|"

if __name__ == "__main__":
    for title, classes in (("README.md, Running workers", (settings.QueueSettings,
                                                           settings.WorkerSettings)),
                           ("docs/api.md", (api.ApiSettings,)),
                           ("docs/dashboard.md", (DashboardSettings,))):
        print(f"<!-- {title} -->\n{HEADER}")
        for cls in classes:
            print("\n".join(fields.markdown_rows(cls)))
        print()
