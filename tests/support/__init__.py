"""Test infrastructure for enmesh: free ports, a throw-away PKI, Cyrus sasldb files and a
real, private RabbitMQ node.

Everything here listens on 127.0.0.1 only and every process it starts is stopped when the
owning context manager or fixture exits, also on failure. Fixtures live in
`tests.support.fixtures` so a conftest can re-export them.
"""
