"""``python -m mhabench.cli``: the same command as the ``mhabench`` console script."""

import sys

from mhabench.cli import main

sys.exit(main())
