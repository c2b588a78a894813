"""Hostile servers and URLs (issue 24, findings 7-12): tokens in TLS errors, dripping servers, ranges
answered for other bytes, URLs that reach local files, endless downloads.

Every server here listens on 127.0.0.1 and sends a bounded number of bytes: a client without the fix
sees the connection end (and the test fails on its message) instead of waiting forever.
"""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
import torch

from ckptview.cli import main
from ckptview.core.errors import RemoteError
from ckptview.core.read.open import open_checkpoint
from ckptview.core.read.values.reading import read_values
from tests.support.hostile_server import RawServer, drip, endless, garbage
from tests.support.remote_server import RangeServer

pytest.importorskip("fsspec")
pytest.importorskip("requests")

SECRET = "hf_S3CRETtoken"


@pytest.fixture(autouse=True)
def _settings(monkeypatch):
    """The environment gives defaults to the flags below (cli.py reads it): each test starts without them."""
    for name in ("CKPTVIEW_DOWNLOAD", "CKPTVIEW_MAX_DOWNLOAD", "CKPTVIEW_DEADLINE", "CKPTVIEW_TIMEOUT"):
        monkeypatch.setenv(name, "")  # recorded, so the environment is as it was after the test
        monkeypatch.delenv(name)


@pytest.fixture
def raw_server():
    servers: list[RawServer] = []

    def start(answer) -> RawServer:
        servers.append(RawServer(answer))
        return servers[-1]

    yield start
    for srv in servers:
        srv.stop()


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


# ------------------------------------------------------------------------------------- 7: redaction
# The shapes urllib3 and requests print (a bare path with its query string after 'url:', a request
# line, a proxy URL with credentials); each must lose the query string and the userinfo.
URLLIB3_SHAPES = [
    "HTTPSConnectionPool(host='bucket.example', port=443): Max retries exceeded with url: "
    f"/m.pt?X-Amz-Credential=AKIA%2F1&X-Amz-Signature={SECRET} (Caused by SSLError(SSLError(1, "
    "'[SSL: WRONG_VERSION_NUMBER] wrong version number (_ssl.c:1000)')))",
    "HTTPSConnectionPool(host='h', port=8443): Max retries exceeded with url: "
    f"/a/b.safetensors?token={SECRET} (Caused by SSLError(SSLCertVerificationError(1, '[SSL: "
    "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate (_ssl.c:1000)')))",
    f"HTTPConnectionPool(host='h', port=80): Read timed out. (read timeout=30) url=/x.pt?sig={SECRET}",
    f"('Connection aborted.', RemoteDisconnected('Remote end closed connection')) GET /m.pt?{SECRET} HTTP/1.1",
    f"Unable to connect to proxy http://user:{SECRET}@proxy.example:3128/",
    f"ProxyError('Unable to connect to proxy', OSError('Tunnel connection failed: 407')) //u:{SECRET}@p:1",
    f"cannot read https://host/m.pt: 'url: /m.pt?a=1&b={SECRET}'",
    f"cannot read https://host/m.pt?x={SECRET}#frag and s3://b/k?versionId={SECRET}",
]


@pytest.mark.parametrize("text", URLLIB3_SHAPES)
def test_redaction_removes_query_strings_and_userinfo_wherever_they_are(text):
    from ckptview.core.redaction import redact

    out = redact(text)
    assert SECRET not in out, out
    assert "user:" not in out and "u:" not in out


def test_redaction_keeps_ordinary_text():
    from ckptview.core.redaction import redact

    for text in ("not a checkpoint: file is 812 bytes of text", "is this a checkpoint? no",
                 "storage 'data/7' missing", "cannot open https://host/model.pt: not found (HTTP 404)",
                 "https://host/m.pt ended after 10 of 20 bytes of a 20-byte range (connection cut?)",
                 "a question mark in brackets [cut?] or at the end?"):
        assert redact(text) == text


def test_a_query_after_closing_brackets_is_still_a_query():
    from ckptview.core.redaction import redact

    for text in (f"https://h/m.pt?){SECRET}", f"(url: /m.pt?]x={SECRET})", f"/m.pt?)sig={SECRET} failed"):
        assert SECRET not in redact(text), redact(text)


def test_a_failed_tls_handshake_does_not_show_the_token(raw_server, capsys):
    srv = raw_server(garbage)
    url = srv.url.replace("http://", "https://") + "/model.pt"
    assert main(["info", f"{url}?X-Amz-Signature={SECRET}"]) == 2
    err = _err(capsys)
    assert SECRET not in err and url in err and "TLS failed" in err, err


def test_every_remote_error_is_redacted_when_it_is_made():
    err = RemoteError(f"cannot read https://u:pw@host/m.pt: url: /m.pt?token={SECRET}")
    assert SECRET not in str(err) and "pw@" not in str(err)


# ------------------------------------------------------------------------------- 8: the deadline
DRIP_ANSWER = (b"HTTP/1.1 206 Partial Content\r\nContent-Type: application/octet-stream\r\n"
               b"Content-Range: bytes 0-65535/1600000\r\nContent-Length: 65536\r\n\r\n") + b"\0" * 65536


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_dripping_server_is_stopped_by_the_deadline(raw_server, monkeypatch, capsys, where):
    # The per-read timeout never fires (a byte arrives every 50 ms): only an overall deadline ends it.
    at = 20 if where == "headers" else DRIP_ANSWER.index(b"\r\n\r\n") + 4
    srv = raw_server(drip(DRIP_ANSWER, step=0.05, at=at, most=600))
    monkeypatch.setenv("CKPTVIEW_TIMEOUT", "60")
    url = f"{srv.url}/model.safetensors"
    assert main(["info", "--deadline", "0.5", url]) == 2
    err = _err(capsys)
    assert url in err and "no complete answer within" in err and "--deadline" in err, err


def test_a_requests_deadline_cuts_only_its_own_connection(raw_server):
    """Two threads reading one remote file at once (the window's workers): the deadline travels with each
    request, so one request's deadline expiring never cuts the other's connection, and never applies to it."""
    from ckptview.core.read.bytes.remote.cache import Transfer
    from ckptview.core.read.bytes.remote.deadline import Deadline
    from ckptview.core.read.bytes.remote.http import HttpBackend
    from ckptview.core.read.bytes.remote.options import RemoteOptions
    from tests.support.hostile_server import read_request

    ok = (b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-15/16\r\nContent-Length: 16\r\n\r\n"
          + bytes(range(16)))
    first_in, first_cut = threading.Event(), threading.Event()
    order: list[int] = []

    def answer(conn, server) -> None:
        order.append(len(order))
        if order[-1] == 0:  # the short deadline's request: headers drip until it is cut (or 20 s)
            read_request(conn)
            conn.sendall(DRIP_ANSWER[:20])
            first_in.set()
            for i in range(20, 420):
                if server.wait(0.05):
                    return
                conn.sendall(DRIP_ANSWER[i : i + 1])
        else:  # the other request: answered in full once the first was cut
            read_request(conn)
            first_cut.wait(20)
            conn.sendall(ok)

    srv = raw_server(answer)
    backend = HttpBackend(f"{srv.url}/model.safetensors", Transfer(), RemoteOptions())
    outcome: dict[str, object] = {}

    def short() -> None:
        with Deadline(0.3) as limit:
            try:
                backend._body(backend._get({"Range": "bytes=0-15"}, limit), 16)
                outcome["short"] = "answered"
            except RemoteError:  # its connection cut: the headers it had, no body
                outcome["short"] = "cut" if limit.passed() else "failed before its deadline"
        first_cut.set()

    def long() -> None:
        with Deadline(60) as limit:
            resp = backend._get({"Range": "bytes=0-15"}, limit)
            outcome["long"] = backend._body(resp, 16)

    a = threading.Thread(target=short)
    a.start()
    assert first_in.wait(20)
    b = threading.Thread(target=long)  # in flight, on its own connection, while the first one's deadline fires
    b.start()
    a.join(30)
    b.join(30)
    assert outcome["short"] == "cut", outcome  # by its own deadline
    assert outcome["long"] == bytes(range(16)), outcome  # untouched by the other's
    backend.close()


def test_a_dripping_tls_handshake_is_stopped_by_the_deadline(raw_server, monkeypatch, capsys):
    def tls_drip(conn, server) -> None:
        conn.recv(4096)  # the client hello
        for byte in b"\x16\x03\x03\x40\x00" + b"\x02" * 600:  # a record header, then its body slowly
            if server.wait(0.05):
                return
            conn.sendall(bytes([byte]))

    srv = raw_server(tls_drip)
    monkeypatch.setenv("CKPTVIEW_TIMEOUT", "60")
    url = srv.url.replace("http://", "https://") + "/m.pt"
    assert main(["info", "--deadline", "0.5", url]) == 2
    err = _err(capsys)
    assert url in err and "no complete answer within" in err, err


def test_the_deadline_is_read_from_the_environment(raw_server, monkeypatch, capsys):
    srv = raw_server(drip(DRIP_ANSWER, step=0.05, at=10, most=600))
    monkeypatch.setenv("CKPTVIEW_TIMEOUT", "60")
    monkeypatch.setenv("CKPTVIEW_DEADLINE", "0.5")
    assert main(["info", f"{srv.url}/m.pt"]) == 2
    assert "no complete answer within" in _err(capsys)


def test_a_bad_deadline_is_one_line(capsys):
    assert main(["info", "--deadline", "soon", "https://example.invalid/m.pt"]) == 2
    assert "--deadline" in _err(capsys)


def test_an_fsspec_protocol_that_never_answers_is_stopped_by_the_deadline(tmp_path, monkeypatch, capsys):
    # hf:// and the other synchronous fsspec protocols cannot be interrupted from outside: the caller
    # stops waiting at the deadline (memory:// stands in for them, its info() blocked until released).
    import fsspec
    from fsspec.implementations.memory import MemoryFileSystem

    torch.save({"w": torch.arange(4.0)}, tmp_path / "m.pt")
    fsspec.filesystem("memory").pipe("/stuck/m.pt", (tmp_path / "m.pt").read_bytes())
    release = threading.Event()
    real_info = MemoryFileSystem.info

    def stuck_info(self, path, **kwargs):
        release.wait(60)
        return real_info(self, path, **kwargs)

    monkeypatch.setattr(MemoryFileSystem, "info", stuck_info)
    monkeypatch.setenv("CKPTVIEW_DEADLINE", "0.3")
    try:
        assert main(["info", "memory://stuck/m.pt"]) == 2
        err = _err(capsys)
        assert "memory://stuck/m.pt" in err and "no complete answer within" in err, err
    finally:
        release.set()
        fsspec.filesystem("memory").rm("/stuck", recursive=True)


# ------------------------------------------------------------------- 9: Content-Range is checked
def _big_safetensors(folder) -> tuple[str, np.ndarray]:
    from safetensors.torch import save_file

    values = torch.arange(400_000, dtype=torch.float32)  # 1.6 MB: values read by a request of their own
    save_file({"v": values}, str(folder / "v.safetensors"))
    return "v.safetensors", values.numpy()


def test_a_206_for_another_range_is_refused_when_values_are_read(tmp_path):
    name, want = _big_safetensors(tmp_path)
    srv = RangeServer(str(tmp_path))
    try:
        ckpt = open_checkpoint(f"{srv.url}/{name}")
        entry = next(iter(ckpt.tensors()))
        np.testing.assert_array_equal(np.asarray(read_values(entry.info)), want)  # honest: same values
        ckpt.close()
        srv.lie = "shift"
        ckpt = open_checkpoint(f"{srv.url}/{name}")
        entry = next(iter(ckpt.tensors()))
        with pytest.raises(RemoteError) as exc:
            read_values(entry.info)
        msg = str(exc.value)
        assert "Content-Range" in msg and f"{srv.url}/{name}" in msg and "\n" not in msg, msg
        ckpt.close()
    finally:
        srv.stop()


def test_a_206_for_another_range_is_refused_at_open(tmp_path, capsys):
    name, _ = _big_safetensors(tmp_path)
    srv = RangeServer(str(tmp_path))
    srv.lie = "shift-all"
    try:
        assert main(["info", f"{srv.url}/{name}"]) == 2
        err = _err(capsys)
        assert "Content-Range" in err and "bytes 8-65543" in err and "bytes 0-65535" in err, err
    finally:
        srv.stop()


@pytest.mark.parametrize("content_range", ["bytes 0-65535/99", "bytes 0-100/1600000", "bytes 1-65536/1600000",
                                           "bytes 0-65535/*", "bytes 0-65535/x"])
def test_a_content_range_that_does_not_match_the_request_is_one_line(raw_server, capsys, content_range):
    answer = (f"HTTP/1.1 206 Partial Content\r\nContent-Range: {content_range}\r\nContent-Length: 65536\r\n\r\n"
              ).encode() + b"\0" * 65536
    srv = raw_server(drip(answer, step=0, at=len(answer)))
    assert main(["info", f"{srv.url}/m.pt"]) == 2
    err = _err(capsys)
    assert "Content-Range" in err, err


# -------------------------------------------------------------- 10, 11: only remote protocols
def test_reference_urls_are_refused(tmp_path, capsys):
    torch.save({"w": torch.arange(4.0)}, tmp_path / "local.pt")
    served = tmp_path / "served"
    served.mkdir()
    (served / "refs.json").write_text(json.dumps({"version": 1, "refs": {"m.pt": [str(tmp_path / "local.pt")]}}))
    srv = RangeServer(str(served))
    try:
        assert main(["info", f"reference://m.pt::{srv.url}/refs.json"]) == 2
        cap = capsys.readouterr()
        assert "w" not in cap.out and "not accepted" in cap.err and "\n" not in cap.err.strip(), cap
        assert srv.counters.requests == 0  # refused before anything is asked of the server
    finally:
        srv.stop()


def _local_archives(tmp_path) -> None:
    import tarfile
    import zipfile

    torch.save({"w": torch.arange(4.0)}, tmp_path / "local.pt")
    with tarfile.open(tmp_path / "a.tar", "w") as tar:
        tar.add(tmp_path / "local.pt", arcname="m.pt")
    with zipfile.ZipFile(tmp_path / "a.zip", "w") as z:
        z.write(tmp_path / "local.pt", "m.pt")


@pytest.mark.parametrize("url", [
    "tar://m.pt::file://{tmp}/a.tar", "zip://m.pt::local://{tmp}/a.zip", "zip://m.pt::file://{tmp}/a.zip",
    "local://{tmp}/local.pt", "simplecache::file://{tmp}/local.pt", "reference://m.pt",
    "filecache::https://example.invalid/m.pt", "dir://{tmp}", "zip://m.pt::https://example.invalid/a.zip",
    "blockcache://{tmp}/local.pt", "libarchive://m.pt::file://{tmp}/a.tar",
])
def test_urls_that_reach_local_files_or_chain_protocols_are_refused(tmp_path, capsys, url):
    _local_archives(tmp_path)
    url = url.format(tmp=tmp_path)
    assert main(["info", url]) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert cap.out == "" and "\n" not in err and "not accepted" in err, err


def test_the_window_and_the_core_refuse_them_too(tmp_path):
    _local_archives(tmp_path)
    with pytest.raises(RemoteError, match="not accepted"):
        open_checkpoint(f"tar://m.pt::file://{tmp_path}/a.tar")


def test_a_chained_url_to_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    done = threading.Event()

    def unblock() -> None:  # without the fix the reader blocks on the FIFO: end it after a while
        if not done.wait(60):
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                return
            os.close(fd)

    helper = threading.Thread(target=unblock, daemon=True)
    helper.start()
    try:
        for url in (f"tar://m.pt::file://{fifo}", f"zip://m.pt::local://{fifo}", f"local://{fifo}"):
            assert main(["info", url]) == 2
            err = _err(capsys)
            assert "not accepted" in err, err
    finally:
        done.set()
        helper.join(70)


def test_memory_and_http_urls_still_open(tmp_path, capsys):
    import fsspec

    torch.save({"w": torch.arange(4.0)}, tmp_path / "m.pt")
    fs = fsspec.filesystem("memory")
    fs.pipe("/hardening/m.pt", (tmp_path / "m.pt").read_bytes())
    srv = RangeServer(str(tmp_path))
    try:
        for url in ("memory://hardening/m.pt", f"{srv.url}/m.pt"):
            assert main(["info", "--json", url]) == 0, capsys.readouterr().err
            assert [t["name"] for t in json.loads(capsys.readouterr().out)["tensors"]] == ["w"]
    finally:
        srv.stop()
        fs.rm("/hardening", recursive=True)


# ------------------------------------------------------------------------ 12: bounded downloads
@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A temporary folder of its own: what a download leaves behind shows up here."""
    import tempfile

    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def test_an_endless_download_stops_at_max_download(raw_server, private_tmp, capsys):
    srv = raw_server(endless(64 << 20))
    url = f"{srv.url}/m.pt"
    assert main(["info", "--download", "--max-download", "1M", url]) == 2
    err = _err(capsys)
    assert url in err and "more than 1048576 bytes" in err and "--max-download" in err, err
    assert os.listdir(private_tmp) == []


def test_a_download_of_unknown_size_needs_max_download(raw_server, private_tmp, capsys):
    srv = raw_server(endless(64 << 20))
    url = f"{srv.url}/m.pt"
    assert main(["info", "--download", url]) == 2
    err = _err(capsys)
    assert url in err and "--max-download" in err and "size" in err, err
    assert os.listdir(private_tmp) == []


def test_a_download_larger_than_max_download_is_refused_before_it_starts(tmp_path, private_tmp, capsys):
    torch.save({"w": torch.randn(300, 300)}, tmp_path / "m.pt")  # ~360 KB
    size = (tmp_path / "m.pt").stat().st_size
    srv = RangeServer(str(tmp_path), honour_range=False)
    try:
        url = f"{srv.url}/m.pt"
        srv.counters.reset()
        assert main(["info", "--download", "--max-download=100K", url]) == 2
        err = _err(capsys)
        assert str(size) in err and "--max-download" in err, err
        assert srv.counters.bytes < 1 << 20
        assert main(["info", "--json", "--download", "--max-download", "10M", url]) == 0
        assert [t["name"] for t in json.loads(capsys.readouterr().out)["tensors"]] == ["w"]
        assert os.listdir(private_tmp) == []
    finally:
        srv.stop()


def test_a_bad_max_download_is_one_line(capsys):
    assert main(["info", "--max-download", "lots", "https://example.invalid/m.pt"]) == 2
    assert "--max-download" in _err(capsys)


def test_a_redirect_to_a_local_file_is_not_followed(raw_server, tmp_path, capsys):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def redirect(conn, server) -> None:
        from tests.support.hostile_server import read_request

        read_request(conn)
        conn.sendall(f"HTTP/1.1 302 Found\r\nLocation: file://{fifo}\r\nContent-Length: 0\r\n\r\n".encode())

    srv = raw_server(redirect)
    assert main(["info", f"{srv.url}/m.pt"]) == 2
    err = _err(capsys)
    assert f"{srv.url}/m.pt" in err, err


def test_which_urls_are_accepted():
    from ckptview.core.read.bytes.files import is_url
    from ckptview.core.read.bytes.remote.urls import check_accepted

    for url in ("https://h/m.pt", "http://[::1]:8000/m.pt", "http://u:p@[fe80::1%25eth0]:80/m.pt?x=1",
                "hf://org/repo/m.safetensors", "s3://bucket/key.pt", "gs://b/k", "memory://x/m.pt"):
        check_accepted(url)
    for url in ("reference://m.pt", "file:///etc/passwd", "local:///etc/passwd", "tar://m::https://h/a.tar",
                "http://h/a::file:///x", "simplecache::https://h/m.pt", "git://repo/m.pt", "dask://h/m.pt"):
        with pytest.raises(RemoteError, match="not accepted"):
            check_accepted(url)
    assert is_url("simplecache::https://h/m.pt") and not is_url("file:///tmp/m.pt") and not is_url("/tmp/a::b")


def test_sizes_and_deadlines_parse():
    from ckptview.core.read.bytes.remote.urls import parse_size

    assert parse_size("1M") == parse_size("1MiB") == parse_size("1 mb") == 1 << 20
    assert parse_size("2G") == 2 << 30 and parse_size("100") == 100 and parse_size("1.5K") == 1536
    for bad in ("", "lots", "-1M", "1X"):
        with pytest.raises(ValueError):
            parse_size(bad)


@pytest.mark.parametrize("exc", [ValueError(f"HTTPSConnectionPool: url: /m.pt?token={SECRET}"),
                                 OSError(5, f"Input/output error reading /m.pt?sig={SECRET}"),
                                 RemoteError(f"cannot read https://h/m.pt: url: /m.pt?token={SECRET}")])
def test_the_command_line_redacts_every_error_of_a_command_given_a_url(monkeypatch, capsys, exc):
    from ckptview.commands import info

    def fail(args):
        raise exc

    monkeypatch.setattr(info, "run", fail)
    assert main(["info", f"https://h/m.pt?token={SECRET}"]) == 2
    err = _err(capsys)
    assert SECRET not in err and err.startswith("ckptview: "), err
