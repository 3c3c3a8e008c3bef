"""The operator's Redis clients, whose every reply is read through :mod:`reply_cap`, whatever
kind of URL a JobQueue names: a server, the primary a Sentinel group names, or a Cluster.

redis-py takes a caller's parser for a server's connections and for the primary behind
Sentinels (``parser_class``), but neither its Sentinel object nor its asyncio cluster client
passes one on: the Sentinels' clients are built from a fixed set of options, and the cluster
client's constructor takes none. Both build their connections lazily from an options dict they
keep (a Sentinel's pool's ``connection_kwargs``; the cluster client's ``connection_kwargs``,
which its nodes, found now or later, are made from, and each start-up node's own copy), so the
parser is given there, before any connection exists: redis-py 8 gives its own
maintenance-notification options to a cluster's nodes the same way.

A cluster client also reads its topology (``CLUSTER SLOTS``, ``COMMAND``) inside whatever read
first needs it, a read of its own here (:data:`reply_cap.TOPOLOGY_CAP`), and what those replies
say is checked before redis-py acts on it: it stores each slot of a range one by one (a few
bytes naming the range 0-10^12 would fill the memory; redis-py 5.0.x also each node listed for
it), keeps an object of 3.5 KB per node named, lists every argument position between a
command's first and last key, and keeps ``COMMAND``'s table whole.

What a cluster JobQueue's client keeps at rest, as long as the JobQueue lives (measured by
``tests/operator/test_backlog_reader_topologies.py::
test_what_a_cluster_jobqueue_keeps_at_rest_is_bounded``): 1.7 MiB for a real Redis 7.0 cluster
of three nodes with redis-py 8.1 (2.8-3.1 MiB with 5.0.1), about half of it the map of the
16,384 slots; at most about 4 MiB (5 MiB with 5.0.1) for a hostile one that answers all the
checks allow within the cap: every slot listed with 16 nodes, and 1,024 commands of 32 flags
each or as many commands of 128 subcommands as fit (4.1 and 4.8 MiB measured alone).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import redis.asyncio.cluster
import redis.exceptions
from antre import connection, sentinel, sentinel_urls

from antre_operator import reply_cap

#: Redis Cluster's hash slots: 0 to 16383.
CLUSTER_SLOTS: Final = 16384
#: The most nodes a ``CLUSTER SLOTS`` reply may name (Redis Cluster is designed for up to 1,000);
#: 20,000 fit in the topology cap, and redis-py would keep 70 MiB of objects for them.
MAX_CLUSTER_NODES: Final = 1000
#: The most nodes a ``CLUSTER SLOTS`` reply may list for its slots, summed over its ranges (each
#: range's slots times the nodes listed for it): each slot with a primary and 15 replicas.
#: redis-py 5.0.x appends each node listed to each slot's list, one by one on the event loop: one
#: range of all slots listing 1,000 replicas (23 KB) took 135 MiB and held the loop 5-7 s.
MAX_SLOT_NODES: Final = CLUSTER_SLOTS * 16
#: The most commands ``COMMAND`` may list (Redis 7.0 lists 240; modules add some), subcommands
#: of one (27 at most in 7.0), items of one (10 in 7.0) and items in each list of a command's
#: (flags, ACL categories, tips, key specifications: 6 at most in 7.0). redis-py keeps them all
#: as long as the client lives: 8,000 commands within the topology cap kept 4-6 MiB.
MAX_COMMANDS: Final = 1024
MAX_SUBCOMMANDS: Final = 128
MAX_COMMAND_ITEMS: Final = 16
MAX_COMMAND_LIST: Final = 32
#: The largest key position or step ``COMMAND`` may give (Redis's own are below 10).
MAX_KEY_POSITION: Final = 1024


def _refuse(what: str) -> redis.exceptions.InvalidResponse:
    return redis.exceptions.InvalidResponse(f"{what}: not what a Redis Cluster answers")


def checked_slots(response: Any, **options: Any) -> Any:
    """A ``CLUSTER SLOTS`` reply as it came, once it is one a cluster can give: ranges within
    the hash slots, covering no more slots than there are, naming at most
    :data:`MAX_CLUSTER_NODES` nodes and listing at most :data:`MAX_SLOT_NODES` for its slots."""
    if not isinstance(response, list):
        raise _refuse("CLUSTER SLOTS")
    slots = slot_nodes = 0
    nodes = set()
    for entry in response:
        if not (isinstance(entry, list) and len(entry) >= 3
                and all(type(end) is int for end in entry[:2])
                and 0 <= entry[0] <= entry[1] < CLUSTER_SLOTS):
            raise _refuse("CLUSTER SLOTS: a slot range")
        slots += entry[1] - entry[0] + 1
        slot_nodes += (entry[1] - entry[0] + 1) * (len(entry) - 2)
        if slot_nodes > MAX_SLOT_NODES:
            raise _refuse(f"CLUSTER SLOTS: more than {MAX_SLOT_NODES // CLUSTER_SLOTS} nodes "
                          "per slot")
        for node in entry[2:]:
            if not (isinstance(node, list) and len(node) >= 2):
                raise _refuse("CLUSTER SLOTS: a node")
            nodes.add((str(node[0]), str(node[1])))
        if slots > CLUSTER_SLOTS or len(nodes) > MAX_CLUSTER_NODES:
            raise _refuse(f"CLUSTER SLOTS: more than {CLUSTER_SLOTS} slots or "
                          f"{MAX_CLUSTER_NODES} nodes")
    return response


def _check_key_positions(commands: Any, *, subcommands: bool) -> None:
    """Each command's first key, last key and step (its 4th to 6th items), the lists redis-py
    keeps of it (flags, ACL categories, tips, key specifications: the 3rd and 7th to 9th) and
    its subcommands (the 10th, checked the same way one level down: redis-py looks no deeper,
    and a subcommand's own list of them is kept as a list)."""
    most = MAX_COMMANDS if subcommands else MAX_SUBCOMMANDS
    if not isinstance(commands, list) or len(commands) > most:
        raise _refuse(f"COMMAND: more than {most} commands or subcommands of one")
    for command in commands:
        if not (isinstance(command, list) and 6 <= len(command) <= MAX_COMMAND_ITEMS
                and all(type(position) is int and abs(position) <= MAX_KEY_POSITION
                        for position in command[3:6])):
            raise _refuse("COMMAND: key positions")
        kept = [command[2], *command[6:9 if subcommands else 10]]
        if not all(isinstance(items, list | set) and len(items) <= MAX_COMMAND_LIST
                   for items in kept):
            raise _refuse(f"COMMAND: a list of more than {MAX_COMMAND_LIST} items")
        if subcommands and len(command) >= 10:
            _check_key_positions(command[9], subcommands=False)


def _checking_commands(parse: Callable[..., Any] | None) -> Callable[..., Any]:
    """redis-py's callback for ``COMMAND`` (``parse``), run once the key positions are checked."""
    def checked(response: Any, **options: Any) -> Any:
        _check_key_positions(response, subcommands=True)
        return response if parse is None else parse(response, **options)
    return checked


class CappedRedisCluster(redis.asyncio.cluster.RedisCluster):
    """redis-py's asyncio cluster client, its nodes' replies read through
    :class:`reply_cap.CappedClusterParser` and its topology read and checked as the module's
    docstring says."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        capped = {"parser_class": reply_cap.CappedClusterParser}
        self.get_connection_kwargs().update(capped)  # the nodes found from now on
        for node in self.nodes_manager.startup_nodes.values():
            node.connection_kwargs.update(capped)
        # The nodes' callbacks are this dict: they check what the nodes answer.
        self.set_response_callback("CLUSTER SLOTS", checked_slots)
        self.set_response_callback(
            "COMMAND", _checking_commands(self.response_callbacks.get("COMMAND")))

    async def initialize(self, *args: Any, **kwargs: Any) -> CappedRedisCluster:
        read = reply_cap.start(reply_cap.TOPOLOGY_CAP, apart=True)
        try:
            await super().initialize(*args, **kwargs)
        finally:
            reply_cap.end(read)
        return self


def connect(url: str) -> Any:
    """An asyncio client for ``url`` (:func:`antre.connection.connect_async`), every reply of
    every connection it opens read through :mod:`reply_cap`."""
    if connection.is_cluster_url(url):
        return connection.connect_async(url, cluster_class=CappedRedisCluster)
    client = connection.connect_async(url, parser_class=reply_cap.CappedHiredisParser)
    if sentinel_urls.is_sentinel_url(url):
        assert isinstance(client, sentinel.AsyncSentinelRedis) and client.sentinels is not None
        for sentinel_client in client.sentinels.sentinels:
            sentinel_client.connection_pool.connection_kwargs["parser_class"] = (
                reply_cap.CappedSentinelParser)
    return client
