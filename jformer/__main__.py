"""``python -m jformer ...``: the same command line as the ``jformer`` script."""
import sys

from jformer.cli import main

sys.exit(main())
