"""The trial store contract (advisor/testing/store_contract.py) on the in-tree store: every test
runs on SQLite and on the local PostgreSQL server (the ``db_url`` fixture of tests/conftest.py)."""

from __future__ import annotations

import pytest

from advisor.testing import StoreContract


class TestTrialStore(StoreContract):
    @pytest.fixture
    def store_url(self, db_url: str) -> str:
        return db_url
