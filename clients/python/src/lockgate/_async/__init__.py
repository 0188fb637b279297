# The source of both clients: scripts/unasync.py writes the sync one (lockgate/_sync/) from it.
"""The client: the gateway and its plain leases (`gateway`), streamed locks
(`lock`), watching and elections (`watch`)."""
