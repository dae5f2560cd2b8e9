"""The security store: one authentication and authorization service for every protocol."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from security.audit import audit, audit_logger
from security.authenticators import ChainAuthenticator
from security.bruteforce import LoginGuard, remote_host
from security.cache import MISSING, ExpiringCache
from security.certificates import CertificateAuthenticator
from security.config import SecuritySetting, SecuritySettings
from security.errors import AuthenticationFailed, PermissionDenied
from security.interfaces import IAuthenticator, ISecurityAuth
from security.matcher import MatchTable, parse_pattern
from security.permissions import PERMISSION_NAMES, Permission
from security.roles import RoleMapper
from security.subject import AuthMethod, Identity, Subject
from security.users_file import UsersFileAuthenticator

Clock = Callable[[], float]

_AuthKey = tuple[str | None, bytes | None, bytes | None]
_AuthzKey = tuple[frozenset[str], str, str, str | None]


class _Failed:
    """The cached outcome of a failed login."""

    __slots__ = ()


_FAILED = _Failed()


def authenticator_for(settings: SecuritySettings) -> IAuthenticator:
    """The authenticators ``settings`` names, certificate first, chained.

    Reads the files now: raises ConfigError if one is missing or wrong.
    """
    chain: list[IAuthenticator] = []
    if settings.certificate_users_file is not None:
        chain.append(CertificateAuthenticator(settings.certificate_users_file))
    if settings.users_file is not None:
        chain.append(UsersFileAuthenticator(settings.users_file))
    return chain[0] if len(chain) == 1 else ChainAuthenticator(chain)


def _table(settings: Sequence[SecuritySetting]) -> MatchTable[SecuritySetting]:
    return MatchTable((parse_pattern(setting.match), setting) for setting in settings)


class SecurityStore:
    """Authenticates logins and checks permissions, with caches and an audit log.

    ``clock`` returns seconds (any monotonic origin: ``reactor.seconds`` or
    ``time.monotonic``); it drives cache expiry and the brute-force back-off.
    ``authenticator`` defaults to the ones the settings name (:func:`authenticator_for`);
    then :meth:`reload` with new settings builds them afresh.
    """

    def __init__(
        self,
        settings: SecuritySettings,
        clock: Clock,
        authenticator: IAuthenticator | None = None,
        *,
        logger: logging.Logger = audit_logger,
    ) -> None:
        self._clock = clock
        self._log = logger
        self._owns_authenticator = authenticator is None
        if authenticator is None and settings.enabled:
            authenticator = authenticator_for(settings)
        self._authenticator = authenticator
        # Cache keys hold a keyed hash of the password, never the password itself.
        self._key_secret = os.urandom(32)
        self._guard = LoginGuard(settings.backoff, clock)
        self._apply(settings, _table(settings.settings))

    def _apply(self, settings: SecuritySettings, table: MatchTable[SecuritySetting]) -> None:
        self._settings = settings
        self._table = table
        self._roles = RoleMapper(settings.role_mapping)
        self._guard.policy = settings.backoff
        ttl = settings.invalidation_interval
        self._authentications: ExpiringCache[_AuthKey, Identity | _Failed] = ExpiringCache(
            settings.authentication_cache_size, ttl, self._clock
        )
        self._decisions: ExpiringCache[_AuthzKey, bool] = ExpiringCache(
            settings.authorization_cache_size, ttl, self._clock
        )

    @property
    def settings(self) -> SecuritySettings:
        return self._settings

    @property
    def enabled(self) -> bool:
        return self._settings.enabled

    @property
    def authenticator(self) -> IAuthenticator | None:
        return self._authenticator

    # -- reloading -----------------------------------------------------------------

    def reload(self, settings: SecuritySettings | None = None) -> None:
        """Read the users and certificate files again, take ``settings`` if given, and
        empty both caches.

        Everything is checked before anything changes: on a ConfigError the store keeps
        serving with what it had.
        """
        new = settings if settings is not None else self._settings
        table = _table(new.settings)
        authenticator = self._authenticator
        if self._owns_authenticator:
            authenticator = authenticator_for(new) if new.enabled else None
        elif authenticator is not None:
            authenticator.reload()
        elif new.enabled:
            raise ValueError("security is enabled but this store has no authenticator")
        self._authenticator = authenticator
        self._apply(new, table)

    def invalidate_caches(self) -> None:
        """Forget cached logins and decisions (the next ones are checked afresh)."""
        self._authentications.clear()
        self._decisions.clear()

    # -- authentication ------------------------------------------------------------

    def _auth_key(self, auth: ISecurityAuth) -> _AuthKey:
        password = auth.password
        digest = (
            hashlib.blake2b(password.encode("utf-8"), key=self._key_secret).digest()
            if password is not None
            else None
        )
        chain: Sequence[x509.Certificate] = auth.peer_certificates
        fingerprint = chain[0].fingerprint(hashes.SHA256()) if chain else None
        return (auth.user, digest, fingerprint)

    def authenticate(self, auth: ISecurityAuth) -> Subject:
        """The subject ``auth`` proves, or AuthenticationFailed (which never says why)."""
        settings = self._settings
        if not settings.enabled or self._authenticator is None:
            return Subject(
                auth.user or "", frozenset(), AuthMethod.NONE, auth.protocol, auth.remote_address
            )
        host = remote_host(auth.remote_address)
        wait = self._guard.refusal(host)
        if wait is not None:
            audit(
                self._log,
                logging.WARNING,
                "authentication-refused",
                user=auth.user,
                protocol=auth.protocol,
                remote=auth.remote_address,
                reason="too many failed logins from this host",
                retry_after=round(wait, 3),
            )
            raise AuthenticationFailed()
        key = self._auth_key(auth)
        cached = self._authentications.get(key)
        if cached is MISSING:
            identity = self._authenticator.authenticate(auth)
            outcome: Identity | _Failed = (
                self._roles.apply(identity) if identity is not None else _FAILED
            )
            self._authentications.put(key, outcome)
        else:
            outcome = cached  # type: ignore[assignment]
        if isinstance(outcome, _Failed):
            window = self._guard.failed(host)
            audit(
                self._log,
                logging.WARNING,
                "authentication-failed",
                user=auth.user,
                protocol=auth.protocol,
                remote=auth.remote_address,
                certificate=self._leaf_dn(auth),
                failures=self._guard.failures(host),
                refused_for=window,
            )
            raise AuthenticationFailed()
        self._guard.succeeded(host)
        audit(
            self._log,
            logging.INFO,
            "authenticated",
            user=outcome.user,
            method=outcome.method.value,
            roles=",".join(sorted(outcome.roles)),
            protocol=auth.protocol,
            remote=auth.remote_address,
        )
        return Subject(
            outcome.user,
            outcome.roles,
            outcome.method,
            auth.protocol,
            auth.remote_address,
            internal=settings.cluster_user is not None and outcome.user == settings.cluster_user,
        )

    @staticmethod
    def _leaf_dn(auth: ISecurityAuth) -> str | None:
        chain: Sequence[x509.Certificate] = auth.peer_certificates
        return chain[0].subject.rfc4514_string() if chain else None

    # -- authorization -------------------------------------------------------------

    def setting_for(self, address: str, queue: str | None = None) -> SecuritySetting | None:
        """The setting that decides for ``address`` (and ``queue``): the most specific."""
        found = self._table.lookup(address, queue)
        return found[1] if found is not None else None

    def check(
        self,
        subject: Subject,
        address: str,
        permission: Permission | str,
        queue: str | None = None,
    ) -> None:
        """Return if ``subject`` may do ``permission`` on ``address`` (and ``queue``);
        otherwise log the denial and raise PermissionDenied."""
        if subject.internal or not self._settings.enabled:
            return
        key = (subject.roles, permission, address, queue)
        allowed = self._decisions.get(key)
        if allowed is True:
            return
        if allowed is MISSING:
            if permission not in PERMISSION_NAMES:
                raise ValueError(f"unknown permission {permission!r}")
            setting = self.setting_for(address, queue)
            allowed = setting is not None and not setting.roles_for(permission).isdisjoint(
                subject.roles
            )
            self._decisions.put(key, allowed)
            if allowed:
                return
        self._deny(subject, address, str(permission), queue)

    def _deny(self, subject: Subject, address: str, permission: str, queue: str | None) -> None:
        setting = self.setting_for(address, queue)
        audit(
            self._log,
            logging.WARNING,
            "permission-denied",
            user=subject.user,
            permission=permission,
            address=address,
            queue=queue,
            protocol=subject.protocol,
            remote=subject.remote_address,
            match=setting.match if setting is not None else None,
        )
        raise PermissionDenied(subject.user, permission, address, queue)
