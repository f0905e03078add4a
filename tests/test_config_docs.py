"""docs/configuration.md is generated from the config declarations and must not drift from them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trio_broker.config import config_reference_markdown, known_keys

DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
REGENERATE = "python -m trio_broker.config > docs/configuration.md"


def test_configuration_doc_is_up_to_date() -> None:
    # `python -m trio_broker.config` prints the markdown followed by one newline.
    expected = config_reference_markdown() + "\n"
    assert DOC.read_text(encoding="utf-8") == expected, f"stale docs: run `{REGENERATE}`"


def test_every_key_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [key for key in known_keys() if f"| `{key}` |" not in text]
    assert not missing, f"undocumented keys {missing}: run `{REGENERATE}`"


def test_module_entry_point_prints_the_reference() -> None:
    result = subprocess.run([sys.executable, "-m", "trio_broker.config"], capture_output=True,
                            text=True, check=True, timeout=60)
    assert result.stdout == config_reference_markdown() + "\n"
