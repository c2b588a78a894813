"""Side panels of a checkpoint tab: statistics, heat-map, values, spectrum, optimizer, training, run."""
