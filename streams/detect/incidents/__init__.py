"""Incidents an operator trusts: one per problem, open/update/resolve, merged across rules (book.py)."""
