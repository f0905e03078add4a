"""PySpark jobs over the broker's structured logs (``trio_broker analyze``).

This is the only package that imports :mod:`pyspark`, and only lazily, inside the functions that
need it: importing ``trio_broker.analytics`` (or its ``cli``) works without the ``analytics``
extra installed, so ``trio_broker analyze`` can tell the user how to get it.
"""

from __future__ import annotations

#: What to tell a user who runs ``trio_broker analyze`` without pyspark installed.
INSTALL_HINT = "pip install 'trio-broker[analytics]'"
