"""Detection-quality benchmark against the fleet simulator's ground truth."""
