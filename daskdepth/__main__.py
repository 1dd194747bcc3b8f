"""``python -m daskdepth``: the same command line as the ``daskdepth`` console script."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
