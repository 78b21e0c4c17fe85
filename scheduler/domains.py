"""Domains: the team or tenant a job belongs to, named on the job (`Job.domain`).

A domain's name is also a Prometheus label value and a Kafka topic suffix, so it is short and
plain: 1 to 63 characters, lowercase ASCII letters, digits, `-`, `_` and `.`, starting with a
letter or a digit. The rule lives here alone: the model refuses a job that breaks it, the API's
models state it in the OpenAPI document, and the command line checks its flags by it.
"""

from __future__ import annotations

import re

# The domain of a job that names none, and of every job stored before domains existed.
DEFAULT_DOMAIN = "default"
DOMAIN_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
DOMAIN_RULE = (
    "1 to 63 lowercase letters, digits, '-', '_' or '.', starting with a letter or a digit"
)

_DOMAIN = re.compile(DOMAIN_PATTERN)


def is_domain_name(text: object) -> bool:
    """Whether `text` is a name a domain may have (DOMAIN_PATTERN, the whole of it)."""
    return isinstance(text, str) and _DOMAIN.fullmatch(text) is not None
