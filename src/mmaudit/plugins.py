"""Plugins: how attacks, model families and datasets reach the registries, mmaudit's own and anyone else's, by one
mechanism.

A module that defines an attack (``@registry.attack``), a model family (``@family``), a dataset (``@dataset``) or a SATR
router (``@router``) registers it when it is imported. Which modules to import is said by Python entry points, one group
per kind of extension (:data:`GROUPS`): a distribution lists its modules in its ``pyproject.toml``::

    [project.entry-points."mmaudit.attacks"]
    first_token = "my_package.first_token"

and mmaudit's own attacks, families and datasets are listed the same way in mmaudit's ``pyproject.toml``, so no
import list in the code names them. A module that is not installed as a distribution (a notebook's, a script's)
is imported with ``--plugin MODULE`` on the command line or :func:`use` in Python; the modules used are recorded
in the run record (so `audit transfer` imports them again) and handed to every Ray actor, which imports them
before it loads its model (entry points it finds itself, in the same environment).
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

from mmaudit.errors import UsageError

GROUPS = {"attacks": "mmaudit.attacks", "families": "mmaudit.families", "datasets": "mmaudit.datasets",
          "routers": "mmaudit.routers", "backends": "mmaudit.backends", "transforms": "mmaudit.transforms"}

_loaded: set[str] = set()
_used: list[str] = []


class PluginError(UsageError):
    """A plugin module that cannot be imported: named with its entry point or flag, and the reason."""


def load(kind: str) -> None:
    """Import every module the ``kind`` group's entry points name (once per process)."""
    if kind in _loaded:
        return
    _loaded.add(kind)
    for ep in entry_points(group=GROUPS[kind]):
        try:
            ep.load()
        except Exception as e:  # noqa: BLE001 - any failure of a plugin's import is reported as the plugin's
            raise PluginError(f"plugin {ep.name!r} (entry point {ep.value!r} in group {ep.group!r}) failed to "
                              f"import: {type(e).__name__}: {e}") from e


def use(*modules: str) -> None:
    """Import modules that register attacks or families (``--plugin MODULE``), and remember them for Ray actors
    and the run record."""
    for name in modules:
        if name in _used:
            continue
        try:
            import_module(name)
        except Exception as e:  # noqa: BLE001 - see load()
            raise PluginError(f"--plugin {name}: cannot import it ({type(e).__name__}: {e}); give an importable "
                              "module name (on PYTHONPATH or installed)") from e
        _used.append(name)


def used() -> list[str]:
    """The modules :func:`use` imported in this process, in order."""
    return list(_used)


class Registry:
    """Entries of one kind by name (datasets, chat backends, SATR routers): ``add`` registers, ``entries`` first
    imports what the kind's entry points name, so a lookup always sees installed plugins."""

    def __init__(self, kind: str) -> None:
        if kind not in GROUPS:
            raise ValueError(f"unknown plugin kind {kind!r}; known: {', '.join(GROUPS)}")
        self.kind = kind
        self._entries: dict = {}

    def add(self, name: str, entry) -> None:
        self._entries[name] = entry

    def decorator(self, name: str, entry_of):
        """A decorator that registers ``entry_of(decorated)`` under ``name`` and returns the decorated object."""

        def register(obj):
            self.add(name, entry_of(obj))
            return obj

        return register

    def entries(self) -> dict:
        load(self.kind)
        return dict(self._entries)
