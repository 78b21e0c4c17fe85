"""The commands run against tests/api/test_cli.py's live API server."""

from tests.api.test_cli import live

__all__ = ["live"]
