"""A real S3-compatible server for the tests: moto's server mode on 127.0.0.1, its answers shaped.

`ShapedMotoServer` is moto's own `ThreadedMotoServer` whose WSGI application is wrapped so that the tests
can see concurrency: the `Shaping` of `remote_server` (a delay before each answer, a cap on each
connection's bandwidth, the most requests in flight, a gate), and `Counters` of requests and body bytes
by path, as the range server keeps them. s3fs talks to it as to S3 (signed requests, ranged GETs, ETags).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server

from tests.support.remote_server import Counters, Shaping


class _Shaped:
    """WSGI middleware: each request enters the shaping, its body leaves through it and is counted."""

    def __init__(self, app: Any, shaping: Shaping, counters: Counters) -> None:
        self.app, self.shaping, self.counters = app, shaping, counters

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "") + ("?" + environ["QUERY_STRING"] if environ.get("QUERY_STRING") else "")
        client = (environ.get("REMOTE_ADDR"), environ.get("REMOTE_PORT"))
        self.shaping.enter(path)

        def start(status: str, headers: list[tuple[str, str]], *args: Any) -> Any:
            # moto names its server ('amazon.com') and werkzeug names itself too: a client that checks its
            # headers strictly (aiohttp's own parser, under `python -X dev`) refuses the second 'Server'.
            return start_response(status, [(k, v) for k, v in headers if k.lower() != "server"], *args)

        try:
            body = self.app(environ, start)
        except BaseException:
            self.shaping.leave()
            raise
        self.counters.add(path, 0, client)
        return self._through(body, path)

    def _through(self, body: Iterable[bytes], path: str) -> Iterator[bytes]:
        try:
            for chunk in body:
                for piece in self.shaping.pieces(chunk):
                    self.counters.add_bytes(len(piece), path)
                    yield piece
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            self.shaping.leave()


class ShapedMotoServer(ThreadedMotoServer):
    """moto's threaded server on 127.0.0.1 (a free port), every answer shaped and counted."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        super().__init__(ip_address="127.0.0.1", port=port, verbose=False)
        self.shaping = Shaping()
        self.counters = Counters()

    def _server_entry(self) -> None:  # moto's own, with the application wrapped
        app = _Shaped(DomainDispatcherApplication(create_backend_app), self.shaping, self.counters)
        self._server = make_server(self._ip_address, self._port, app, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()

    @property
    def endpoint(self) -> str:
        host, port = self.get_host_and_port()
        return f"http://{host}:{port}"

    def stop(self) -> None:
        if self.shaping.blocked is not None:
            self.shaping.blocked.set()
        super().stop()
