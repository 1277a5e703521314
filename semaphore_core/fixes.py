"""Opt-in corrections of reference behaviour that breaks a CONTRACT invariant.

The default holder is the faithful reference, bugs included: a model that
silently fixed them could not find them. Each entry here names a finding in
docs/FINDINGS.md; ``HolderConfig(fixes={name})`` turns its fix on.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

KNOWN_FIXES: Final[Mapping[str, str]] = {}
