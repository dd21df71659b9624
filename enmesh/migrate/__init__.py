"""`enmesh migrate`: move a running service from one stack to another (issue 27).

Built: `plan` (what exists where, what would move) and `move-stored` (every stored message
of every queue from the source brokers to the target's, with RabbitMQ's Shovel plugin).
See docs/migrate.md.
"""
