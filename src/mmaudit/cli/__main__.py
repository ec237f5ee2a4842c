"""`python -m mmaudit.cli`: the same app as the `mmaudit` command."""

from mmaudit.cli.main import app

app()
