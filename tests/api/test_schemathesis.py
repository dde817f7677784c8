"""Property-based run of the OpenAPI schema against the app, in-process: no request the schema
allows (or breaks) may produce a 5xx, and answers must match their documented schemas. Bounded and
derandomised so it is fast and repeatable."""

from __future__ import annotations

from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, settings  # noqa: E402
from pydantic import SecretStr  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from api import create_app  # noqa: E402
from tests.api.conftest import AUTH, KEY, make_settings  # noqa: E402


def _app() -> object:
    import atexit
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="advisor-schemathesis-"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    return create_app(make_settings(f"sqlite:///{tmp / 'api.db'}", tmp, api_key=SecretStr(KEY)))


schema = schemathesis.openapi.from_asgi("/openapi.json", _app())


@schema.parametrize()
@settings(max_examples=25, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_api_never_answers_5xx(case: schemathesis.Case) -> None:
    response = case.call(headers=AUTH)
    case.validate_response(response, checks=[not_a_server_error, response_schema_conformance,
                                             status_code_conformance])


_EXTREMES = (10**400, -(10**400), 2**63, -(2**63) - 1, 2**53 + 1)


def _extreme(value: object, pick: int) -> object:
    """``value`` with every integer and float replaced by an extreme (400-digit, beyond int64,
    beyond 2**53, 1e308), each position its own; booleans and strings stay."""
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int):
        return _EXTREMES[pick % len(_EXTREMES)]
    if isinstance(value, float):
        return 1e308 if pick % 2 else -1e308
    if isinstance(value, dict):
        return {k: _extreme(v, pick + i) for i, (k, v) in enumerate(value.items())}
    if isinstance(value, list):
        return [_extreme(v, pick + i) for i, v in enumerate(value)]
    return value


@schema.parametrize()
@settings(max_examples=10, derandomize=True, deadline=None,
          suppress_health_check=list(HealthCheck))
def test_extreme_integers_never_give_5xx(case: schemathesis.Case) -> None:
    """The same operations with every number in the body and the query replaced by an extreme
    one (a 400-digit integer used to give 500: OverflowError deep inside a target)."""
    if isinstance(case.body, dict | list):
        case.body = _extreme(case.body, 0)
    if isinstance(case.query, dict):
        case.query = {k: _extreme(v, i) for i, (k, v) in enumerate(case.query.items())}
    response = case.call(headers=AUTH)
    case.validate_response(response, checks=[not_a_server_error])
