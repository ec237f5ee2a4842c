"""The `mmaudit` command line: thin Typer commands over the Python API, one module per command group.

:mod:`~mmaudit.cli.main` assembles the app; :mod:`~mmaudit.cli.common` holds what every command shares.
"""

from mmaudit.cli.main import app

__all__ = ["app"]
