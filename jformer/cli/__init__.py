from jformer.cli.commands import main

__all__ = ["main"]
