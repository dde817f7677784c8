"""``knowledge`` re-exports the store's names lazily (knowledge/__init__.py): each one is the
object of the module that defines it, and a name it does not export is an AttributeError."""

from __future__ import annotations

import importlib

import pytest

import knowledge


@pytest.mark.parametrize("name", knowledge.__all__)
def test_each_exported_name_is_its_home_modules_object(name: str) -> None:
    home = importlib.import_module(knowledge._HOMES[name])
    assert getattr(knowledge, name) is getattr(home, name)


def test_every_exported_name_has_a_home() -> None:
    assert set(knowledge.__all__) == set(knowledge._HOMES)


def test_the_statuses_are_the_rows_statuses() -> None:
    from knowledge import models, statuses

    for name in statuses.__all__:
        assert getattr(models, name) is getattr(statuses, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        knowledge.NoSuchName  # noqa: B018 - the lookup is the test
    with pytest.raises(ImportError):
        from knowledge import NoSuchName  # noqa: F401
