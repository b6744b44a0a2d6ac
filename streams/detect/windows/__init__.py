"""Windows over the step index, per communication group."""
