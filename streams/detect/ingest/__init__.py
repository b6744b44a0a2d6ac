"""Raw messages in, columns out: the only per-event work of the detect stage."""
