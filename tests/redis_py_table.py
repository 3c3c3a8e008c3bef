"""Whether ``antre.redis_py_options``' table (SINCE, NOT_TAKEN) says what it finds in the
installed redis-py: each client over TLS takes each URL option exactly when the table says the
installed release does. Imported by tests/worker/test_redis_py_options.py (the suite's
redis-py) and, as text, by tests/images/test_dependency_floors.py in the floor's virtualenv,
so it imports nothing of the tests."""

from __future__ import annotations


def disagreements() -> list[str]:
    import redis
    from antre import redis_py_options, redis_urls

    installed = redis_py_options.version(redis.__version__)
    found = []
    for client in redis_py_options.USERS:
        takes = redis_py_options.taken(client, tls=True)
        if takes is None:
            found.append(f"{client}: what it takes could not be told")
            continue
        for name in sorted(redis_urls.URL_OPTIONS):
            since = redis_py_options.SINCE.get((client, name))
            said = ((client, name) not in redis_py_options.NOT_TAKEN
                    and (since is None or installed >= redis_py_options.version(since)))
            if (name in takes) != said:
                found.append(f"redis-py {redis.__version__}, {client} client, {name}: "
                             f"{'taken' if name in takes else 'not taken'}, the table says "
                             f"{'taken' if said else 'not taken'}")
    return found
