"""The bearer tokens of the REST API, as configured: each token checked at construction (a
placeholder or a short one is refused), and read from `[[api_tokens]]` tables or from
TICKD_API_TOKENS. A read or write token may be limited to some domains: it then sees and changes
only their jobs (api/scoping.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from tickd.scheduler.config.limits import ConfigError
from tickd.scheduler.domains import DOMAIN_RULE, is_domain_name

SCOPES = ("read", "write", "admin")
MIN_TOKEN_LENGTH = 32
# What a token copied from an example or left to be filled in holds. The long words anywhere, in
# any case: a random token of 32 characters holds one by a chance of about one in 50,000; the
# short ones only as words of their own ("your-token", "XXXX-XXXX"), which random tokens hardly
# ever form. Literals and fixed-width look-arounds: linear in the token's length.
PLACEHOLDER = re.compile(
    r"change|example|placeholder|replace|secret|token|password|dummy|sample|fixme|default"
    r"|insert|(?<![a-z0-9])(?:xxxx*|your|test|todo|abc|123)(?![a-z0-9])",
    re.IGNORECASE,
)
# Fewer different characters than this in 32 or more: typed by hand (aaaa..., abcabc...), not drawn.
MIN_DISTINCT_CHARACTERS = 8
TOKEN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAKE_A_TOKEN = "e.g. from `openssl rand -base64 32`"


@dataclass(frozen=True, kw_only=True)
class ApiToken:
    """A bearer token of the REST API. `read` sees, `write` changes jobs, `admin` also changes
    system jobs. `domains`: the only domains a read or write token sees (None: every one); an
    admin token sees all. The token itself never appears in a repr, a log, an error or a
    response."""

    name: str
    scope: str
    token: str = field(repr=False)
    domains: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not TOKEN_NAME.fullmatch(self.name):
            raise ConfigError(
                "api_tokens", "a token's name is 1 to 64 letters, digits, '.', '_' or '-'"
            )
        if self.scope not in SCOPES:
            raise ConfigError(f"api_tokens.{self.name}.scope", "must be read, write or admin")
        problem = token_problem(self.token)
        if problem:
            raise ConfigError(f"api_tokens.{self.name}.token", problem)
        if self.domains is not None:
            check_domains(self)


def check_domains(token: ApiToken) -> None:
    where = f"api_tokens.{token.name}.domains"
    if token.scope == "admin":
        raise ConfigError(where, "an admin token sees every domain: leave domains out")
    if not token.domains:
        raise ConfigError(where, "name at least one domain, or leave domains out for all")
    wrong = sorted(d for d in token.domains if not is_domain_name(d))
    if wrong:
        raise ConfigError(where, f"{wrong[0][:80]!r} is not a domain's name: {DOMAIN_RULE}")


def token_problem(token: str) -> str | None:
    """Why a token would not keep strangers out, in words that do not repeat it; None if fine."""
    if len(token) < MIN_TOKEN_LENGTH:
        return f"must be at least {MIN_TOKEN_LENGTH} characters, {MAKE_A_TOKEN}"
    if not all("!" <= c <= "~" for c in token):
        return "must be printable ASCII without spaces (what a bearer token can carry)"
    if PLACEHOLDER.search(token) or len(set(token)) < MIN_DISTINCT_CHARACTERS:
        return (
            "looks like a placeholder (a word such as change, example, token or xxxx, or few "
            f"different characters): draw a random one, {MAKE_A_TOKEN}"
        )
    return None


def check_tokens_differ(tokens: tuple[ApiToken, ...]) -> None:
    names = [t.name for t in tokens]
    if len(set(names)) != len(names):
        raise ConfigError("api_tokens", "token names must be unique")
    first_name_of: dict[str, str] = {}
    for token in tokens:
        other = first_name_of.setdefault(token.token, token.name)
        if other != token.name:
            # One value under two names: the history could not tell who acted, nor a scope hold.
            raise ConfigError(
                "api_tokens", f"{other} and {token.name} have the same token: give each its own"
            )


def tokens_from_env(setting: str, raw: str) -> tuple[ApiToken, ...]:
    """`name:scope:token,...`, the scope of a token limited to domains followed by them,
    `name:scope@payments+search:token`; a token may itself contain colons. Errors never repeat
    the value: it is made of tokens."""
    tokens = []
    for position, item in enumerate((i for i in raw.split(",") if i.strip()), start=1):
        parts = item.strip().split(":", 2)
        if len(parts) != 3:
            raise ConfigError(setting, f"entry {position}: expected name:scope:token")
        scope, limited, domains = parts[1].partition("@")
        tokens.append(
            ApiToken(
                name=parts[0],
                scope=scope,
                token=parts[2],
                domains=frozenset(domains.split("+")) if limited else None,
            )
        )
    return tuple(tokens)


def tokens_from_file(value: Any) -> tuple[ApiToken, ...]:
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConfigError("api_tokens", "expected [[api_tokens]] tables of name, scope, token")
    tokens = []
    for i, table in enumerate(value):
        unknown = set(table) - {"name", "scope", "token", "domains"}
        if unknown or not all(isinstance(table.get(k), str) for k in ("name", "scope", "token")):
            raise ConfigError(
                f"api_tokens[{i}]", "needs name, scope and token, as strings (and maybe domains)"
            )
        tokens.append(ApiToken(**{**table, "domains": domains_of(table, i)}))
    return tuple(tokens)


def domains_of(table: dict[str, Any], index: int) -> frozenset[str] | None:
    """A table's `domains`, a list of names; None where it has none."""
    if "domains" not in table:
        return None
    domains = table["domains"]
    if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
        name = table["name"] if TOKEN_NAME.fullmatch(table["name"]) else f"[{index}]"
        raise ConfigError(f"api_tokens.{name}.domains", "must be a list of domain names")
    return frozenset(domains)
