"""The page's files kept within a lifetime and a total size (webui/file_cache.py), swept by hand.
tests/test_security_files.py checks the same in the running app."""

import time
from pathlib import Path

from webui.file_cache import FileCache

DAY = 24 * 3600


def put(folder: Path, name: str, size: int = 10) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    return path


def test_files_older_than_the_lifetime_are_deleted_and_younger_ones_kept(tmp_path):
    cache = FileCache(tmp_path, max_age=0.5, max_size=2**30)
    old = put(tmp_path, "hash1/old.png")
    time.sleep(0.6)
    young = put(tmp_path, "hash2/young.png")
    assert cache.sweep() == [old]
    assert young.exists() and not old.exists()


def test_beyond_the_size_the_oldest_files_go_first(tmp_path):
    files = []
    for number in range(4):
        files.append(put(tmp_path, f"hash{number}/file{number}.wav", 400))
        time.sleep(0.02)
    cache = FileCache(tmp_path, max_age=DAY, max_size=1000)
    assert cache.sweep() == files[:2]
    assert [path.exists() for path in files] == [False, False, True, True]


def test_folders_left_empty_are_removed_a_sweep_later_and_the_cache_itself_kept(tmp_path):
    cache = FileCache(tmp_path, max_age=0.2, max_size=2**30)
    old = put(tmp_path, "anychat-import-x/0/a.png")
    time.sleep(0.3)
    assert cache.sweep() == [old]
    assert old.parent.exists(), "a folder just emptied may be about to be written into"
    time.sleep(cache.every + 0.1)
    cache.sweep()
    assert list(tmp_path.iterdir()) == [] and tmp_path.is_dir()


def test_a_missing_cache_is_no_error(tmp_path):
    assert FileCache(tmp_path / "not-yet", max_age=60, max_size=1).sweep() == []


def test_sweeps_come_at_least_twice_a_lifetime():
    assert FileCache(Path("."), max_age=6, max_size=1).every == 3
    assert FileCache(Path("."), max_age=DAY, max_size=1).every == 15
