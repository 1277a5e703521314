"""Every planted bug semsim ships, by name: the catalog's and the checkers' own.

The catalog (:mod:`semsim.world.mutant_catalog`) plants bugs in the code a
world runs: the holder, the queue, the durability port, the client object.
The designs' planted bugs (:mod:`semsim.world.design_mutants`) change the
gate's ledger and the leased workers' store. The checkers' planted bugs
(:mod:`semsim.check.planted`) live above it, with the checkers they rebind.
Everything that names a mutant (``semsim fuzz --variant mutant/NAME``,
``semsim mutants``, the pytest plugin, the time-to-bug benchmark) finds it
here.
"""

from __future__ import annotations

from typing import Final

from semsim.check.planted import CHECKER_MUTANTS
from semsim.world import mutant_catalog
from semsim.world.design_mutants import DESIGN_MUTANTS
from semsim.world.mutant_catalog import Mutant, by_name

#: The catalog's mutants, the checkers', then the designs'.
MUTANTS: Final[tuple[Mutant, ...]] = (*mutant_catalog.MUTANTS, *CHECKER_MUTANTS, *DESIGN_MUTANTS)
#: The mutant called ``name``, in either catalog; ValueError listing the known names otherwise.
mutant: Final = by_name(MUTANTS)
