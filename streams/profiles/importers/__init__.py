"""One importer per dump format; `load` picks the right one for a path (file or directory)."""
