"""The REST service: ``create_app(settings)`` builds the FastAPI app on the configured store.

This first cut serves health and readiness only; recommendations, cheat-sheet queries and study
control are added on top of the same factory.
"""

from __future__ import annotations

from api.app import create_app

__all__ = ["create_app"]
