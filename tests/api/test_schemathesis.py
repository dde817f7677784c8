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
