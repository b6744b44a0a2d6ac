"""Profile uris stay inside the configured roots: traversal, symlinks and foreign schemes refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams.profiles.uri import ProfileUriError, resolve_profile_uri


def test_inside_root_resolves(tmp_path: Path) -> None:
    root = tmp_path / "profiles"
    (root / "job" / "rank0").mkdir(parents=True)
    assert resolve_profile_uri(str(root / "job" / "rank0"), [root]) == (root / "job" / "rank0").resolve()
    assert resolve_profile_uri("job/rank0", [root]) == (root / "job" / "rank0").resolve()
    assert resolve_profile_uri(f"file://{root}/job/rank0", [root]) == (root / "job" / "rank0").resolve()


@pytest.mark.parametrize("uri", ["../../etc/passwd", "/etc/passwd", "job/../../outside", "file:///etc/passwd",
                                 "s3://bucket/x", "file://evil.host/tmp/x", "", "a\x00b"])
def test_escapes_are_refused(tmp_path: Path, uri: str) -> None:
    root = tmp_path / "profiles"
    root.mkdir()
    with pytest.raises(ProfileUriError):
        resolve_profile_uri(uri, [root])


def test_symlink_out_of_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "profiles"
    root.mkdir()
    outside = tmp_path / "secret"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    with pytest.raises(ProfileUriError):
        resolve_profile_uri(str(root / "link"), [root])
    assert resolve_profile_uri(str(outside), [root, outside]) == outside.resolve()
