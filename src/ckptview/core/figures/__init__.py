"""Per-tensor figures: statistics, histograms, heat-maps, spectra, and the analysis object that computes
each once for every panel and command that asks."""
