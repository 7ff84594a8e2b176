"""The socket server on TLS listeners, over real loopback sockets: frames, the principal of a
client certificate, file regions streamed through TLS, certificates reloaded for new connections,
and bad input (plaintext on TLS, TLS on plaintext, garbage, truncated and never-finished
handshakes, untrusted and expired client certificates) closed cleanly with one log line."""

import asyncio
import datetime
import logging
import os
import socket
import ssl
import struct

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from odradek.broker.log.local_log import FileRegion
from odradek.common.network.socket_server import SocketServer
from odradek.common.security.channel import ListenerSecurity
from odradek.common.security.principal import SslPrincipalMapper
from odradek.common.security.reload import ReloadingSslContext
from odradek.common.security.ssl_factory import SslConfig, server_context
from odradek.dev.security import CertificateAuthority


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority.create("tls test CA")
    (d / "ca.pem").write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    ca.write_keystore(d / "server.pem", "server")
    ca.write_keystore(d / "alice.pem", "alice", organizational_unit="ServiceUsers")
    past = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=10)
    ca.write_keystore(d / "expired.pem", "old", not_before=past, validity=datetime.timedelta(days=1))
    other = CertificateAuthority.create("someone else's CA")
    other.write_keystore(d / "stranger.pem", "stranger")
    return ca, d


def _security(d, client_auth="none", timeout=5.0):
    config = SslConfig.from_values({"ssl.keystore.location": str(d / "server.pem"),
                                    "ssl.truststore.location": str(d / "ca.pem"), "ssl.client.auth": client_auth,
                                    "ssl.principal.mapping.rules": "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT"})
    holder = ReloadingSslContext(config, server_context, "test")
    return holder, ListenerSecurity("SSL", holder.current, SslPrincipalMapper(config.principal_mapping_rules), timeout)


def _client_context(d, keystore=None):
    context = ssl.create_default_context(cafile=str(d / "ca.pem"))
    if keystore is not None:
        context.load_cert_chain(str(keystore))
    return context


class _TlsClient:
    def __init__(self, port, context, server_hostname="localhost"):
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock = context.wrap_socket(raw, server_hostname=server_hostname)

    def send_frame(self, body: bytes):
        self.sock.sendall(struct.pack(">i", len(body)) + body)

    def recv_exact(self, n):
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise EOFError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        (n,) = struct.unpack(">i", self.recv_exact(4))
        return self.recv_exact(n)


def _closed(sock, timeout=5.0) -> bool:
    """The server closed `sock` (EOF or reset) within `timeout`."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except (ConnectionResetError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def _run(security, handler, client_fn, *, plaintext=False):
    async def main():
        server = SocketServer("127.0.0.1", 0, handler, 1 << 20, listener="SSL",
                              **({} if plaintext else {"security": security}))
        port = await server.start()
        try:
            return await asyncio.wait_for(asyncio.to_thread(client_fn, port, server), 30)
        finally:
            await server.stop()

    return asyncio.run(main())


async def _whoami(frame, conn):
    text = f"{conn.security_protocol} {conn.listener} {conn.principal} {bytes(frame).decode()}".encode()
    return [struct.pack(">i", len(text)), text]


def test_frames_over_tls_and_the_anonymous_principal(pki):
    _, d = pki
    _, security = _security(d)

    def client(port, server):
        c = _TlsClient(port, _client_context(d))
        c.send_frame(b"hello")
        first = c.recv_frame()
        c.send_frame(b"again")
        return first, c.recv_frame()

    assert _run(security, _whoami, client) == (b"SSL SSL User:ANONYMOUS hello", b"SSL SSL User:ANONYMOUS again")


def test_client_certificate_principal_is_mapped(pki):
    _, d = pki
    _, security = _security(d, "required")

    def client(port, server):
        c = _TlsClient(port, _client_context(d, d / "alice.pem"))
        c.send_frame(b"x")
        return c.recv_frame()

    assert _run(security, _whoami, client) == b"SSL SSL User:alice x"


def test_file_regions_stream_through_tls(pki, tmp_path):
    _, d = pki
    _, security = _security(d)
    payload = os.urandom(3 * 1024 * 1024 + 17)
    path = tmp_path / "segment"
    path.write_bytes(payload)
    f = open(path, "rb")

    async def handler(frame, conn):
        region = FileRegion(f, 5, len(payload) - 5)
        return [struct.pack(">i", region.size + 1), b"!", region]

    def client(port, server):
        c = _TlsClient(port, _client_context(d))
        c.send_frame(b"fetch")
        return c.recv_frame()

    try:
        assert _run(security, handler, client) == b"!" + payload[5:]
    finally:
        f.close()


def test_new_connections_get_a_reloaded_certificate(pki):
    ca, d = pki
    holder, security = _security(d)

    def serial(c):
        return x509.load_der_x509_certificate(c.sock.getpeercert(binary_form=True)).serial_number

    def client(port, server):
        old = _TlsClient(port, _client_context(d))
        old.send_frame(b"a")
        old.recv_frame()
        before = serial(old)
        ca.write_keystore(d / "server.pem", "server")
        assert holder.check()
        new = _TlsClient(port, _client_context(d))
        new.send_frame(b"b")
        new.recv_frame()
        old.send_frame(b"c")  # the open connection keeps working with its certificate
        return before, serial(new), serial(old), old.recv_frame()

    before, new, old, answer = _run(security, _whoami, client)
    assert new != before and old == before and answer.endswith(b" c")


def _bad_input(d, security, send, caplog):
    """Runs `send(sock)` against a TLS listener; returns (closed, still serving, log lines)."""

    def client(port, server):
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        send(raw)
        closed = _closed(raw, 10)
        raw.close()
        good = _TlsClient(port, _client_context(d))
        good.send_frame(b"ok")
        return closed, good.recv_frame().endswith(b" ok"), len(server.connections)

    with caplog.at_level(logging.WARNING, logger="odradek.common.network.socket_server"):
        closed, serving, _ = _run(security, _whoami, client)
    lines = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    return closed, serving, lines


@pytest.mark.parametrize(("name", "data"), [
    ("plaintext Kafka request", struct.pack(">ihhi", 10, 18, 3, 1) + b"\0\0"),
    ("garbage", bytes(range(256)) * 4),
    ("truncated ClientHello", bytes.fromhex("16030100c8010000c40303") + os.urandom(20)),
])
def test_bad_handshakes_close_with_one_line(pki, caplog, name, data):
    _, d = pki

    def send(raw):
        raw.sendall(data)
        if name.startswith("truncated"):
            raw.shutdown(socket.SHUT_WR)

    closed, serving, lines = _bad_input(d, _security(d, timeout=2.0)[1], send, caplog)
    assert closed and serving
    assert len(lines) == 1, lines


def test_a_handshake_that_never_completes_is_closed_within_the_timeout(pki, caplog):
    _, d = pki
    closed, serving, lines = _bad_input(d, _security(d, timeout=0.5)[1], lambda raw: None, caplog)
    assert closed and serving
    assert lines and "not completed in time" in lines[0]


@pytest.mark.parametrize("keystore", ["stranger.pem", "expired.pem"])
def test_untrusted_and_expired_client_certificates_are_refused(pki, caplog, keystore):
    _, d = pki
    _, security = _security(d, "required")

    def client(port, server):
        try:
            c = _TlsClient(port, _client_context(d, d / keystore))
            c.send_frame(b"x")  # TLS 1.3: the server's verdict arrives after the client's handshake
            c.recv_frame()
        except (ssl.SSLError, ConnectionError, EOFError, OSError):
            pass
        else:
            return "served"
        good = _TlsClient(port, _client_context(d, d / "alice.pem"))
        good.send_frame(b"ok")
        return good.recv_frame()

    with caplog.at_level(logging.WARNING, logger="odradek.common.network.socket_server"):
        assert _run(security, _whoami, client) == b"SSL SSL User:alice ok"
    reasons = [r.getMessage() for r in caplog.records if "TLS handshake failed" in r.getMessage()]
    assert len(reasons) == 1 and "CERTIFICATE" in reasons[0].upper(), reasons


def test_tls_client_on_a_plaintext_listener_is_closed_with_a_hint(pki, caplog):
    _, d = pki

    def client(port, server):
        raw = socket.create_connection(("127.0.0.1", port), timeout=5)
        context = _client_context(d)
        try:
            tls = context.wrap_socket(raw, server_hostname="localhost")
            tls.close()
        except (ssl.SSLError, ConnectionError, OSError):
            pass
        return True

    with caplog.at_level(logging.WARNING, logger="odradek.common.network.socket_server"):
        _run(None, _whoami, client, plaintext=True)
    assert any("TLS client on a plaintext listener" in r.getMessage() for r in caplog.records)
