"""Parse the YAML files that ship with the package (search spaces, workload presets) with
libyaml's C parser where PyYAML has it: the same safe constructor and resolver, so the same
values, about ten times faster. Every ``advisor`` command and every trial process parses some of
them (``advisor targets`` all ten spaces: 0.2 s of pure-Python parsing on a 2-core machine)."""

from __future__ import annotations

from typing import Any

import yaml

__all__ = ["safe_load"]

#: ``yaml.CSafeLoader`` when PyYAML was built with libyaml (its wheels are), else the pure-Python
#: ``yaml.SafeLoader``: both construct only plain data, and raise ``yaml.YAMLError`` on bad input.
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def safe_load(text: str) -> Any:
    """``yaml.safe_load(text)``, through the C parser when there is one."""
    return yaml.load(text, Loader=_LOADER)
