"""Issue 29, finding 10: a Spark RocksDB zip whose ``metadata`` member inflates past the memory budget.

A 0.4 MB zip whose member decompresses to 400 MB peaked at 904 MiB under ``memory_budget="256MB"`` and
then fell back to Spark's JVM. The reader now checks each member's declared size and reads with a
running cap; the refusal is :class:`~explorer.errors.SnapshotTooLargeError`, never a JVM fallback.
"""

import shutil
import zipfile

import pytest

from tests.support.peak import peak_of

SAMPLE = "sample_data/spark/spark35-dedup-watermark-rocksdb"
BUDGET_MB = 256
#: Python, pandas, pyarrow and the readers imported (a child reading the undamaged sample peaks ~320 MiB)
MARGIN_MB = 384
BOMB = 400 << 20


def _bomb_zip(path, declared_truthfully=True):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("metadata", "w", force_zip64=True) as w:
            w.write(b'v1\n{"sstFiles": []}')
            block = b" " * (1 << 20)
            for _ in range(BOMB >> 20):
                w.write(block)
    if not declared_truthfully:  # the central directory says 20 bytes; the stream still inflates to 400 MB
        data = bytearray(path.read_bytes())
        cd = data.rfind(b"PK\x01\x02")
        data[cd + 24:cd + 28] = (20).to_bytes(4, "little")
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("truthful", [True, False], ids=["declared", "lying-header"])
def test_a_zip_member_over_the_budget_is_refused_within_budget_and_without_the_jvm(tmp_path, truthful):
    snap = tmp_path / "ckpt"
    shutil.copytree(SAMPLE, snap)
    _bomb_zip(snap / "state" / "0" / "0" / "6.zip", truthful)  # batch 5 reads version 6: this zip first
    assert (snap / "state" / "0" / "0" / "6.zip").stat().st_size < 1 << 20
    peak, result = peak_of(f"""
        import explorer
        s = explorer.open({str(snap)!r}, memory_budget="{BUDGET_MB}MB")
        result = [raised(s.keyed_state), s.notes, s.reader.jvm_free]
    """)
    message, notes, _ = result
    if truthful:
        assert message.startswith("SnapshotTooLargeError: "), message
        assert "6.zip" in message and "metadata" in message and "memory_budget=" in message
    else:  # zipfile stops at the declared size and the CRC-32 check names the member
        assert message.startswith(("SnapshotTooLargeError: ", "SnapshotCorruptError: ")), message
        assert "6.zip" in message and "metadata" in message
    assert not any("through Spark" in n for n in notes), notes  # no JVM fallback on a refusal
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"


def _padded_zip(path, size):
    """A zip whose ``metadata`` member is valid (v1, JSON naming no SST file) and ``size`` bytes long, padded with
    JSON whitespace: it inflates to just under the budget and parses to almost nothing."""
    head, tail = b'v1\n{"sstFiles": [', b']}'
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        with zf.open("metadata", "w", force_zip64=True) as w:
            w.write(head)
            left = size - len(head) - len(tail)
            block = b" " * (1 << 20)
            while left > 0:
                w.write(block[:left])
                left -= len(block)
            w.write(tail)


def test_a_metadata_member_just_under_the_budget_is_charged_for_its_copies(tmp_path):
    """Left by session 11: a member just under the budget passed the cap, then took about three times its size
    as text and lines. It is charged for what reading it holds (its bytes and their decoded text) before it is
    inflated."""
    snap = tmp_path / "ckpt"
    shutil.copytree(SAMPLE, snap)
    size = (BUDGET_MB - 16) << 20
    _padded_zip(snap / "state" / "0" / "0" / "6.zip", size)
    peak, result = peak_of(f"""
        import explorer
        s = explorer.open({str(snap)!r}, memory_budget="{BUDGET_MB}MB")
        result = [raised(s.keyed_state), s.notes]
    """)
    message, notes = result
    assert message.startswith("SnapshotTooLargeError: "), message
    assert "6.zip" in message and "'metadata'" in message and "memory_budget=" in message, message
    assert not any("through Spark" in n for n in notes), notes
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"


def test_a_metadata_member_within_the_budget_still_reads(tmp_path):
    """The same padding, small: the SST names of the JSON line are read from the buffer cut in place."""
    from explorer.readers.spark.rocksdb import zip_metadata

    path = tmp_path / "m.zip"
    _padded_zip(path, 1 << 20)
    with zipfile.ZipFile(path) as zf:
        version, body = zip_metadata(zf, path)
    assert version == b"v1" and body.startswith(b'{"sstFiles": [') and body.endswith(b"]}") and len(body) == (1 << 20) - 3


def test_verify_charges_the_metadata_member_as_the_reader_does(tmp_path):
    """``verify`` read the member whole, unbudgeted; it now reports it damaged, naming the budget, before
    inflating it."""
    snap = tmp_path / "ckpt"
    shutil.copytree(SAMPLE, snap)
    size = (BUDGET_MB - 16) << 20
    _padded_zip(snap / "state" / "0" / "0" / "6.zip", size)
    (snap / "state" / "0" / "0" / ".6.zip.crc").unlink(missing_ok=True)
    peak, result = peak_of(f"""
        import explorer
        r = explorer.verify({str(snap)!r}, memory_budget="{BUDGET_MB}MB")
        result = [(c.file, c.status, c.detail) for c in r.checks if c.file.endswith("6.zip")]
    """)
    assert len(result) == 1 and result[0][1] == "damaged" and "memory_budget=" in result[0][2], result
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"
