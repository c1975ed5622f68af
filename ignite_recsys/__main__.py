"""``python -m ignite_recsys evaluate ...``: see :mod:`ignite_recsys.cli`."""

from .cli import console

if __name__ == "__main__":
    console()
