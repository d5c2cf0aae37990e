"""The report's server answers only its own address, and inspect on a run it cannot write to
is one line."""

from __future__ import annotations

import http.client
import os
import shutil
import threading

import pytest

from cairn.cli import main
from cairn.report.html import allowed_host, serve


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("127.0.0.1:8765", True),
        ("localhost:8765", True),
        ("[::1]:8765", True),
        ("evil.example:8765", False),  # DNS rebinding: a foreign name on our address
        ("127.0.0.1:8766", False),
        ("127.0.0.1.evil.example:8765", False),
        ("localhost", False),
        ("", False),
        (None, False),
    ],
)
def test_allowed_host(host, ok):
    assert allowed_host(host, 8765) is ok


def test_serve_refuses_a_foreign_host_header(tmp_path):
    page = tmp_path / "r.html"
    page.write_text("<html>hello</html>")
    got: dict = {}
    started = threading.Event()

    def ready(url, server):
        got.update(server=server)
        started.set()

    th = threading.Thread(target=serve, args=(page,), kwargs={"ready": ready}, daemon=True)
    th.start()
    assert started.wait(10)
    port = got["server"].server_address[1]
    try:
        for host, status in [(f"127.0.0.1:{port}", 200), (f"localhost:{port}", 200),
                             (f"evil.example:{port}", 400)]:  # fmt: skip
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.putrequest("GET", "/", skip_host=True)
            conn.putheader("Host", host)
            conn.endheaders()
            response = conn.getresponse()
            body = response.read()
            conn.close()
            assert response.status == status, (host, response.status)
            assert (b"hello" in body) is (status == 200)  # the old server: 200 for any Host
    finally:
        got["server"].shutdown()
        th.join(5)


def test_inspect_on_a_run_it_cannot_write_to_is_one_line(tiny_run, tmp_path, capsys, monkeypatch):
    import cairn.report.html as html

    run = tmp_path / "run"
    shutil.copytree(tiny_run[0], run)

    def read_only(text, path):  # what writing into a read-only folder raises
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(html, "_write", read_only)
    assert main(["inspect", str(run)]) == 2
    out, err = capsys.readouterr()
    lines = [x for x in out.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in out + err, out
    assert "Permission denied" in lines[0] and "--out FILE" in lines[0]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_inspect_on_a_read_only_folder(tiny_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(tiny_run[0], run)
    run.chmod(0o555)
    try:
        assert main(["inspect", str(run)]) == 2
        assert "Permission denied" in capsys.readouterr().out
    finally:
        run.chmod(0o755)
