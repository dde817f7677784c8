"""slo-advisor core: study driver, recommender, settings, errors and the CLI.

Only this package (and the API above it) imports optuna.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
