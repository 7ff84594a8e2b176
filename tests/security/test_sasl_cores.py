"""The SASL cores without I/O: SCRAM (RFC 7677's vector), PLAIN, the authenticator's rules, JAAS."""

import base64
import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.sasl_authenticate.v0.request import SaslAuthenticateRequest as AuthV0
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest as AuthV2
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest as HandshakeV1

from odradek.broker.security.authenticator import SaslServerAuthenticator, State
from odradek.broker.security.errors import IllegalSaslStateError, SaslAuthenticationError
from odradek.broker.security.plain_server import PlainServer, users_from_jaas_options
from odradek.broker.security.sasl_settings import listener_settings
from odradek.broker.security.scram_server import ScramServer
from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.security import jaas, scram
from odradek.common.security.sasl_client import PlainClient, SaslClientError, SaslCredentials, ScramClient

SECRET = b"k" * 32

# RFC 7677 section 3
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def store(users: dict[str, tuple[str, int]], mechanism=scram.SCRAM_SHA_256, salt: bytes | None = None):
    creds = {u: mechanism.credential_from_password(p, i, salt) for u, (p, i) in users.items()}
    return lambda user, mech: creds.get(user) if mech == mechanism.name else None


def rfc_server(lookup=None):
    lookup = lookup or store({"user": ("pencil", 4096)}, salt=RFC_SALT)
    return ScramServer(scram.SCRAM_SHA_256, lookup, SECRET, nonce=lambda: RFC_SERVER_NONCE)


def test_rfc7677_vector_server():
    server = rfc_server()
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_rfc7677_vector_client():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first() == RFC_CLIENT_FIRST
    assert client.evaluate(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    assert client.evaluate(RFC_SERVER_FINAL) is None and client.complete


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_client_and_server_agree(mech):
    m = scram.MECHANISMS[mech]
    server = ScramServer(m, store({"al=ice,": ("s3cret", 4096)}, m), SECRET)
    client = ScramClient(mech, "al=ice,", "s3cret")
    final = client.evaluate(server.evaluate(client.first()))
    assert client.evaluate(server.evaluate(final)) is None
    assert client.complete and server.username == "al=ice,"


def exchange_failure(server, client) -> str:
    final = client.evaluate(server.evaluate(client.first()))
    with pytest.raises(SaslAuthenticationError) as e:
        server.evaluate(final)
    return str(e.value)


def test_wrong_password_and_unknown_user_look_alike():
    lookup = store({"alice": ("right", 4096)})
    wrong = ScramServer(scram.SCRAM_SHA_256, lookup, SECRET)
    unknown = ScramServer(scram.SCRAM_SHA_256, lookup, SECRET)
    assert "wrong password" in exchange_failure(wrong, ScramClient("SCRAM-SHA-256", "alice", "wrong"))
    # the unknown user gets a well-formed server-first message (decoy salt, 4096 iterations) ...
    first = ScramServer(scram.SCRAM_SHA_256, lookup, SECRET).evaluate(b"n,,n=mallory,r=abc")
    attrs = dict(scram.attributes(first.decode()))
    assert attrs["i"] == "4096" and len(base64.b64decode(attrs["s"])) == 32
    # ... the same each time (a real user's salt does not change either)
    assert ScramServer(scram.SCRAM_SHA_256, lookup, SECRET).evaluate(b"n,,n=mallory,r=abc").split(b",")[1:] == \
        first.split(b",")[1:]
    assert "unknown user" in exchange_failure(unknown, ScramClient("SCRAM-SHA-256", "mallory", "x"))


def test_wrong_nonce_and_replayed_proof():
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        server.evaluate(RFC_CLIENT_FINAL.replace(b"k0,", b"k1,"))
    # a proof recorded from one exchange, replayed in a new one: the server nonce differs
    replay = ScramServer(scram.SCRAM_SHA_256, store({"user": ("pencil", 4096)}, salt=RFC_SALT), SECRET)
    replay.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError, match="nonce"):
        replay.evaluate(RFC_CLIENT_FINAL)
    # and the final message twice in one exchange is refused
    done = rfc_server()
    done.evaluate(RFC_CLIENT_FIRST)
    done.evaluate(RFC_CLIENT_FINAL)
    with pytest.raises(IllegalSaslStateError):
        done.evaluate(RFC_CLIENT_FINAL)


def test_bad_iteration_counts():
    # a stored credential under 4096 iterations is refused (at the proof, like any failure)
    weak = ScramServer(scram.SCRAM_SHA_256, store({"bob": ("pw", 1000)}), SECRET)
    assert "iterations" in exchange_failure(weak, ScramClient("SCRAM-SHA-256", "bob", "pw"))
    # the client refuses a server asking for fewer than 4096
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first()
    with pytest.raises(SaslClientError, match="iterations"):
        client.evaluate(RFC_SERVER_FIRST.replace(b"i=4096", b"i=1"))


def test_client_refuses_a_server_that_does_not_know_the_password():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first()
    client.evaluate(RFC_SERVER_FIRST)
    with pytest.raises(SaslClientError, match="signature"):
        client.evaluate(b"v=" + base64.b64encode(b"x" * 32))
    other = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    other.first()
    with pytest.raises(SaslClientError, match="nonce"):
        other.evaluate(b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")


@pytest.mark.parametrize("token", [
    b"x" * (scram.MAX_MESSAGE_BYTES + 1),  # oversized
    b"p=tls-unique,,n=user,r=abc",  # channel binding
    b"n,,r=abc,n=user",  # attributes out of order
    b"n,,n=us=er,r=abc",  # bad escape
    b"n,,n=user,r=a,b",  # not name=value
    b"\xff\xfe",  # not UTF-8
])
def test_malformed_client_first(token):
    with pytest.raises(SaslAuthenticationError):
        rfc_server().evaluate(token)


def test_plain():
    users = users_from_jaas_options(jaas.parse(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="a\\"q";').options)
    assert users == {"admin": "admin-secret", "alice": 'a"q'}
    ok = PlainServer(users)
    assert ok.evaluate(PlainClient("alice", 'a"q').first()) == b"" and ok.username == "alice"
    for token in (b"\0alice\0wrong", b"\0nobody\0x", b"\0\0", b"garbage", b"bob\0alice\0a\"q",
                  b"\0alice\0" + b"x" * 5000):
        with pytest.raises(SaslAuthenticationError) as e:
            PlainServer(users).evaluate(token)
        assert b"wrong" not in str(e.value).encode() and 'a"q' not in str(e.value)


def test_jaas_errors_never_quote_values():
    for text in ('Module required password="hunter2"', 'Module maybe password="hunter2";',
                 'Module required password;', 'Module required password="hunter2" x'):
        with pytest.raises(jaas.JaasConfigError) as e:
            jaas.parse(text)
        assert "hunter2" not in str(e.value)


def test_credential_string_is_kafkas():
    c = scram.SCRAM_SHA_512.credential_from_password("pw", 8192, salt=b"salty")
    text = scram.credential_to_string(c)
    assert text.startswith("salt=c2FsdHk=,stored_key=") and text.endswith(",iterations=8192")
    assert scram.credential_from_string(text) == c
    for bad in ("salt=a", "salt=c2FsdHk=,stored_key=AA==,server_key=AA==,iterations=x",
                "salt=!!,stored_key=AA==,server_key=AA==,iterations=1", "garbage"):
        with pytest.raises(ValueError):
            scram.credential_from_string(bad)
    assert scram.sanitize("a b*c~é@x.y") == "a%20b%2Ac%7E%C3%A9%40x.y"
    assert scram.desanitize(scram.sanitize("a b*c~é@x.y")) == "a b*c~é@x.y"


def test_client_credentials_from_properties():
    assert SaslCredentials.from_properties({"security.protocol": "SSL"}) is None
    c = SaslCredentials.from_properties({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas.client_config("SCRAM-SHA-512", "alice", 'p"w')})
    assert (c.mechanism, c.username, c.password) == ("SCRAM-SHA-512", "alice", 'p"w')
    assert "p\"w" not in repr(c)
    c = SaslCredentials.from_properties({"security.protocol": "sasl_plaintext", "sasl.mechanisms": "PLAIN",
                                         "sasl.username": "bob", "sasl.password": "x"})
    assert (c.mechanism, c.username) == ("PLAIN", "bob")
    with pytest.raises(ValueError):
        SaslCredentials.from_properties({"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"})


# --- the authenticator ------------------------------------------------------------------------------


def frame(request, correlation_id: int = 7) -> bytes:
    return wire.encode_request(request, correlation_id, "test")[4:]


def answer(outcome, request):
    assert outcome.response is not None
    body = outcome.response[4:]
    return wire.decode_response(type(request), body)[1]


def authenticator(**kw):
    lookup = store({"alice": ("pw", 4096)}, scram.SCRAM_SHA_512)
    users = {"bob": "pw"}

    def new_server(mech):
        if mech == "PLAIN":
            return PlainServer(users)
        return ScramServer(scram.MECHANISMS[mech], lookup, SECRET)

    kw.setdefault("error_response", None)
    return SaslServerAuthenticator(["PLAIN", "SCRAM-SHA-512"], new_server, **kw)


def scram_login(auth, now=0, password="pw", version=2):
    handshake = HandshakeV1(mechanism="SCRAM-SHA-512")
    assert answer(auth.receive(frame(handshake), now), handshake).error_code == ErrorCode.none
    client = ScramClient("SCRAM-SHA-512", "alice", password)
    cls = AuthV2 if version == 2 else AuthV0
    first = cls(auth_bytes=client.first())
    out = auth.receive(frame(first), now)
    r = answer(out, first)
    final = cls(auth_bytes=client.evaluate(bytes(r.auth_bytes)))
    out = auth.receive(frame(final), now)
    return out, final


def test_scram_login_sets_user_and_session_lifetime():
    auth = authenticator(max_reauth_ms=60_000)
    assert auth.receive(frame(wire.request_schema(ApiKey.API_VERSIONS, 3)(
        client_software_name="x", client_software_version="1")), 0).forward
    out, final = scram_login(auth, now=1000)
    r = answer(out, final)
    assert r.error_code == ErrorCode.none and r.session_lifetime.total_seconds() == 60
    assert auth.authenticated and auth.username == "alice" and auth.session_expires_ms == 61_000
    assert auth.receive(frame(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                              include_topic_authorized_operations=False)), 2000).forward


def test_wrong_password_fails_with_kafkas_message_and_a_delay():
    auth = authenticator()
    out, final = scram_login(auth, password="nope")
    r = answer(out, final)
    assert r.error_code == ErrorCode.sasl_authentication_failed
    assert r.error_message == ("Authentication failed during authentication due to invalid credentials with SASL "
                               "mechanism SCRAM-SHA-512")
    assert out.close and out.delay and "nope" not in (out.reason or "")
    assert auth.receive(frame(HandshakeV1(mechanism="PLAIN")), 0).close


def test_unknown_mechanism():
    auth = authenticator()
    handshake = HandshakeV1(mechanism="GSSAPI")
    out = auth.receive(frame(handshake), 0)
    r = answer(out, handshake)
    assert r.error_code == ErrorCode.unsupported_sasl_mechanism and list(r.mechanisms) == ["PLAIN", "SCRAM-SHA-512"]
    assert out.close and out.delay


def test_requests_before_authentication_close_the_connection():
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    for request in (metadata, AuthV2(auth_bytes=b"\0bob\0pw")):
        out = authenticator().receive(frame(request), 0)
        assert out.close and out.response is None
    assert authenticator().receive(b"\0\x03", 0).close  # truncated header
    big = authenticator(max_receive_size=100)
    assert big.receive(frame(HandshakeV1(mechanism="PLAIN" + "x" * 200)), 0).close


def test_illegal_sasl_state_during_authentication():
    from odradek.broker.kafka_apis import error_response

    auth = authenticator(error_response=error_response)
    handshake = HandshakeV1(mechanism="PLAIN")
    auth.receive(frame(handshake), 0)
    again = HandshakeV1(mechanism="PLAIN")
    out = auth.receive(frame(again), 0)
    assert answer(out, again).error_code == ErrorCode.illegal_sasl_state and out.close


def test_handshake_v0_raw_tokens():
    auth = authenticator()
    handshake = HandshakeV0(mechanism="PLAIN")
    assert answer(auth.receive(frame(handshake), 0), handshake).error_code == ErrorCode.none
    assert auth.state == State.RAW_TOKEN
    out = auth.receive(b"\0bob\0pw", 0)
    assert out.response == struct.pack(">i", 0) and auth.authenticated and auth.username == "bob"
    failed = authenticator()
    failed.receive(frame(handshake), 0)
    assert failed.receive(b"\0bob\0wrong", 0).close


def test_session_expiry_and_reauthentication():
    auth = authenticator(max_reauth_ms=1000)
    scram_login(auth, now=0)
    metadata = MetadataRequest(topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    assert auth.receive(frame(metadata), 999).forward
    # re-authentication in time (KIP-368): a fresh session
    out, final = scram_login(auth, now=999)
    assert answer(out, final).error_code == ErrorCode.none and auth.session_expires_ms == 1999
    # past the lifetime, anything but a re-authentication closes the connection
    out = auth.receive(frame(metadata), 2000)
    assert out.close and "expired" in (out.reason or "")


def test_reauthentication_cannot_change_mechanism_or_principal():
    auth = authenticator(max_reauth_ms=1000)
    scram_login(auth)
    handshake = HandshakeV1(mechanism="PLAIN")
    auth.receive(frame(handshake), 10)
    token = AuthV2(auth_bytes=b"\0bob\0pw")
    r = answer(auth.receive(frame(token), 10), token)
    assert r.error_code == ErrorCode.sasl_authentication_failed and "re-authentication" in r.error_message


def test_sasl_authenticate_v0_client_does_not_reauthenticate():
    auth = authenticator(max_reauth_ms=1000)
    scram_login(auth, version=0)
    assert not auth.supports_reauth
    out = auth.receive(frame(HandshakeV1(mechanism="SCRAM-SHA-512")), 5)
    assert out.forward  # KafkaApis answers ILLEGAL_SASL_STATE


def test_listener_settings():
    props = {"sasl.enabled.mechanisms": "SCRAM-SHA-256",
             "listener.name.external.sasl.enabled.mechanisms": "plain,SCRAM-SHA-512",
             "listener.name.external.plain.sasl.jaas.config":
                 'org.apache.kafka.common.security.plain.PlainLoginModule required user_u="p";',
             "connections.max.reauth.ms": "5000"}
    ext = listener_settings(props, "EXTERNAL")
    assert ext.enabled_mechanisms == ["PLAIN", "SCRAM-SHA-512"] and ext.plain_users == {"u": "p"}
    assert ext.max_reauth_ms == 5000 and "'p'" not in repr(ext)
    assert listener_settings(props, "INTERNAL").enabled_mechanisms == ["SCRAM-SHA-256"]
    from odradek.common.config_def import ConfigException
    with pytest.raises(ConfigException):
        listener_settings({"sasl.enabled.mechanisms": "GSSAPI"}, "X")


def test_listener_credentials_of_the_broker_itself():
    from odradek.common.security.sasl_client import listener_credentials

    props = {"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
             "listener.name.internal.scram-sha-512.sasl.jaas.config":
                 jaas.client_config("SCRAM-SHA-512", "broker", "b-pw")}
    c = listener_credentials(props, "INTERNAL", "sasl.mechanism.inter.broker.protocol")
    assert (c.mechanism, c.username, c.password) == ("SCRAM-SHA-512", "broker", "b-pw")
    c = listener_credentials({**props, "sasl.mechanism.controller.protocol": "PLAIN",
                              "sasl.jaas.config": jaas.client_config("PLAIN", "ctl", "c")},
                             "CONTROLLER", "sasl.mechanism.controller.protocol")
    assert (c.mechanism, c.username) == ("PLAIN", "ctl")
    with pytest.raises(ValueError, match="jaas"):
        listener_credentials({"sasl.mechanism.inter.broker.protocol": "PLAIN"}, "X",
                             "sasl.mechanism.inter.broker.protocol")


def test_random_input_never_escapes_the_authenticator():
    """Whatever arrives, the authenticator answers with an Outcome (never an exception)."""
    import random

    from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest as AuthV1

    rng = random.Random(25)
    for _ in range(400):
        auth = authenticator(max_reauth_ms=rng.choice([0, 10]))
        mech = rng.choice(["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256", "X"])
        steps = [frame(rng.choice([HandshakeV0, HandshakeV1])(mechanism=mech))]
        for _ in range(rng.randint(0, 4)):
            token = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
            if rng.random() < 0.5:
                # a plausible SCRAM message with random attribute values
                token = rng.choice([b"n,,n=alice,r=", b"c=biws,r=", b"c=", b"p="]) + token
            kind = rng.random()
            if kind < 0.6:
                steps.append(frame(rng.choice([AuthV0, AuthV1, AuthV2])(auth_bytes=token)))
            elif kind < 0.8:
                steps.append(token)  # raw, or garbage where a request is expected
            else:
                whole = frame(AuthV2(auth_bytes=token))
                steps.append(whole[:rng.randint(0, len(whole))])  # truncated
        for i, step in enumerate(steps):
            outcome = auth.receive(step, i * 7)
            assert outcome.forward or outcome.close or outcome.response is not None
            if outcome.close:
                break


@pytest.mark.parametrize("final", [
    b"c=!!,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=AAAA",  # binding not base64
    RFC_CLIENT_FINAL[:-4] + b"!!!=",  # proof not base64
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",  # no proof
    b"r=x,c=biws,p=AAAA",  # out of order
    RFC_CLIENT_FINAL.replace(b"p=dHzb", b"p=AAAA"),  # wrong proof
    RFC_CLIENT_FINAL[:-8] + b"AAAA",  # proof of the wrong length
])
def test_malformed_client_final(final):
    server = rfc_server()
    server.evaluate(RFC_CLIENT_FIRST)
    with pytest.raises(SaslAuthenticationError):
        server.evaluate(final)
