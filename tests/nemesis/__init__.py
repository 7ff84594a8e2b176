"""The nemesis: a 3-broker, 2-controller cluster of real processes under seeded faults (issue 11)."""
