"""``python -m trio_broker`` is the ``trio_broker`` command."""

import sys

from .cli import main

sys.exit(main())
