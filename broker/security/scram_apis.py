"""DescribeUserScramCredentials (API 50) and AlterUserScramCredentials (API 51), KIP-554, ZooKeeper mode.

Validation, ordering and error codes follow Kafka's ZkAdminManager: an empty name, an unknown
mechanism or an iteration count outside [4096, 16384] fails that user (UNACCEPTABLE_CREDENTIAL /
UNSUPPORTED_SASL_MECHANISM), a user altered twice for one mechanism gets DUPLICATE_RESOURCE,
deleting a credential that does not exist RESOURCE_NOT_FOUND; the rest are written to
`/config/users/<user>` with a change notification, which every broker's CredentialLoader
applies. The client sends a salted password, never the password: the stored and server keys are
derived here (ScramFormatter.generateCredential), and nothing of them is logged or answered.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from odradek.broker.zk_client import ConfigChangedError
from odradek.common import wire
from odradek.common.api_key import ApiKey
from odradek.common.network.request_context import Handler, RequestContext
from odradek.common.security import scram

from .credential_cache import read_user_configs_blocking, user_entity_path

log = logging.getLogger(__name__)

VERSIONS = (0, 0)
EMPTY_USER = "Username must not be empty"
NOT_FOUND = "Attempt to describe a user credential that does not exist"
WRITE_ATTEMPTS = 5


class ScramApis:
    def __init__(self, zk: Any):
        self.zk = zk
        self.versions: dict[int, tuple[int, int]] = {
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: VERSIONS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS: VERSIONS}
        self.handlers: dict[int, Handler] = {
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: self.handle_describe,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: self.handle_alter,
        }

    async def _read(self, users: list[str] | None) -> dict[str, tuple[dict[str, str], int] | None]:
        found: dict[str, tuple[dict[str, str], int] | None] = await self.zk.threads.run(
            read_user_configs_blocking, self.zk.calls, users)
        return found

    # --- Describe -------------------------------------------------------------------------------

    async def handle_describe(self, context: RequestContext, request: Any) -> Any:
        mod = wire.response_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, context.api_version)
        names = None if not request.users else [u.name for u in request.users]
        try:
            return mod.DescribeUserScramCredentialsResponse(
                throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                results=tuple(await self._describe(mod, names)))
        except Exception as e:
            log.warning("DescribeUserScramCredentials failed: %s", e)
            return mod.DescribeUserScramCredentialsResponse(
                throttle_time=wire.NO_THROTTLE, error_code=ErrorCode.unknown_server_error,
                error_message="Error processing describe user SCRAM credential configs request", results=())

    async def _describe(self, mod: Any, names: list[str] | None) -> list[Any]:
        def result(user: str, code: ErrorCode = ErrorCode.none, message: str | None = None,
                   infos: tuple[Any, ...] = ()) -> Any:
            return mod.DescribeUserScramCredentialsResult(user=user, error_code=code, error_message=message,
                                                          credential_infos=infos)

        def infos(config: dict[str, str]) -> tuple[Any, ...]:
            out = []
            for mech in scram.MECHANISMS.values():
                if mech.name in config:
                    iterations = scram.credential_from_string(config[mech.name]).iterations
                    out.append(mod.CredentialInfo(mechanism=i8(mech.type), iterations=i32(iterations)))
            return tuple(out)

        if names is None:
            read = await self._read(None)
            return [result(user, infos=infos(got[0])) for user, got in sorted(read.items())
                    if got is not None and any(m in got[0] for m in scram.MECHANISMS)]
        counts = Counter(names)
        special: dict[str, Any] = {}
        for user in counts:
            if not user:
                special[user] = result(user, ErrorCode.resource_not_found, EMPTY_USER)
            elif counts[user] > 1:
                special[user] = result(user, ErrorCode.duplicate_resource,
                                       f"Cannot describe SCRAM credentials for the same user twice in a single "
                                       f"request: {user}")
        read = await self._read([u for u in counts if u not in special])
        out = []
        for user in dict.fromkeys(names):
            if user in special:
                out.append(special[user])
                continue
            got = read.get(user)
            config = got[0] if got is not None else {}
            if not any(m in config for m in scram.MECHANISMS):
                out.append(result(user, ErrorCode.resource_not_found, f"{NOT_FOUND}: {user}"))
                continue
            try:
                out.append(result(user, infos=infos(config)))
            except ValueError:
                out.append(result(user, ErrorCode.unknown_server_error,
                                  "Error processing describe user SCRAM credential configs request"))
        return out

    # --- Alter ----------------------------------------------------------------------------------

    async def handle_alter(self, context: RequestContext, request: Any) -> Any:
        mod = wire.response_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, context.api_version)
        results = [mod.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=message)
                   for user, code, message in await self.alter(request.upsertions, request.deletions)]
        return mod.AlterUserScramCredentialsResponse(throttle_time=wire.NO_THROTTLE, results=tuple(results))

    async def alter(self, upsertions: Any, deletions: Any) -> list[tuple[str, ErrorCode, str | None]]:
        out: list[tuple[str, ErrorCode, str | None]] = []
        refused: dict[str, tuple[ErrorCode, str]] = {}
        for d in deletions:
            if not d.name:
                refused[d.name] = (ErrorCode.unacceptable_credential, EMPTY_USER)
            elif int(d.mechanism) not in scram.BY_TYPE:
                refused[d.name] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
        for u in upsertions:
            if not u.name:
                refused[u.name] = (ErrorCode.unacceptable_credential, EMPTY_USER)
            elif int(u.mechanism) not in scram.BY_TYPE:
                refused[u.name] = (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
            elif int(u.iterations) < scram.MIN_ITERATIONS:
                refused[u.name] = (ErrorCode.unacceptable_credential, "Too few iterations")
            elif int(u.iterations) > scram.MAX_ITERATIONS:
                refused[u.name] = (ErrorCode.unacceptable_credential, "Too many iterations")
            elif not u.salt or len(u.salted_password) != scram.BY_TYPE[int(u.mechanism)].digest_size:
                refused[u.name] = (ErrorCode.unacceptable_credential, "Invalid salt or salted password")
        out += [(user, code, message) for user, (code, message) in refused.items()]
        pairs = Counter((x.name, int(x.mechanism)) for x in (*upsertions, *deletions) if x.name not in refused)
        duplicated = {name for (name, _), n in pairs.items() if n > 1}
        out += [(user, ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")
                for user in sorted(duplicated)]
        users = sorted({name for name, _ in pairs} - duplicated)
        for user in users:
            code, message = await self._alter_user(
                user, [u for u in upsertions if u.name == user], [d for d in deletions if d.name == user])
            out.append((user, code, message))
        return out

    async def _alter_user(self, user: str, upsertions: list[Any], deletions: list[Any]) -> tuple[ErrorCode, str | None]:
        for _ in range(WRITE_ATTEMPTS):  # compare-and-set: a concurrent change makes us read again
            got = (await self._read([user])).get(user)
            config, version = (dict(got[0]), got[1]) if got is not None else ({}, -1)
            for d in deletions:
                if scram.BY_TYPE[int(d.mechanism)].name not in config:
                    return ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
                del config[scram.BY_TYPE[int(d.mechanism)].name]
            for u in upsertions:
                mech = scram.BY_TYPE[int(u.mechanism)]
                credential = mech.credential(bytes(u.salted_password), bytes(u.salt), int(u.iterations))
                config[mech.name] = scram.credential_to_string(credential)
            try:
                await self.zk.change_entity_config(user_entity_path(user), config, version)
            except ConfigChangedError:
                continue
            except Exception as e:
                log.warning("altering the SCRAM credentials of user %r failed: %s", user, type(e).__name__)
                return ErrorCode.unknown_server_error, "Error altering user SCRAM credentials"
            log.info("SCRAM credentials of user %r changed: %s upserted, %s deleted", user,
                     [scram.BY_TYPE[int(u.mechanism)].name for u in upsertions],
                     [scram.BY_TYPE[int(d.mechanism)].name for d in deletions])
            return ErrorCode.none, None
        return ErrorCode.unknown_server_error, "The user's configuration kept changing; try again"



# --- error responses (Kafka's getErrorResponse), e.g. when the authorizer refuses the request ------


def alter_error_response(request: Any, code: ErrorCode) -> Any:
    """One result per user named in the request, each with `code` (AlterUserScramCredentialsRequest)."""
    mod = wire.response_module(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, int(request.__version__))
    users = dict.fromkeys(x.name for x in (*request.deletions, *request.upsertions))
    return mod.AlterUserScramCredentialsResponse(throttle_time=wire.NO_THROTTLE, results=tuple(
        mod.AlterUserScramCredentialsResult(user=user, error_code=code, error_message=None) for user in users))


def describe_error_response(request: Any, code: ErrorCode) -> Any:
    """The top-level error, no results (DescribeUserScramCredentialsRequest)."""
    mod = wire.response_module(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, int(request.__version__))
    return mod.DescribeUserScramCredentialsResponse(throttle_time=wire.NO_THROTTLE, error_code=code,
                                                    error_message=None, results=())


ERROR_RESPONSES: dict[int, Callable[[Any, ErrorCode], Any]] = {
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: alter_error_response,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: describe_error_response,
}
"""Error responses the generic builder (kafka_apis.error_response) cannot mirror: their results
are keyed by user, which the requests call `name`."""
