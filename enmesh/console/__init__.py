"""enmesh-console: a web UI over the control plane (docs/console.md).

`mesh` talks to the routers (SASL login check, AMQP management reads and the one write a
console makes there, closing a connection), `runtime` proposes and applies changes to the
runtime part of the model through `enmesh apply`, `sessions` keeps logins server-side,
`app` serves the pages (Starlette + Jinja2 under uvicorn), `main` is the command.
"""
