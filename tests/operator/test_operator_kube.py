"""The operator's Kubernetes client logs in the ways a kubeconfig can: client certificate (as kind's
admin user), bearer token, basic auth; checked against a local HTTPS server that demands a client
certificate. One self-signed certificate (SAN 127.0.0.1, test-only) plays server and client."""

import asyncio
import socket
import ssl
from pathlib import Path

import aiohttp
import kopf
import pytest
from aiohttp import web

from odradek.operator.kube import KubeClient

DATA = Path(__file__).parent / "data"
CERT, KEY = DATA / "client-cert.pem", DATA / "client-key.pem"


async def serve(handler):
    """An HTTPS server on 127.0.0.1 that requires a client certificate signed by CERT."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(CERT))
    context.load_cert_chain(str(CERT), str(KEY))
    context.verify_mode = ssl.CERT_REQUIRED
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/configmaps/{name}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock, ssl_context=context).start()
    return runner, f"https://127.0.0.1:{sock.getsockname()[1]}"


async def echo(request):
    return web.json_response({"metadata": {"name": request.match_info["name"]},
                              "auth": request.headers.get("Authorization")})


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


@pytest.mark.parametrize("inline", [True, False], ids=["certificate-data", "certificate-path"])
def test_client_certificate_login(inline):
    async def main():
        runner, server = await serve(echo)
        try:
            if inline:
                info = kopf.ConnectionInfo(server=server, ca_data=CERT.read_bytes(),
                                           certificate_data=CERT.read_bytes(), private_key_data=KEY.read_bytes())
            else:
                info = kopf.ConnectionInfo(server=server, ca_path=str(CERT),
                                           certificate_path=str(CERT), private_key_path=str(KEY))
            client = KubeClient.from_connection(info)
            try:
                return await client.get("ConfigMap", "ns", "cm")
            finally:
                await client.close()
        finally:
            await runner.cleanup()

    assert run(main()) == {"metadata": {"name": "cm"}, "auth": None}


def test_without_a_client_certificate_the_server_refuses():
    async def main():
        runner, server = await serve(echo)
        try:
            client = KubeClient.from_connection(kopf.ConnectionInfo(server=server, ca_data=CERT.read_bytes()))
            try:
                await client.get("ConfigMap", "ns", "cm")
            finally:
                await client.close()
        finally:
            await runner.cleanup()

    with pytest.raises(aiohttp.ClientError):  # refused in the TLS handshake, not by an HTTP status
        run(main())


@pytest.mark.parametrize("info, expected", [
    (dict(token="abc"), "Bearer abc"),
    (dict(token="abc", scheme="Token"), "Token abc"),
    (dict(username="u", password="p"), "Basic dTpw"),
], ids=["bearer", "scheme", "basic"])
def test_authorization_header(info, expected):
    async def main():
        runner, server = await serve(echo)
        try:
            client = KubeClient.from_connection(kopf.ConnectionInfo(
                server=server, ca_data=CERT.read_bytes(), certificate_data=CERT.read_bytes(),
                private_key_data=KEY.read_bytes(), **info))
            try:
                return await client.get("ConfigMap", "ns", "cm")
            finally:
                await client.close()
        finally:
            await runner.cleanup()

    assert run(main())["auth"] == expected
