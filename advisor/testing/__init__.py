"""The contract test suites, importable by packages that extend the advisor out of tree.

A target or a trial store passes by subclassing :class:`TargetContract` or
:class:`StoreContract` in its own tests and giving the fixtures each names, as the in-tree ones
do. Only tests import this package: it imports pytest, which the advisor itself does not need.
"""

from __future__ import annotations

import pytest

# A failed assert in the shipped suites reports its values, as one in a test module does.
pytest.register_assert_rewrite("advisor.testing.store_contract", "advisor.testing.target_contract")

from advisor.testing.store_contract import StoreContract  # noqa: E402
from advisor.testing.target_contract import TargetContract  # noqa: E402

__all__ = ["StoreContract", "TargetContract"]
