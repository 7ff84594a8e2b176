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

from odradek.operator.kube import ApiError, KubeClient

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


def get_configmap(**login) -> dict:
    """GET a ConfigMap from the local server through a KubeClient logged in with `login`
    (kopf.ConnectionInfo fields; the server's address is filled in)."""
    async def main():
        runner, server = await serve(echo)
        try:
            client = KubeClient.from_connection(kopf.ConnectionInfo(server=server, **login))
            try:
                return await client.get("ConfigMap", "ns", "cm")
            finally:
                await client.close()
        finally:
            await runner.cleanup()

    return asyncio.run(asyncio.wait_for(main(), 20))


INLINE_CERT = dict(ca_data=CERT.read_bytes(), certificate_data=CERT.read_bytes(), private_key_data=KEY.read_bytes())


@pytest.mark.parametrize("login", [
    INLINE_CERT,
    dict(ca_path=str(CERT), certificate_path=str(CERT), private_key_path=str(KEY)),
], ids=["certificate-data", "certificate-path"])
def test_client_certificate_login(login):
    assert get_configmap(**login) == {"metadata": {"name": "cm"}, "auth": None}


def test_without_a_client_certificate_the_server_refuses():
    with pytest.raises(aiohttp.ClientError):  # refused in the TLS handshake, not by an HTTP status
        get_configmap(ca_data=CERT.read_bytes())


@pytest.mark.parametrize(("login", "expected"), [
    (dict(token="abc"), "Bearer abc"),
    (dict(token="abc", scheme="Token"), "Token abc"),
    (dict(username="u", password="p"), "Basic dTpw"),
], ids=["bearer", "scheme", "basic"])
def test_authorization_header(login, expected):
    assert get_configmap(**INLINE_CERT, **login)["auth"] == expected


def test_an_expired_token_is_read_again_once():
    """A bound service-account token expires: on 401 the client logs in again (the kubelet has
    rotated the file) and repeats the call once; a 401 with the same credentials is an error."""
    logins = []

    def relogin():
        logins.append("new")
        return kopf.ConnectionInfo(server=server_url[0], token="new", **INLINE_CERT)

    server_url = []

    async def only_new(request):
        if request.headers.get("Authorization") != "Bearer new":
            return web.json_response({"reason": "Unauthorized", "message": "token expired"}, status=401)
        return await echo(request)

    async def main():
        runner, server = await serve(only_new)
        server_url.append(server)
        try:
            client = KubeClient.from_connection(
                kopf.ConnectionInfo(server=server, token="old", **INLINE_CERT), relogin=relogin)
            try:
                first = await client.get("ConfigMap", "ns", "cm")
                again = await client.get("ConfigMap", "ns", "cm")  # the new token is kept
            finally:
                await client.close()
            stale = KubeClient.from_connection(kopf.ConnectionInfo(server=server, token="old", **INLINE_CERT),
                                               relogin=lambda: kopf.ConnectionInfo(server=server, token="old"))
            try:
                with pytest.raises(ApiError) as refused:
                    await stale.get("ConfigMap", "ns", "cm")
            finally:
                await stale.close()
            return first, again, refused.value.status
        finally:
            await runner.cleanup()

    first, again, status = asyncio.run(asyncio.wait_for(main(), 20))
    assert first["auth"] == again["auth"] == "Bearer new" and status == 401
    assert logins == ["new"], "logged in again once, not per call"
