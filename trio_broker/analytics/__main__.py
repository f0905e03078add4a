"""``python -m trio_broker.analytics`` (and ``spark-submit trio_broker/analytics/__main__.py``)."""

from __future__ import annotations

import sys

from trio_broker.analytics.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
