"""Profile uris are confined to the configured roots: traversal in every disguise is rejected."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infra.settings import Settings
from streams.profiles.uri import ProfileUriError, resolve_profile_uri


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A profiles root with a dump, and a secret file next to (outside) it."""
    root = tmp_path / "profiles"
    (root / "job-1" / "rank-3").mkdir(parents=True)
    (root / "job-1" / "rank-3" / "trace.json").write_text("{}")
    secret = tmp_path / "secrets" / "kafka-admin.password"
    secret.parent.mkdir()
    secret.write_text("hunter2")
    return root, secret


def test_paths_inside_the_root_resolve(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    dump = root / "job-1" / "rank-3" / "trace.json"
    assert resolve_profile_uri(str(dump), [root]) == dump.resolve()
    assert resolve_profile_uri(dump.as_uri(), [root]) == dump.resolve()
    assert resolve_profile_uri(f"file://localhost{dump}", [root]) == dump.resolve()
    assert resolve_profile_uri("job-1/rank-3/trace.json", [root]) == dump.resolve()
    # percent-encoded characters of a legitimate name are decoded
    odd = root / "job 1.json"
    odd.write_text("{}")
    assert resolve_profile_uri("file://" + str(root) + "/job%201.json", [root]) == odd.resolve()


def test_second_root_is_accepted(layout: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = layout
    other = tmp_path / "shared-fs"
    other.mkdir()
    assert resolve_profile_uri(str(other / "x.json"), [root, other]) == (other / "x.json").resolve()


@pytest.mark.parametrize(
    "attack",
    [
        "{root}/../secrets/kafka-admin.password",
        "{root}/job-1/../../secrets/kafka-admin.password",
        "../secrets/kafka-admin.password",
        "job-1/rank-3/../../../secrets/kafka-admin.password",
        "file://{root}/../secrets/kafka-admin.password",
        "file://{root}/%2E%2E/secrets/kafka-admin.password",
        "{secret}",
        "file://{secret}",
        "/etc/passwd",
        "file:///etc/passwd",
        "file://evil.example.com/{root}/job-1/rank-3/trace.json",
        "http://evil.example.com/trace.json",
        "s3://bucket/trace.json",
        "{root}/job-1/rank-3/trace.json\x00.png",
        "file://{root}/job-1/rank-3/trace.json%00.png",
        "",
        "{root_prefix_sibling}/trace.json",
    ],
)
def test_traversal_and_foreign_uris_are_rejected(layout: tuple[Path, Path], attack: str) -> None:
    root, secret = layout
    sibling = Path(str(root) + "-evil")  # shares the root's string prefix, but is another directory
    sibling.mkdir()
    uri = attack.format(root=root, secret=secret, root_prefix_sibling=sibling)
    with pytest.raises(ProfileUriError):
        resolve_profile_uri(uri, [root])


def test_symlink_escaping_the_root_is_rejected(layout: tuple[Path, Path]) -> None:
    root, secret = layout
    os.symlink(secret, root / "job-1" / "innocent.json")
    os.symlink(secret.parent, root / "linked-dir")
    with pytest.raises(ProfileUriError, match="outside the profile roots"):
        resolve_profile_uri(str(root / "job-1" / "innocent.json"), [root])
    with pytest.raises(ProfileUriError, match="outside the profile roots"):
        resolve_profile_uri("linked-dir/kafka-admin.password", [root])


def test_symlink_staying_inside_the_root_is_fine(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    target = root / "job-1" / "rank-3" / "trace.json"
    os.symlink(target, root / "latest.json")
    assert resolve_profile_uri(str(root / "latest.json"), [root]) == target.resolve()


def test_rejection_says_why(layout: tuple[Path, Path]) -> None:
    root, _ = layout
    with pytest.raises(ProfileUriError, match=r"'\.\.' \(path traversal\)"):
        resolve_profile_uri("../x", [root])
    with pytest.raises(ProfileUriError, match="NUL"):
        resolve_profile_uri("a\x00b", [root])
    with pytest.raises(ProfileUriError, match="scheme 'http'"):
        resolve_profile_uri("http://x/y", [root])
    with pytest.raises(ProfileUriError, match="no profile roots"):
        resolve_profile_uri("x", [])


def test_default_root_is_the_home_profiles_dir(tmp_path: Path) -> None:
    assert Settings(home=tmp_path).profile_root_paths == (tmp_path / "profiles",)
    roots = Settings(home=tmp_path, profile_roots=f"/a{os.pathsep}/b").profile_root_paths
    assert roots == (Path("/a"), Path("/b"))
