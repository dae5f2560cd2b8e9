"""The security store: one authentication and authorization service for every protocol."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

import attrs

from security.audit import audit, audit_logger
from security.authenticators import ChainAuthenticator
from security.bruteforce import LoginGuard, remote_host
from security.cache import MISSING, ExpiringCache
from security.certificates import CertificateAuthenticator
from security.clock import Clock
from security.config import PREFIX, SecuritySetting, SecuritySettings
from security.errors import AuthenticationFailed, ConfigError, PermissionDenied
from security.interfaces import IAuthenticator, ISecurityAuth
from security.matcher import MatchTable, parse_pattern
from security.permissions import PERMISSION_NAMES, Permission
from security.roles import RoleMapper
from security.subject import AuthMethod, Identity, Subject
from security.users_file import UsersFileAuthenticator
from security.validate import key_path

if TYPE_CHECKING:
    from cryptography import x509

_AuthKey = tuple[str | None, bytes | None, bytes | None]
_AuthzKey = tuple[frozenset[str], str, str, str | None]


def authenticator_for(settings: SecuritySettings) -> IAuthenticator:
    """The authenticators ``settings`` names, certificate first, chained.

    Reads the files now: raises ConfigError if one is missing or wrong, or if the
    ``cluster-user`` is in neither of them.
    """
    chain: list[CertificateAuthenticator | UsersFileAuthenticator] = []
    if settings.certificate_users_file is not None:
        chain.append(CertificateAuthenticator(settings.certificate_users_file))
    if settings.users_file is not None:
        chain.append(UsersFileAuthenticator(settings.users_file))
    cluster_user = settings.cluster_user
    if cluster_user is not None and not any(each.knows(cluster_user) for each in chain):
        files = " or ".join(
            str(path)
            for path in (settings.users_file, settings.certificate_users_file)
            if path is not None
        )
        raise ConfigError(
            settings.source,
            key_path(PREFIX, "cluster-user"),
            f"{cluster_user!r} is not a user of {files or 'any users file'}: the cluster user "
            "must exist in the users file (with a password hash) or the certificate mapping",
        )
    return chain[0] if len(chain) == 1 else ChainAuthenticator(chain)


def _table(settings: Sequence[SecuritySetting]) -> MatchTable[SecuritySetting]:
    return MatchTable((parse_pattern(setting.match), setting) for setting in settings)


@attrs.frozen
class _State:
    """What a reload replaces as a whole: readers take one consistent snapshot."""

    settings: SecuritySettings
    table: MatchTable[SecuritySetting]
    roles: RoleMapper
    authenticator: IAuthenticator | None


class SecurityStore:
    """Authenticates logins and checks permissions, with caches and an audit log.

    ``clock`` returns seconds (any monotonic origin: ``reactor.seconds`` or
    ``time.monotonic``); it drives cache expiry and the brute-force back-off.
    ``authenticator`` defaults to the ones the settings name (:func:`authenticator_for`);
    then :meth:`reload` with new settings builds them afresh.

    Thread-safe: a head runs :meth:`authenticate` in a worker thread (its password hash
    takes a fraction of a second) while the reactor calls :meth:`check`. One lock guards
    the caches, the brute-force counts and the swap of a reload; it is never held while
    a password is hashed or a file is read.
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
        self._given = authenticator
        if authenticator is None and settings.enabled:
            authenticator = authenticator_for(settings)
        # Cache keys hold a keyed hash of the password, never the password itself.
        self._key_secret = os.urandom(32)
        self._lock = threading.Lock()
        # Failures per (host, user) refuse that pair; per host they only delay logins.
        self._pairs = LoginGuard(settings.backoff, clock)
        self._hosts = LoginGuard(settings.address_backoff, clock)
        self._generation = 0
        self._install(settings, _table(settings.settings), authenticator)

    def _install(
        self,
        settings: SecuritySettings,
        table: MatchTable[SecuritySetting],
        authenticator: IAuthenticator | None,
    ) -> None:
        # Called with the lock held, or from __init__.
        self._state = _State(settings, table, RoleMapper(settings.role_mapping), authenticator)
        self._pairs.policy = settings.backoff
        self._hosts.policy = settings.address_backoff
        ttl = settings.invalidation_interval
        self._authentications: ExpiringCache[_AuthKey, Identity | None] = ExpiringCache(
            settings.authentication_cache_size, ttl, self._clock
        )
        self._decisions: ExpiringCache[_AuthzKey, bool] = ExpiringCache(
            settings.authorization_cache_size, ttl, self._clock
        )
        self._generation += 1

    @property
    def settings(self) -> SecuritySettings:
        """The settings in force (those of the last successful reload)."""
        return self._state.settings

    @property
    def enabled(self) -> bool:
        """Whether security is on (``[security] enabled``)."""
        return self._state.settings.enabled

    # -- reloading -----------------------------------------------------------------

    def reload(self, settings: SecuritySettings | None = None) -> None:
        """Read the users and certificate files again, take ``settings`` if given, and
        empty both caches.

        Everything is read and checked before anything changes (and without the lock):
        on a ConfigError the store keeps serving with what it had.
        """
        new = settings if settings is not None else self._state.settings
        table = _table(new.settings)
        authenticator = self._given
        if authenticator is not None:
            authenticator.reload()
        elif new.enabled:
            authenticator = authenticator_for(new)
        with self._lock:
            self._install(new, table, authenticator)

    def invalidate_caches(self) -> None:
        """Forget cached logins and decisions (the next ones are checked afresh)."""
        with self._lock:
            self._authentications.clear()
            self._decisions.clear()
            self._generation += 1

    # -- authentication ------------------------------------------------------------

    def _auth_key(self, auth: ISecurityAuth) -> _AuthKey:
        password = auth.password
        digest = (
            hashlib.blake2b(password.encode("utf-8"), key=self._key_secret).digest()
            if password is not None
            else None
        )
        chain: Sequence[x509.Certificate] = auth.peer_certificates
        fingerprint = _fingerprint(chain[0]) if chain else None
        return (auth.user, digest, fingerprint)

    def login_delay(self, remote_address: str) -> float:
        """Seconds a login from ``remote_address`` should wait before it is checked: the
        host's back-off window after failed logins for any user, at most
        ``failed-login-address-max-delay``. A delay, never a refusal: the right password
        still logs in once it is over. Cheap: call it on the reactor."""
        if not self._state.settings.enabled:
            return 0.0
        with self._lock:
            return self._hosts.refusal(remote_host(remote_address)) or 0.0

    def authenticate(self, auth: ISecurityAuth) -> Subject:
        """The subject ``auth`` proves, or AuthenticationFailed (which never says why).

        A login the cache does not answer hashes a password (scrypt: a fraction of a
        second and up to 256 MiB): protocol heads call this from a worker thread, a few
        at most at once (a node's ``bridge.logins.Logins`` bounds them), after waiting
        out :meth:`login_delay`. A (host, user) pair in its back-off window is refused
        here without hashing.
        """
        host = remote_host(auth.remote_address)
        pair = (host, auth.user or "")
        key = self._auth_key(auth)
        with self._lock:
            # One snapshot: the state, and the generation that says whether a reload
            # (or an invalidation) came between this read and the cache write below.
            state, generation = self._state, self._generation
            authenticator = state.authenticator if state.settings.enabled else None
            wait = self._pairs.refusal(pair) if authenticator is not None else None
            cached = self._authentications.get(key) if wait is None else MISSING
        if authenticator is None:
            return Subject(
                auth.user or "", frozenset(), AuthMethod.NONE, auth.protocol, auth.remote_address
            )
        if wait is not None:
            audit(
                self._log,
                logging.WARNING,
                user=auth.user,
                remote=auth.remote_address,
                protocol=auth.protocol,
                action="login",
                outcome="refused",
                reason="too many failed logins for this user from this host",
                retry_after=round(wait, 3),
            )
            raise AuthenticationFailed()
        if cached is MISSING:
            # The slow part, outside the lock: other logins and checks go on meanwhile.
            identity = authenticator.authenticate(auth)
            outcome = state.roles.apply(identity) if identity is not None else None
            with self._lock:
                if generation == self._generation:  # no reload since: still true
                    self._authentications.put(key, outcome)
        else:
            outcome = cached
        if outcome is None:
            with self._lock:
                window = self._pairs.failed(pair)
                failures = self._pairs.failures(pair)
                delay = self._hosts.failed(host)
            audit(
                self._log,
                logging.WARNING,
                user=auth.user,
                remote=auth.remote_address,
                protocol=auth.protocol,
                action="login",
                outcome="failure",
                certificate=self._leaf_dn(auth),
                failures=failures,
                refused_for=window,
                host_delay=delay,
            )
            raise AuthenticationFailed()
        with self._lock:
            self._pairs.succeeded(pair)
        audit(
            self._log,
            logging.INFO,
            user=outcome.user,
            remote=auth.remote_address,
            protocol=auth.protocol,
            action="login",
            outcome="success",
            method=outcome.method.value,
            roles=",".join(sorted(outcome.roles)),
        )
        cluster_user = state.settings.cluster_user
        return Subject(
            outcome.user,
            outcome.roles,
            outcome.method,
            auth.protocol,
            auth.remote_address,
            internal=cluster_user is not None and outcome.user == cluster_user,
        )

    @staticmethod
    def _leaf_dn(auth: ISecurityAuth) -> str | None:
        chain: Sequence[x509.Certificate] = auth.peer_certificates
        return chain[0].subject.rfc4514_string() if chain else None

    # -- authorization -------------------------------------------------------------

    def setting_for(self, address: str, queue: str | None = None) -> SecuritySetting | None:
        """The setting that decides for ``address`` (and ``queue``): the most specific."""
        found = self._state.table.lookup(address, queue)
        return found[1] if found is not None else None

    def check(
        self,
        subject: Subject,
        address: str,
        permission: Permission | str,
        queue: str | None = None,
    ) -> None:
        """Return if ``subject`` may do ``permission`` on ``address`` (and ``queue``);
        otherwise log the denial and raise PermissionDenied.

        Cheap (a cache hit, or a walk of the pattern trie): call it on the reactor.
        """
        if subject.internal or not self._state.settings.enabled:
            return  # (the state is replaced whole on reload: reading it needs no lock)
        key = (subject.roles, permission, address, queue)
        with self._lock:
            state = self._state
            if not state.settings.enabled:
                return
            allowed = self._decisions.get(key)
            if allowed is MISSING:
                if permission not in PERMISSION_NAMES:
                    raise ValueError(f"unknown permission {permission!r}")
                found = state.table.lookup(address, queue)
                allowed = found is not None and not found[1].roles_for(permission).isdisjoint(
                    subject.roles
                )
                self._decisions.put(key, allowed)
        if not allowed:
            self._deny(state, subject, address, str(permission), queue)

    def _deny(
        self, state: _State, subject: Subject, address: str, permission: str, queue: str | None
    ) -> None:
        found = state.table.lookup(address, queue)
        audit(
            self._log,
            logging.WARNING,
            user=subject.user,
            remote=subject.remote_address,
            protocol=subject.protocol,
            action=permission,
            outcome="denied",
            address=address,
            queue=queue,
            match=found[0].text if found is not None else None,
        )
        raise PermissionDenied(subject.user, permission, address, queue)


def _fingerprint(certificate: x509.Certificate) -> bytes:
    """The certificate's SHA-256 fingerprint. (cryptography is imported here, where it is
    loaded already: a certificate came over TLS. A node without TLS never loads it.)"""
    from cryptography.hazmat.primitives import hashes  # noqa: PLC0415

    return certificate.fingerprint(hashes.SHA256())
