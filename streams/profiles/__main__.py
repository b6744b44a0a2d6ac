"""`python -m streams.profiles analyse PATH...`."""

from streams.profiles.cli import main

raise SystemExit(main())
