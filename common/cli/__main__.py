"""``python -m common.cli``: the ``korral`` command without the console script."""

import sys

from common.cli import main

sys.exit(main())
