"""``python -m idemcore.cli``: the same as the ``idemcore`` command."""

import sys

from idemcore.cli import main

sys.exit(main())
