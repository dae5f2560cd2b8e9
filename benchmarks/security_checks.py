"""How fast the security store decides: authorization checks and authentications per second.

Authorization: 1,000 security settings (catch-all, ``#``-, ``*``- and exact matches) and
10,000 distinct addresses; each address checked once with empty caches (cold), then again
and again with the caches filled (warm), and with caching turned off for comparison.
Authentication: users from a users file with the default scrypt cost, first with an empty
cache (every login derives a key) and then answered by the cache.

    .venv/bin/python -m benchmarks.security_checks

prints the figures and writes them to benchmarks/results/security_checks.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from security.auth import SecurityAuth
from security.config import SecuritySettings, load_security
from security.passwords import DEFAULT_N, DEFAULT_P, DEFAULT_R, hash_password
from security.permissions import Permission
from security.store import SecurityStore
from security.subject import AuthMethod, Subject
from security.tomlfile import write_toml_atomically

RESULTS = Path(__file__).parent / "results" / "security_checks.json"

APPS = 50
REGIONS = 10
SERVICES = 20  # 50 x 10 x 20 = 10,000 addresses
WARM_PASSES = 5
USERS = 8
CACHED_LOGINS = 200_000


def addresses() -> list[str]:
    return [
        f"app{a}.region{r}.svc{s}"
        for a in range(APPS)
        for r in range(REGIONS)
        for s in range(SERVICES)
    ]


def security_settings() -> list[dict[str, Any]]:
    """1,000 settings: ``#``, one ``app.#`` per app, one ``app.region.*`` per region and
    exact matches for the rest, each granting send to the producers."""
    grant = {"send": ["producers"], "consume": ["consumers"]}
    table: list[dict[str, Any]] = [{"match": "#", "manage": ["admins"]}]
    table += [{"match": f"app{a}.#", **grant} for a in range(APPS)]
    table += [
        {"match": f"app{a}.region{r}.*", **grant} for a in range(APPS) for r in range(REGIONS)
    ]
    exact = [
        f"app{a}.region{r}.svc{s}" for a in range(APPS) for r in range(REGIONS) for s in (0, 1)
    ]
    table += [{"match": name, **grant} for name in exact[: 1000 - len(table)]]
    assert len(table) == 1000
    return table


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("inf")


def timed(action: Callable[[], int]) -> tuple[int, float]:
    start = time.perf_counter()
    count = action()
    return count, time.perf_counter() - start


def load(directory: Path, **extra: Any) -> SecuritySettings:
    table = {
        "users-file": str(directory / "users.toml"),
        "setting": security_settings(),
        "authorization-cache-size": 20_000,
        "security-invalidation-interval": "1h",
        **extra,
    }
    return load_security(table, str(directory / "node.toml"))


def authorization(directory: Path) -> dict[str, float]:
    names = addresses()
    subject = Subject("bench", frozenset({"producers", "ops"}), AuthMethod.PASSWORD, "core")

    def check_all(store: SecurityStore, passes: int) -> Callable[[], int]:
        def run() -> int:
            check = store.check
            for _ in range(passes):
                for address in names:
                    check(subject, address, Permission.SEND)
            return passes * len(names)

        return run

    store = SecurityStore(load(directory), time.monotonic)
    cold = rate(*timed(check_all(store, 1)))
    warm = rate(*timed(check_all(store, WARM_PASSES)))
    uncached_store = SecurityStore(
        load(directory, **{"authorization-cache-size": 0}), time.monotonic
    )
    uncached = rate(*timed(check_all(uncached_store, 1)))
    return {
        "cold_checks_per_s": round(cold),
        "warm_checks_per_s": round(warm),
        "uncached_checks_per_s": round(uncached),
    }


def authentication(directory: Path) -> dict[str, float]:
    passwords = {f"user{n}": f"password-{n}" for n in range(USERS)}
    users = {
        "users": {
            name: {"password": hash_password(password), "roles": ["producers"]}
            for name, password in passwords.items()
        }
    }
    write_toml_atomically(directory / "users.toml", users)
    store = SecurityStore(load(directory), time.monotonic)
    logins = [
        SecurityAuth(name, password, (), f"10.0.0.{n}:5000", "core")
        for n, (name, password) in enumerate(passwords.items())
    ]

    def authenticate_all(passes: int) -> Callable[[], int]:
        def run() -> int:
            authenticate = store.authenticate
            for _ in range(passes):
                for auth in logins:
                    authenticate(auth)
            return passes * len(logins)

        return run

    cold = rate(*timed(authenticate_all(1)))
    cached = rate(*timed(authenticate_all(CACHED_LOGINS // len(logins))))
    return {"cold_per_s": round(cold, 2), "cached_per_s": round(cached)}


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(
        prog="python -m benchmarks security", description="Authorization and login rates."
    ).parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="txbridge-security-bench-") as name:
        directory = Path(name)
        auth = authentication(directory)
        authz = authorization(directory)
    results: dict[str, Any] = {
        "benchmark": "security_checks",
        "settings": 1000,
        "addresses": APPS * REGIONS * SERVICES,
        "warm_passes": WARM_PASSES,
        "authorization": authz,
        "authentication": {
            **auth,
            "users": USERS,
            "cached_logins": CACHED_LOGINS,
            "scrypt": {"n": DEFAULT_N, "r": DEFAULT_R, "p": DEFAULT_P},
        },
        "python": platform.python_version(),
        "machine": platform.machine(),
        "platform": platform.platform(),
    }
    print(f"authorization, 1,000 settings, {results['addresses']:,} addresses:")
    print(f"  cold cache      {authz['cold_checks_per_s']:>12,.0f} checks/s")
    print(f"  warm cache      {authz['warm_checks_per_s']:>12,.0f} checks/s")
    print(f"  no cache        {authz['uncached_checks_per_s']:>12,.0f} checks/s")
    print(f"authentication, users file, scrypt n={DEFAULT_N} r={DEFAULT_R} p={DEFAULT_P}:")
    print(f"  cold cache      {auth['cold_per_s']:>12,.2f} logins/s")
    print(f"  cached          {auth['cached_per_s']:>12,.0f} logins/s")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"saved {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
