"""`python -m streams.profiles analyse PATH...`."""

from streams.profiles.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
