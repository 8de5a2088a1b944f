"""Hardware models of the twin: device catalog, the DSCS DSA (dsa/), energy, area."""
