"""``python -m zico_cli``: the same as the ``zico`` console script."""
from .main import cli

cli()
