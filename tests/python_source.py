"""Parse Python source in tests that read the project's code.

Why: on CPython 3.11 the AST constructor keeps its depth counter in interpreter state. When the
cyclic GC runs during a parse and a finalizer parses source too (asyncio's "exception was never
retrieved" log formats a traceback, and 3.11's traceback parses each line for its carets), the
inner parse resets the counter and the outer one fails with `SystemError: AST constructor
recursion depth mismatch` (CPython gh-106905). A test reading hundreds of files in a worker that
ran asyncio tests before hit it in CI. Pausing the cyclic GC for the parse keeps finalizers out.
"""

from __future__ import annotations

import ast
import gc


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse` with the cyclic GC paused, so no finalizer runs inside it."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(source, filename=filename)
    finally:
        if was_enabled:
            gc.enable()
