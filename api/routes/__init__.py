"""One router per resource; ``create_app`` mounts them."""

from __future__ import annotations

from typing import Any

from api.schemas import ErrorPublic

__all__ = ["COMMON_ERRORS"]

#: Answers any endpoint may give (documented on each, with the one error body).
COMMON_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorPublic, "description": "malformed request (e.g. a body that is not JSON)"},
    401: {"model": ErrorPublic, "description": "missing or invalid API key"},
    403: {"model": ErrorPublic, "description": "refused: no API key is configured on the server"},
    413: {"model": ErrorPublic, "description": "request body over the size limit"},
    422: {"model": ErrorPublic, "description": "invalid request"},
}
