"""Confine ProfileReady uris to the configured profile roots (a rank must not make a worker read
/etc/shadow or another tenant's files). Pure: no I/O beyond resolving symlinks of the path."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import unquote, urlparse


class ProfileUriError(ValueError):
    """The uri is malformed or points outside every configured root."""


def resolve_profile_uri(uri: str, roots: Sequence[Path]) -> Path:
    """A local path for `uri` (plain path or file:// URL) that lies inside one of `roots`.

    Relative paths are taken relative to the first root. Symlinks and `..` are resolved
    before the check, so neither can escape a root.
    """
    if not uri or "\x00" in uri:
        raise ProfileUriError("empty uri or NUL byte in uri")
    parsed = urlparse(uri)
    if parsed.scheme not in ("", "file"):
        raise ProfileUriError(f"unsupported uri scheme {parsed.scheme!r} (only local paths and file://)")
    if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
        raise ProfileUriError(f"file uri with a remote host {parsed.netloc!r}")
    raw = unquote(parsed.path) if parsed.scheme == "file" else uri
    if not roots:
        raise ProfileUriError("no profile roots configured")
    resolved_roots = [r.expanduser().resolve() for r in roots]
    path = Path(raw).expanduser()
    if not path.is_absolute():
        path = resolved_roots[0] / path
    path = path.resolve()
    for root in resolved_roots:
        if path == root or path.is_relative_to(root):
            return path
    raise ProfileUriError(f"{uri!r} is outside the profile roots ({', '.join(map(str, resolved_roots))})")
