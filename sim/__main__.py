"""``python -m semsim``: the ``semsim`` command, for when the script is not on ``PATH``."""

import sys

from semsim.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
