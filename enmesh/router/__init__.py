"""enmesh-router: an AMQP 1.0 router for the compiled qdrouterd.conf (DESIGN.md, "The router")."""
