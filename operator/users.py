"""The KafkaUser controller: watch events in, Kafka admin calls, Secrets and status writes out.

Built as the Topic controller is (topics.py): kopf delivers the watch events of KafkaUsers and
KafkaClusters, the latest body of each is kept, the keys that need a look are queued
(work_queue), and a fixed set of workers reconciles them: user_reconciler decides, the batched
admin client (kafka_admin through batching) acts, the user's Secret is written once the cluster
holds its credential, and the status only when it changed. A periodic resync queues every
KafkaUser again, which reverts ACL, quota and credential changes made directly in the cluster.

Passwords are generated with `secrets`, read from Secrets, salted in kafka_admin and written to
the user's Secret; they never reach a log line, an event, a condition or the status. A `tls`
user's certificate is issued here (`cryptography`) from the cluster's clients CA Secret and
reissued within the CA's renewalDays of its end (checked at every pass).
"""

import asyncio
import base64
import datetime
import hmac
import logging
import secrets
import string
from typing import Any, cast

import kopf
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from odradek.operator import builders
from odradek.operator.certificates import BACKDATE, Authority, clock_now, needs_renewal
from odradek.operator.cluster_access import ClusterAccess
from odradek.operator.kube import ApiError, KubeClient
from odradek.operator.metrics import ReconcileStats
from odradek.operator.models import GROUP, VERSION, parse_spec
from odradek.operator.models import PLURAL as CLUSTER_PLURAL
from odradek.operator.resource_controller import (
    BatchedAdmin,
    BootstrapSource,
    ResourceController,
    Tuning,
    batcher,
    older,
    service_bootstrap,
)
from odradek.operator.topic_reconciler import Phase
from odradek.operator.user_models import FINALIZER, PLURAL, SCRAM, TLS
from odradek.operator.user_reconciler import (
    SECRET_LABELS,
    Action,
    ActionResult,
    AlterQuotas,
    AlterScram,
    CreateAcls,
    DeleteAcls,
    LiveUser,
    Outcome,
    Step,
    UserResource,
    gate,
    outcome,
    plan,
    removal,
    resource_from_body,
    scram_secret_data,
    secret_value,
    status,
    status_changed,
    unreachable,
    user_secret,
)

log = logging.getLogger("odradek.operator.users")

FIELD_MANAGER = "odradek-operator"
PASSWORD_LENGTH = 32
_ALPHABET = string.ascii_letters + string.digits

def generate_password() -> str:
    """32 letters and digits from `secrets` (about 190 bits), as Strimzi generates them."""
    return "".join(secrets.choice(_ALPHABET) for _ in range(PASSWORD_LENGTH))


def issue_client_certificate(ca: Authority, name: str, now: datetime.datetime, validity_days: int
                             ) -> dict[str, str]:
    """A client certificate for KafkaUser `name`, subject `CN=<name>` only (its principal is
    `User:CN=<name>`; the cluster's own certificates carry O=odradek.io, which no user's can),
    as Strimzi's Secret keys: ca.crt, user.crt, user.key, and user.p12 under user.password."""
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.certificate.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=validity_days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca.private_key(), hashes.SHA256()))
    password = generate_password()
    p12 = pkcs12.serialize_key_and_certificates(
        name.encode(), key, cert, [ca.certificate], serialization.BestAvailableEncryption(password.encode()))
    return {"ca.crt": ca.cert_pem, "user.crt": cert.public_bytes(serialization.Encoding.PEM).decode(),
            "user.key": key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()).decode(),
            "user.p12": base64.b64encode(p12).decode(), "user.password": password}


class ClientsCaUnavailable(Exception):
    """The cluster's clients CA is not (yet) in its Secret."""


class PasswordUnavailable(Exception):
    """The Secret key spec.authentication.password names cannot be read (the message names the
    Secret and key, never a value)."""


class UserAdmin(BatchedAdmin):
    """The KafkaUser controller's admin connection to one cluster and its batchers."""

    @classmethod
    def open(cls, access: ClusterAccess, tuning: Tuning) -> "UserAdmin":
        admin = access.admin(request_timeout=tuning.request_timeout, client_id="odradek-user-operator")
        return cls(access, admin, {
            "describe": batcher(tuning, "describe-users", admin.describe_users, lambda u: u, share=True),
            "scram": batcher(tuning, "scram", admin.alter_scram, lambda a: a.user),
            "create-acls": batcher(tuning, "create-acls", admin.create_acls, lambda a: a.user),
            "delete-acls": batcher(tuning, "delete-acls", admin.delete_acls, lambda a: a.user),
            "quotas": batcher(tuning, "quotas", admin.alter_quotas, lambda a: a.user),
        })

    async def describe(self, user: str) -> LiveUser:
        live: LiveUser = await self.batchers["describe"].submit(user)
        return live

    async def act(self, action: Action) -> ActionResult:
        name = {AlterScram: "scram", CreateAcls: "create-acls", DeleteAcls: "delete-acls",
                AlterQuotas: "quotas"}[type(action)]
        result: ActionResult = await self.batchers[name].submit(action)
        return result


class UserController(ResourceController[UserResource, UserAdmin]):
    kind, kinds, task_prefix = "KafkaUser", "KafkaUsers", "users"

    def __init__(self, client: KubeClient, *, namespaces: list[str], clusterwide: bool,
                 bootstrap_source: BootstrapSource = service_bootstrap, tuning: Tuning | None = None,
                 stats: ReconcileStats | None = None):
        super().__init__(client, namespaces=namespaces, clusterwide=clusterwide,
                         bootstrap_source=bootstrap_source, tuning=tuning, stats=stats)
        self.users = self.resources

    def _open_admin(self, access: ClusterAccess) -> UserAdmin:
        return UserAdmin.open(access, self.tuning)

    # --- the store, fed by watch events --------------------------------------------------------

    def _store(self, body: dict[str, Any]) -> UserResource:
        r = resource_from_body(body)
        self.users[r.key], self.bodies[r.key] = r, body
        return r

    async def user_event(self, kind: str | None, body: dict[str, Any]) -> None:
        meta: dict[str, Any] = body.get("metadata") or {}
        key = cast(tuple[str, str], (meta.get("namespace"), meta.get("name")))
        if kind == "DELETED":
            self.users.pop(key, None)
            self.bodies.pop(key, None)
            return
        old = self.users.get(key)
        if old is not None and older(body, self.bodies[key]):
            return
        r = self._store(body)
        if old is None or _wants_look(old, r):
            await self.queue.add(key)

    async def reconcile(self, key: tuple[str, str]) -> bool:
        """One pass for one KafkaUser; True when it should be retried soon (with backoff)."""
        r = self.users.get(key)
        if r is None:
            return False
        g = gate(r, self.cluster_of(r))
        if g.step is Step.NONE:
            return False
        if g.step is Step.RELEASE:
            await self._set_finalizer(r, False)
            return False
        if g.step is Step.REMOVE:
            return await self._remove(r)
        if g.finalizer is not None:
            stored = await self._set_finalizer(r, g.finalizer)
            if stored is None:
                return False
            r = stored
        if g.step is Step.STATUS:
            if g.outcome is None:
                raise RuntimeError("a STATUS gate without an outcome")
            await self._write_status(r, g.outcome)
            return g.outcome.phase is Phase.PROGRESSING
        return await self._observe_and_act(r)

    async def _password(self, r: UserResource) -> tuple[str, bool, dict[str, Any] | None]:
        """(the password the user must have, whether its Secret holds it already, that Secret)."""
        spec = r.spec
        if spec is None or spec.authentication is None:
            raise RuntimeError("only scram-sha-512 users have a password")
        secret = await self.client.get("Secret", r.namespace, r.secret_name)
        current = secret_value(secret, "password")
        ref = spec.authentication.password.value_from.secret_key_ref if spec.authentication.password else None
        if ref is not None:
            source = await self.client.get("Secret", r.namespace, ref.name)
            password = secret_value(source, ref.key)
            if not password:
                what = "does not exist" if source is None else f"has no key {ref.key!r}"
                raise PasswordUnavailable(f"Secret {ref.name!r} (spec.authentication.password) {what}")
        else:
            password = current or generate_password()
        stored = current is not None and hmac.compare_digest(current.encode(), password.encode())
        if stored and secret_value(secret, "sasl.jaas.config") != scram_secret_data(r.username, password)[
                "sasl.jaas.config"]:
            stored = False
        return password, stored, secret

    async def _certificate(self, r: UserResource) -> None:
        """Issue the user's certificate from the cluster's clients CA when its Secret has none, or
        one of another CA, or one within the CA's renewalDays of its end; write the Secret."""
        cluster = self.clusters[(r.namespace, r.cluster_ref)]
        ca_name = builders.names(str(r.cluster_ref))["clients_ca"]
        found = await self.client.get("Secret", r.namespace, ca_name)
        data = {k: v for k in ("ca.key", "ca.crt") if (v := secret_value(found, k)) is not None}
        ca = Authority.from_secret(data)
        if ca is None:
            raise ClientsCaUnavailable(f"the clients CA Secret {ca_name!r} does not exist or holds no CA yet")
        try:
            settings = parse_spec(cluster.get("spec") or {}).clients_ca
            validity, renewal = settings.validity_days, settings.renewal_days
        except ValueError:
            validity, renewal = 365, 30
        current = await self.client.get("Secret", r.namespace, r.secret_name)
        now = clock_now()
        why = needs_renewal(secret_value(current, "user.crt"), ca, (), now, renewal)
        if why is None and secret_value(current, "ca.crt") == ca.cert_pem:
            return
        await self._write_secret(r, issue_client_certificate(ca, r.name, now, validity), current)
        log.info("KafkaUser %s/%s: client certificate issued (%s)", r.namespace, r.name, why or "CA changed")

    async def _observe_and_act(self, r: UserResource) -> bool:
        spec = r.spec
        if spec is None:
            raise RuntimeError("gate() lets no invalid spec through to observe")
        user = r.username
        scram = spec.authentication is not None and spec.authentication.type == SCRAM
        password, stored, secret = None, False, None
        try:
            if scram:
                password, stored, secret = await self._password(r)
            elif spec.authentication is None:
                await self._delete_secret(r)
            elif spec.authentication.type == TLS:
                await self._certificate(r)
        except PasswordUnavailable as e:
            await self._write_status(r, Outcome(r, Phase.PROGRESSING, "PasswordSecretNotFound", str(e)))
            return True
        except ClientsCaUnavailable as e:
            await self._write_status(r, Outcome(r, Phase.PROGRESSING, "ClientsCaNotFound", str(e)))
            return True
        try:
            admin = await self.admin_for(r)
            if r.managed_username is not None and r.managed_username != user:
                old = r.managed_username
                results = await self._run(admin, removal(old, await admin.describe(old)))
                if any(res.error is not None for _, res in results):
                    action, res = next((a, x) for a, x in results if x.error is not None)
                    await self._write_status(r, Outcome(r, Phase.PROGRESSING, "PreviousUserNotRemoved",
                                                        f"{action}: {res.error} {res.message or ''}".strip()))
                    return True
            live = await admin.describe(user)
            p = plan(spec, user, live, password, stored)
            results = await self._run(admin, p.actions)
        except (OSError, ConnectionError, TimeoutError, ValueError) as e:
            await self._write_status(r, unreachable(r, f"cluster {r.cluster_ref!r}: {e}"))
            return True
        credential_ok = all(res.error is None for a, res in results if isinstance(a, AlterScram))
        if scram and password is not None and credential_ok and not stored:
            await self._write_secret(r, scram_secret_data(user, password), secret)
        o = outcome(r, user, p, results, r.secret_name if spec.authentication is not None else None)
        repeated = _ready_reason(r) == o.reason
        for action, result in results:
            if result.error is None:
                log.info("KafkaUser %s/%s: %s", r.namespace, r.name, action)
            else:
                log.log(logging.DEBUG if repeated else logging.WARNING, "KafkaUser %s/%s: %s failed: %s %s",
                        r.namespace, r.name, action, result.error, result.message or "")
        await self._write_status(r, o)
        return o.phase is Phase.PROGRESSING

    async def _run(self, admin: UserAdmin, actions: tuple[Action, ...]) -> list[tuple[Action, ActionResult]]:
        return list(zip(actions, await asyncio.gather(*(admin.act(a) for a in actions))))

    async def _remove(self, r: UserResource) -> bool:
        user = r.managed_username or r.username
        try:
            admin = await self.admin_for(r)
            results = await self._run(admin, removal(user, await admin.describe(user)))
        except (OSError, ConnectionError, TimeoutError, ValueError) as e:
            await self._write_status(r, unreachable(r, f"removing user {user!r}: {e}"))
            return True
        failed = [(a, res) for a, res in results if res.error is not None]
        if failed:
            action, res = failed[0]
            await self._write_status(r, Outcome(r, Phase.PROGRESSING, "RemoveFailed",
                                                f"{action}: {res.error} {res.message or ''}".strip()))
            return True
        log.info("KafkaUser %s/%s: removed user %r from the cluster", r.namespace, r.name, user)
        await self._set_finalizer(r, False)
        return False

    async def _write_secret(self, r: UserResource, data: dict[str, str], current: dict[str, Any] | None) -> None:
        desired = user_secret(r, data)
        if current is not None and not _ours(current):
            raise ApiError(409, "Conflict", f"Secret {r.secret_name!r} exists and is not managed by this KafkaUser")
        await self.client.apply(desired, FIELD_MANAGER)
        log.info("KafkaUser %s/%s: wrote Secret %s", r.namespace, r.name, r.secret_name)

    async def _delete_secret(self, r: UserResource) -> None:
        current = await self.client.get("Secret", r.namespace, r.secret_name)
        if current is not None and _ours(current) and (current["metadata"].get("labels") or {}).get(
                "odradek.io/user") == r.name:
            await self.client.delete("Secret", r.namespace, r.secret_name)

    async def _set_finalizer(self, r: UserResource, present: bool) -> UserResource | None:
        if r.has_finalizer == present:
            return r
        body = self.bodies[r.key]
        meta = body["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        if present:
            finalizers.append(FINALIZER)
        try:
            new = await self.client.patch("KafkaUser", r.namespace, r.name, {"metadata": {
                "finalizers": finalizers, "resourceVersion": meta.get("resourceVersion")}})
        except ApiError as e:
            if e.status == 404:
                return None
            raise
        if not present and meta.get("deletionTimestamp"):
            return None
        if self.users.get(r.key) is r:
            return self._store(new)
        return resource_from_body(new)

    async def _write_status(self, r: UserResource, o: Outcome) -> None:
        body = self.bodies.get(r.key)
        if body is None:
            return
        previous = body.get("status") or {}
        new = status(o, previous)
        if not status_changed(previous, new):
            return
        try:
            written = await self.client.patch("KafkaUser", r.namespace, r.name, {"status": new}, subresource="status")
        except ApiError as e:
            if e.status == 404:
                return
            raise
        if self.bodies.get(r.key) is body:
            self._store(written)


def _ours(secret: dict[str, Any]) -> bool:
    labels = secret.get("metadata", {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in SECRET_LABELS.items())


def _ready_reason(r: UserResource) -> str | None:
    return next((c.get("reason") for c in r.previous_conditions if c.get("type") == "Ready"), None)


def _wants_look(old: UserResource, new: UserResource) -> bool:
    return (old.generation != new.generation or old.deleting != new.deleting
            or (not new.has_finalizer and old.has_finalizer))


def register(registry: kopf.OperatorRegistry) -> None:
    """The KafkaUser controller's kopf handlers (the memo: main.OperatorMemo)."""

    @kopf.on.startup(registry=registry)
    async def start_users(memo: Any, **_: Any) -> None:
        memo.user_controller = UserController(
            memo.client, namespaces=memo.namespaces, clusterwide=memo.clusterwide,
            bootstrap_source=memo.topic_bootstrap, tuning=memo.user_tuning, stats=memo.stats)
        await memo.user_controller.start()

    @kopf.on.cleanup(registry=registry)
    async def stop_users(memo: Any, **_: Any) -> None:
        if memo.user_controller is not None:
            await memo.user_controller.stop()

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def user_event(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
        await memo.user_controller.user_event(event.get("type"), event["object"])

    @kopf.on.event(GROUP, VERSION, CLUSTER_PLURAL, registry=registry)
    async def user_cluster_event(event: kopf.RawEvent, memo: Any, **_: Any) -> None:
        await memo.user_controller.cluster_event(event.get("type"), event["object"])
