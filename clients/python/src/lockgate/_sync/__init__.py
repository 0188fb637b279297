# Written by scripts/unasync.py from lockgate/_async/__init__.py: edit that file, not this one.
"""The client: the gateway and its plain leases (`gateway`), streamed locks
(`lock`), watching and elections (`watch`)."""
