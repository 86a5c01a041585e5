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
