"""Who may do what: one authentication and authorization store for every protocol.

This package knows nothing of Twisted or of protocols: heads hand the store an
:class:`ISecurityAuth` and get a :class:`Subject`, then ask :meth:`SecurityStore.check`
before each operation. Time comes from an injected clock. docs/security.md is the
configuration reference.
"""

from security.auth import SecurityAuth
from security.authenticators import ChainAuthenticator
from security.bruteforce import BackoffPolicy, LoginGuard
from security.certificates import CertificateAuthenticator
from security.config import SecuritySetting, SecuritySettings, load_security
from security.errors import AuthenticationFailed, ConfigError, PermissionDenied, SecurityError
from security.interfaces import IAuthenticator, ISecurityAuth
from security.passwords import hash_password, verify_password
from security.permissions import Permission
from security.roles import RoleMapper, RoleRule, SourceKind
from security.store import SecurityStore, authenticator_for
from security.subject import AuthMethod, Identity, Subject
from security.users_file import UserRecord, UsersFileAuthenticator, load_users_file

__all__ = [
    "AuthMethod",
    "AuthenticationFailed",
    "BackoffPolicy",
    "CertificateAuthenticator",
    "ChainAuthenticator",
    "ConfigError",
    "IAuthenticator",
    "ISecurityAuth",
    "Identity",
    "LoginGuard",
    "Permission",
    "PermissionDenied",
    "RoleMapper",
    "RoleRule",
    "SecurityAuth",
    "SecurityError",
    "SecuritySetting",
    "SecuritySettings",
    "SecurityStore",
    "SourceKind",
    "Subject",
    "UserRecord",
    "UsersFileAuthenticator",
    "authenticator_for",
    "hash_password",
    "load_security",
    "load_users_file",
    "verify_password",
]
