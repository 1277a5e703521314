"""``python -m sim.cli``: the ``semsim`` command."""

import sys

from sim.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
