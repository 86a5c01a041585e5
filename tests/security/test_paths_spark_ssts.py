"""Issue 29, finding 7: the SST file names in a Spark RocksDB zip's metadata are confined to the store's
``SSTs/`` folder. An absolute or ``../`` name would read another checkpoint's SST as this one's state, or any
file of the machine, whose last bytes then showed in the SST footer's error."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest

import explorer
from explorer.errors import UnsafePathError

ROOT = Path(__file__).resolve().parents[2] / "sample_data" / "spark"
SECRET = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def _copy(tmp_path: Path, name: str = "agg-rocksdb") -> Path:
    dst = tmp_path / name
    shutil.copytree(ROOT / name, dst)
    return dst


def _rename_first_sst(zip_file: Path, name: str) -> str:
    """Rewrite the zip's ``metadata`` member so its first SST file is called ``name`` (CRCs stay valid: the zip is
    written anew); drop the checksum side files of the old zip. Returns the name it had."""
    with zipfile.ZipFile(zip_file) as zf:
        members = {i.filename: zf.read(i.filename) for i in zf.infolist()}
    version, doc = members["metadata"].decode().split("\n", 1)
    meta = json.loads(doc)
    old = meta["sstFiles"][0]["dfsSstFileName"]
    meta["sstFiles"][0]["dfsSstFileName"] = name
    members["metadata"] = (version + "\n" + json.dumps(meta)).encode()
    with zipfile.ZipFile(zip_file, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)
    for side in (zip_file.with_name(f".{zip_file.name}.crc"), zip_file.with_name(f"{zip_file.name}.crc")):
        side.unlink(missing_ok=True)
    return old


def _secret_file(tmp_path: Path) -> Path:
    f = tmp_path / "elsewhere" / "credentials"
    f.parent.mkdir()
    f.write_text("[default]\naws_access_key_id = AKIAIOSFODNN7EXAMPLE\n" + SECRET + "\n")
    return f


def _assert_refused(ckpt: Path, zip_file: Path, name: str) -> None:
    with pytest.raises(UnsafePathError) as err:
        explorer.open(ckpt, jvm=False).keyed_state()
    text = str(err.value)
    assert str(zip_file) in text and repr(name)[1:-1][:40] in text
    tail = b"EXAMPLEKEY"
    for shown in ("EXAMPLE", tail.hex(), tail[::-1].hex(), tail[-4:].hex(), tail[::-1][:4].hex()):
        assert shown not in text.lower().replace("0x", ""), shown  # no byte of the foreign file, as text or hex


def test_absolute_sst_name_is_refused(tmp_path):
    ckpt = _copy(tmp_path)
    secret = _secret_file(tmp_path)
    zip_file = ckpt / "state" / "0" / "0" / "6.zip"
    _rename_first_sst(zip_file, str(secret))
    _assert_refused(ckpt, zip_file, str(secret))


def test_dotdot_sst_name_reading_another_checkpoint_is_refused(tmp_path):
    ckpt = _copy(tmp_path)
    other = _copy(tmp_path, "window-tumbling-v2-nochangelog")
    theirs = next((other / "state").rglob("SSTs/*.sst"))
    zip_file = ckpt / "state" / "0" / "0" / "6.zip"
    name = "../../../../../" + theirs.relative_to(tmp_path).as_posix()
    assert (zip_file.parent / "SSTs" / name).resolve() == theirs.resolve()  # it would be read without the check
    _rename_first_sst(zip_file, name)
    _assert_refused(ckpt, zip_file, name)


def test_dotdot_into_another_partition_of_the_same_checkpoint_is_refused(tmp_path):
    ckpt = _copy(tmp_path)
    theirs = next((ckpt / "state" / "0" / "1" / "SSTs").glob("*.sst"))
    zip_file = ckpt / "state" / "0" / "0" / "6.zip"
    name = "../../1/SSTs/" + theirs.name
    _rename_first_sst(zip_file, name)
    _assert_refused(ckpt, zip_file, name)


@pytest.mark.parametrize("name", ["..", ".", "", "a\x00b.sst", "sub/x.sst", "..\\x.sst"])
def test_names_that_are_not_plain_file_names_are_refused(tmp_path, name):
    ckpt = _copy(tmp_path)
    zip_file = ckpt / "state" / "0" / "0" / "6.zip"
    _rename_first_sst(zip_file, name)
    with pytest.raises(UnsafePathError, match="plain file name") as err:
        explorer.open(ckpt, jvm=False).keyed_state()
    assert str(zip_file) in str(err.value)


def test_an_sst_linked_out_of_the_checkpoint_is_refused(tmp_path):
    ckpt = _copy(tmp_path)
    secret = _secret_file(tmp_path)
    sst = next((ckpt / "state" / "0" / "0" / "SSTs").glob("000013-*.sst"))
    sst.unlink()
    sst.with_name(f".{sst.name}.crc").unlink(missing_ok=True)
    sst.symlink_to(secret)
    with pytest.raises(UnsafePathError) as err:
        explorer.open(ckpt, jvm=False).keyed_state()
    assert sst.name in str(err.value) and "EXAMPLE" not in str(err.value)


def test_the_untouched_copy_still_reads(tmp_path):
    ckpt = _copy(tmp_path)
    assert len(explorer.open(ckpt, jvm=False).keyed_state()) > 0
