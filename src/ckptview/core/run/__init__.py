"""Running a model: device listing, the load gate (what torch may load), and the isolated worker."""
