"""``python -m pyresnet`` is ``python -m pyresnet.train`` (see pyresnet/train.py)."""
import sys

from .train import cli

if __name__ == "__main__":
    sys.exit(cli())
