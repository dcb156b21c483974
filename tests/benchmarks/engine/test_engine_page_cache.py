"""page_cache.py on real files: what mincore says the page cache holds, and eviction without root."""

from __future__ import annotations

import os

from benchmarks.engine import page_cache as pc


def test_a_written_file_is_held_evicted_and_read_back_in(tmp_path):
    f = tmp_path / "table.bin"
    f.write_bytes(os.urandom(4 << 20))
    assert pc.resident([f]) == {"files": 1, "bytes": 4 << 20, "resident": 1.0}
    pc.evict([f])
    assert pc.resident([f])["resident"] == 0.0
    fd = os.open(f, os.O_RDONLY)
    try:  # the first quarter read back, readahead off (the host's may span the whole file): that quarter held
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        assert len(os.pread(fd, 1 << 20, 0)) == 1 << 20
    finally:
        os.close(fd)
    assert pc.resident([f])["resident"] == 0.25


def test_residency_is_over_pages_of_every_file_and_an_empty_file_counts_none(tmp_path):
    held, dropped, empty = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    held.write_bytes(b"x" * (1 << 20))
    dropped.write_bytes(b"y" * (3 << 20))
    empty.write_bytes(b"")
    pc.evict([dropped])
    got = pc.resident([held, dropped, empty])
    assert got == {"files": 3, "bytes": 4 << 20, "resident": 0.25}
    assert pc.resident([]) == {"files": 0, "bytes": 0, "resident": 0.0}


def test_files_under_lists_regular_files_and_skips_links_and_missing_folders(tmp_path):
    (tmp_path / "m" / "sub").mkdir(parents=True)
    (tmp_path / "m" / "a.safetensors").write_bytes(b"1")
    (tmp_path / "m" / "sub" / "t.pletable").write_bytes(b"2")
    (tmp_path / "m" / "link").symlink_to(tmp_path / "m" / "a.safetensors")
    got = pc.files_under(tmp_path / "m", tmp_path / "absent")
    assert [p.relative_to(tmp_path).as_posix() for p in got] == ["m/a.safetensors", "m/sub/t.pletable"]
