"""The web dashboard, served by ``antre api --dashboard`` under ``/ui``.

Server-rendered pages (Jinja templates and one small script, shipped inside the package) over
the same reads as ``antre inspect`` and the HTTP API: :mod:`.reading` reads rows, the numbers
come from the depth script and :mod:`antre.snapshots`, the findings from :mod:`antre.findings`.
:mod:`.sessions` exchanges the API token for a session cookie and checks CSRF tokens,
:mod:`.live` shares one sampler among every open tab, :mod:`.charts` draws the sparklines,
:mod:`.pages` and :mod:`.actions` are the handlers, :mod:`.app` puts them together.
"""
