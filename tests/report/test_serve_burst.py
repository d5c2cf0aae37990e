"""`inspect --serve` answers a burst of concurrent connections: the socketserver default
accept backlog (5) dropped connects, whose SYN retries left 13-18 of 200 requests
unanswered after 40 s; the server queues 1024 and runs at most 64 handlers at once."""

from __future__ import annotations

import selectors
import socket
import threading
import time

from cairn.report import html
from cairn.report.html import serve


def _burst(port: int, n: int, seconds: float) -> int:
    """Connect ``n`` sockets at once, send a GET on each, return how many got the page."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    request = f"GET / HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_WRITE)
    got = dict.fromkeys(socks, 0)
    done = set()
    deadline = time.monotonic() + seconds
    while len(done) < n and time.monotonic() < deadline:
        for key, events in sel.select(timeout=0.2):
            s = key.fileobj
            if events & selectors.EVENT_WRITE:
                try:
                    s.send(request)
                except OSError:
                    continue
                sel.modify(s, selectors.EVENT_READ)
                continue
            try:
                data = s.recv(1 << 16)
            except OSError:
                data = b""
            got[s] += len(data)
            if not data:
                done.add(s)
                sel.unregister(s)
    for s in socks:
        s.close()
    return sum(1 for s in done if got[s] > 100_000)


def test_two_hundred_concurrent_requests_are_all_answered(tmp_path):
    page = tmp_path / "report.html"
    page.write_bytes(b"<html>" + b"x" * 200_000 + b"</html>")
    box: dict = {}
    thread = threading.Thread(
        target=serve,
        args=(page, 0),
        kwargs={"seconds": 60, "ready": lambda url, server: box.update(server=server)},
        daemon=True,
    )
    thread.start()
    while "server" not in box:
        time.sleep(0.01)
    try:
        answered = _burst(box["server"].server_address[1], 200, 8.0)
    finally:
        box["server"].shutdown()
    assert answered == 200  # old server: 81 of 200 within 10 s here
    assert box["server"].request_queue_size == html.BACKLOG


def test_silent_connections_time_out_and_free_their_handlers(tmp_path, monkeypatch):
    monkeypatch.setattr(html, "MAX_HANDLERS", 4)
    monkeypatch.setattr(html, "REQUEST_TIMEOUT_S", 1.0)
    page = tmp_path / "report.html"
    page.write_bytes(b"<html>" + b"x" * 200_000 + b"</html>")
    box: dict = {}
    ready = lambda url, server: box.update(server=server)  # noqa: E731
    threading.Thread(
        target=serve, args=(page, 0), kwargs={"seconds": 30, "ready": ready}, daemon=True
    ).start()
    while "server" not in box:
        time.sleep(0.01)
    port = box["server"].server_address[1]
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(6)]  # all handlers
    try:
        start = time.monotonic()
        answered = _burst(port, 1, 6.0)  # waits in the backlog until a silent one times out
        took = time.monotonic() - start
    finally:
        for s in silent:
            s.close()
        box["server"].shutdown()
    assert answered == 1 and took < 5.0
