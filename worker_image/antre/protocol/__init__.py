"""The queue protocol: one Lua script per state change, each with a typed Python wrapper.

Each module builds an :class:`~antre.protocol.scripts.Op` (script, keys, args, reply parser);
:mod:`antre.protocol.scripts` runs it on a sync or asyncio client. The clients in
:mod:`antre.client` and the worker only ever go through these wrappers.
"""
