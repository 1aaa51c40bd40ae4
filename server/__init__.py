"""``memq serve``: the client's operations over HTTP, for agents on other hosts.

:func:`~memq.server.app.create_app` builds the FastAPI application; the CLI
(``memq serve``) resolves the tokens and each role's Redis credentials and runs it under
uvicorn. :class:`~memq.producers.remote.RemoteMemoryClient` is its Python client.
"""
