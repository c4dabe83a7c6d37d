"""What a job's directories hold, as the agent's disk limit counts it (Note [A job's disk] in
workers.agent.diskwatch): real files on the test machine's file system."""
import os

from workers.agent.diskwatch import MIN_ENTRY_BYTES, used_bytes

MiB = 1 << 20


def test_files_count_their_blocks_entries_at_least_one_block_and_links_are_not_followed(tmp_path):
    job, elsewhere = tmp_path / "job", tmp_path / "elsewhere"
    (job / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    (job / "data").write_bytes(os.urandom(MiB))
    with open(job / "sub" / "sparse", "wb") as f:  # 1 GiB long, one 4 KiB block written
        f.seek(1 << 30)
        f.write(b"x" * 4096)
    (job / "sub" / "empty").touch()
    (elsewhere / "big").write_bytes(os.urandom(4 * MiB))
    os.symlink(elsewhere, job / "link")
    used = used_bytes([str(job)])
    # data (1 MiB), the sparse file's few blocks, sub/, empty and link at least one block each
    assert MiB + 4 * MIN_ENTRY_BYTES <= used < 2 * MiB, used
    assert used_bytes([str(job), str(tmp_path / "missing"), ""]) == used


def test_a_walk_stops_once_past_the_limit(tmp_path):
    for n in range(2000):
        (tmp_path / f"e{n}").touch()
    assert used_bytes([str(tmp_path)]) == 2000 * MIN_ENTRY_BYTES
    assert used_bytes([str(tmp_path)], stop_above=10 * MIN_ENTRY_BYTES) == 11 * MIN_ENTRY_BYTES
