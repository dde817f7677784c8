"""Opening the trial store the settings name, the one way the command line and the REST API
(``create_app``) open it: the default SQLite file's directory created on first use, and the
shipped knowledge (knowledge/data) imported, once per file content, when asked for and
``ADVISOR_IMPORT_SHIPPED`` allows it."""

from __future__ import annotations

import logging

from advisor.settings import Settings, default_db_url
from knowledge import TrialStore
from knowledge.transfer import import_shipped_knowledge

__all__ = ["open_store"]

log = logging.getLogger(__name__)


def open_store(settings: Settings, *, import_shipped: bool = True) -> TrialStore:
    """The store at ``settings.db_url``, its tables created. ``import_shipped``: also import the
    shipped knowledge (``settings.import_shipped`` permitting), as every ``advisor`` command and
    ``advisor serve`` do; a test building an app on an empty store passes False."""
    store = TrialStore(settings.db_url, create_dir=settings.db_url == default_db_url())
    if import_shipped and settings.import_shipped:
        for name, summary in import_shipped_knowledge(store).items():
            log.info("imported shipped knowledge %s: %d trials", name, summary.trials_imported)
    return store
