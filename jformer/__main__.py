"""``python -m jformer ...``: the same command line as the ``jformer`` script."""
from jformer.cli import entry

entry()
