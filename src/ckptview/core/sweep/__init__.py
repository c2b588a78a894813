"""Whole-checkpoint work (statistics, spectra, a comparison, an export) cut into tasks by the bytes they
read and run where the user places it: on a Dask cluster, on this machine's cores, or in this process;
each task opens the file itself, and the figures equal those of one local pass, bit for bit."""

from __future__ import annotations

from typing import TYPE_CHECKING

import lazy_loader

if TYPE_CHECKING:
    from ckptview.core.sweep.listing import ListingFigures, listing_figures
    from ckptview.core.sweep.pairs import compare_placed
    from ckptview.core.sweep.runner import LOCAL, Placement, Sweep, SweepReport
    from ckptview.core.sweep.writing import export_placed

__all__ = ["LOCAL", "ListingFigures", "Placement", "Sweep", "SweepReport", "compare_placed", "export_placed",
           "listing_figures"]

# Each name is imported on first use: a module of this package imports none of the others (SPEC 1).
__getattr__, __dir__, _ = lazy_loader.attach(__name__, submod_attrs={
    "listing": ["ListingFigures", "listing_figures"],
    "pairs": ["compare_placed"],
    "runner": ["LOCAL", "Placement", "Sweep", "SweepReport"],
    "writing": ["export_placed"],
})
