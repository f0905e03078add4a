"""``python -m trio_broker`` is the ``trio_broker`` command."""

import sys

from .command import main

sys.exit(main())
