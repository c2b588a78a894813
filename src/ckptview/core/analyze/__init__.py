"""Figures over what was read: statistics, histograms, heat-maps, optimizer mapping, training summaries, diffs and runs of checkpoints; the analysis object panels share."""
