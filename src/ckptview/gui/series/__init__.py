"""The series tab: a training run's timeline, its plots, spectra and Follow."""
