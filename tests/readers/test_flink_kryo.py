"""Kryo values (Kryo 2 in Flink 1.17/1.20, Kryo 5 in Flink 2.3) against the values the fixture jobs computed.

The job's classes come from a jar built here with javac from the fixture job's own source
(tools/flink/src/ProductionFixtures.java: the Kryo-serialized class, cut out with its enclosing class name kept),
so the class files are real javac output, read as data and never loaded.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pandas as pd
import pytest

import explorer
from explorer.errors import FlinkFormatError
from explorer.readers.flink.classfile import JarClasses, parse_class, parse_type_descriptor
from explorer.readers.flink.datainput import DataInput
from explorer.readers.flink.kryo import KryoConfig, KryoDecoder, Layouts
from explorer.readers.flink.serializers import UnknownLayout

ROOT = Path(__file__).resolve().parents[2]
PROD = ROOT / "sample_data" / "flink" / "production"
SOURCE = ROOT / "tools" / "flink" / "src" / "ProductionFixtures.java"
KRYO_FIXTURES = [
    ("flink-1.17-types-heap-canonical-savepoint", 2),
    ("flink-1.20-types-heap-canonical-savepoint", 2),
    ("types-heap-canonical-savepoint", 5),
    ("types-rocksdb-native-savepoint", 5),
    ("types-heap-checkpoint", 5),  # full heap format: Kryo values are not length-prefixed
    ("types-changelog-heap-checkpoint", 5),  # changelog backend: the jar reaches the changelog's decoders too
    ("flink-1.18-types-heap-canonical-savepoint", 2),
    ("flink-1.19-types-heap-canonical-savepoint", 2),
]


def _nested_class_source(src: str, name: str) -> str:
    start = src.index(f"public static class {name}")
    depth, i = 0, src.index("{", start)
    while True:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return src[start : i + 1]
        i += 1


@pytest.fixture(scope="module")
def job_jar(tmp_path_factory) -> Path:
    if not (shutil.which("javac") and shutil.which("jar")):
        pytest.skip("needs a JDK (javac, jar) to build the fixture job's classes")
    d = tmp_path_factory.mktemp("jobjar")
    body = _nested_class_source(SOURCE.read_text(encoding="utf-8"), "LegacyThing")
    (d / "ProductionFixtures.java").write_text(
        "import java.util.ArrayList;\npublic class ProductionFixtures {\n" + body + "\n}\n", encoding="utf-8")
    subprocess.run(["javac", "-d", str(d / "out"), str(d / "ProductionFixtures.java")], check=True)
    subprocess.run(["jar", "cf", str(d / "job.jar"), "-C", str(d / "out"), "."], check=True)
    return d / "job.jar"


def _expected(name: str, state: str) -> dict:
    exp = json.loads((PROD / name / "EXPECTED.json").read_text(encoding="utf-8"))
    return {e["key"]: e["value"] for e in exp["operators"]["user-types"]["states"][state]["entries"]}


def _plain(v):
    """numpy arrays (how pandas hands back lists inside dicts) as lists."""
    if hasattr(v, "tolist"):
        return v.tolist()
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


@pytest.mark.parametrize("name,kryo", KRYO_FIXTURES)
def test_kryo_field_serializer_values_equal_the_jobs(name, kryo, job_jar):
    snap = explorer.open(PROD / name, uids=["user-types"], jars=[job_jar])
    df = snap.keyed_state(operator="user-types", state="kryo")
    assert snap.states.set_index("state").loc["kryo", "value_type"].startswith(f"Kryo {kryo} ")
    want = _expected(name, "kryo")
    got = {k: _plain(v) for k, v in zip(df["key"], df["value"])}
    assert set(got) == set(want)
    for key, w in want.items():
        assert w["class"] == "ProductionFixtures$LegacyThing"
        assert got[key] == w["fields"], key


@pytest.mark.parametrize("name,kryo", KRYO_FIXTURES)
def test_kryo_optional_needs_no_jar(name, kryo):
    snap = explorer.open(PROD / name, uids=["user-types"])
    df = snap.keyed_state(operator="user-types", state="maybe")
    want = _expected(name, "maybe")
    got = dict(zip(df["key"], df["value"]))
    assert set(got) == set(want)
    for key, w in want.items():
        assert got[key] == {"present": w["present"], "value": w["value"]}, key
    assert any(w["present"] for w in want.values()) and not all(w["present"] for w in want.values())


@pytest.mark.parametrize("name,kryo", KRYO_FIXTURES[:3])
def test_without_a_jar_kryo_objects_stay_raw_and_others_still_decode(name, kryo):
    snap = explorer.open(PROD / name, uids=["user-types"])
    df = snap.keyed_state(operator="user-types", state="kryo")
    assert len(df) == 24 and all(isinstance(v, bytes) for v in df["value"])
    notes = [n for n in snap.notes if "'kryo'" in n]
    assert notes and all('explorer.open(path, jars=["job.jar"])' in n for n in notes)
    assert len(snap.keyed_state(operator="user-types", state="tuple")) == 24


def test_type_hints_replace_the_jar():
    hints = {"ProductionFixtures$LegacyThing": {"score": "int", "label": "String", "history": "java.util.ArrayList<String>"}}
    name = "types-heap-canonical-savepoint"
    snap = explorer.open(PROD / name, uids=["user-types"], type_hints=hints)
    df = snap.keyed_state(operator="user-types", state="kryo")
    got = {k: _plain(v) for k, v in zip(df["key"], df["value"])}
    assert got == {k: w["fields"] for k, w in _expected(name, "kryo").items()}


def test_the_missing_layout_says_what_to_pass():
    dec = KryoDecoder(KryoConfig("a.B", [("a.B", False)]), Layouts(), 5)
    with pytest.raises(UnknownLayout, match=r'explorer.open\(path, jars=\["job.jar"\]\)'):
        dec.read(DataInput(bytes([85 + 2, 1])))


def test_class_file_fields_and_generic_signatures(job_jar):
    layout = JarClasses([job_jar]).layout("ProductionFixtures$LegacyThing")
    assert layout is not None and layout.super_name == "java.lang.Object"
    types = {f.name: str(f.type) for f in layout.fields}
    assert types == {"label": "java.lang.String", "score": "int", "history": "java.util.ArrayList<java.lang.String>"}
    assert all(f.serialized for f in layout.fields)
    assert JarClasses([job_jar]).layout("ProductionFixtures$Nope") is None


def test_class_file_rejects_what_is_not_one():
    with pytest.raises(FlinkFormatError, match="cafebabe"):
        parse_class(b"PK\x03\x04....", "x.class")
    with pytest.raises(FlinkFormatError, match="ends early"):
        parse_class(b"\xca\xfe\xba\xbe\x00\x00\x00\x3d\x00\x09\x01", "x.class")


def test_signatures_of_nested_generics():
    t = parse_type_descriptor("Ljava/util/Map<Ljava/lang/String;Ljava/util/List<+Lpkg/A$B;>;>;")
    assert str(t) == "java.util.Map<java.lang.String, java.util.List<pkg.A$B>>"
    assert parse_type_descriptor("[J").name == "long[]"
    assert parse_type_descriptor("TT;") is None


# --- wire-level cases the fixtures do not reach, bytes written by hand from Kryo's format --------------------
def _kryo(cls: str, layout: dict | None = None, version: int = 5) -> KryoDecoder:
    return KryoDecoder(KryoConfig(cls, [(cls, False)]), Layouts(type_hints=layout or {}), version)


def _ascii(text: str) -> bytes:
    return text[:-1].encode() + bytes([ord(text[-1]) | 0x80])


@pytest.mark.parametrize("version,length", [(5, b"\x04"), (2, b"\x03")])
def test_list_of_mixed_classes_with_a_back_reference(version, length):
    # ArrayList by name (1, name id 0, name), new object (1), length (Kryo 5: 3 + 1, flag "same class" off;
    # Kryo 2: 3), then each element with its class: String (id 1 + 2, new, "ab"), Integer (id 0 + 2, no
    # reference marker, zig-zag -3 = 5), the String again as a back-reference (class, then reference 1 + 2)
    data = bytes([1, 0]) + _ascii("java.util.ArrayList") + b"\x01" + length + b"\x03\x01" + _ascii("ab") + b"\x02\x05" + b"\x03\x03"
    assert _kryo("java.util.ArrayList", version=version).read(DataInput(data)) == ["ab", -3, "ab"]


def test_hash_map_kryo5_and_one_char_and_unicode_strings():
    # HashMap by name, new, size + 1 = 3; keys and values with their classes; "é" takes Kryo's UTF-8 path
    # (bit 7 set: length 1 + 1, then the char's UTF-8 bytes), "a" too (Kryo writes 1-char strings that way)
    data = (bytes([1, 0]) + _ascii("java.util.HashMap") + b"\x01\x03"
            + b"\x03\x01\x82a" + b"\x09\x80\x80\x80\x80\x40"  # "a" -> Long (id 7 + 2), zig-zag of 2^33 is 2^34
            + b"\x03\x01\x82\xc3\xa9" + b"\x00")  # "é" -> null
    assert _kryo("java.util.HashMap").read(DataInput(data)) == {"a": 1 << 33, "é": None}


def test_field_serializer_orders_fields_by_name_and_reads_enums_from_hints():
    hints = {"p.Thing": {"zeta": "long", "alpha": "String", "tier": "p.Tier"}, "p.Tier": ["LOW", "HIGH"]}
    dec = KryoDecoder(KryoConfig("p.Thing", [("p.Thing", False), ("p.Tier", False)]), Layouts(type_hints=hints), 5)
    # class 85 + 2, new; alpha (final String: new + "x1"); tier (not final in a hint: class 86 + 2, enums
    # carry no reference marker in Kryo 5, ordinal 1 + 1); zeta (primitive long zig-zag 5 = 10)
    data = bytes([87, 1]) + b"\x01" + _ascii("x1") + bytes([88, 2]) + bytes([10])
    assert dec.read(DataInput(data)) == {"alpha": "x1", "tier": "HIGH", "zeta": 5}


def test_a_class_registered_with_the_jobs_own_serializer_stays_raw():
    dec = KryoDecoder(KryoConfig("a.B", [("a.B", True)]), Layouts(), 5)
    with pytest.raises(UnknownLayout, match="serializer of the job's own"):
        dec.read(DataInput(bytes([87, 1, 0])))
    with pytest.raises(UnknownLayout, match="class id 200"):
        dec.read(DataInput(bytes([0xCA, 0x01])))


@pytest.mark.parametrize("name,kryo", KRYO_FIXTURES[:4])
def test_pojo_fields_flink_gave_to_kryo(name, kryo):
    """Profile's LocalDate / LocalDateTime fields (and, in Flink 1.x, its List and Map fields) are Kryo fields of a
    POJO: Kryo 2 writes the JDK classes' private fields, Kryo 5 its time serializers; no jar needed."""
    snap = explorer.open(PROD / name, uids=["user-types"])
    df = snap.keyed_state(operator="user-types", state="profile")
    want = _expected(name, "profile")
    assert len(df) == len(want) == 24
    for key, v in zip(df["key"], df["value"]):
        w = want[key]["fields"]
        assert isinstance(v, dict), (key, v)
        assert v["day"].isoformat() == w["day"]["value"]
        # to the nanosecond, inside the POJO's struct column too
        assert v["lastLocal"] == pd.Timestamp(w["lastLocal"]["value"]) and v["lastLocal"].nanosecond
        assert _plain(v["tags"]) == w["tags"]
        assert v["perCategory"] == {k: x for k, x in w["perCategory"]["entries"]}  # no key of another row added


def test_hostile_values_end_in_unknown_layout_or_eof_not_a_crash():
    # 300 nested ArrayLists, each holding the next (Kryo 5: one element, "all of one class" flag, the class by
    # its name id 0, "no nulls", a new object): stops at the nesting limit
    nested = (bytes([1, 0]) + _ascii("java.util.ArrayList") + b"\x01\x82") + (b"\x01\x00\x00\x01\x82" * 300)
    with pytest.raises(UnknownLayout, match="nests deeper"):
        _kryo("java.util.ArrayList").read(DataInput(nested))
    with pytest.raises(EOFError):
        _kryo("java.util.ArrayList").read(DataInput(bytes([1, 0]) + _ascii("java.util.ArrayList") + b"\x01\x05\x03\x01"))


def test_kryo_local_time_keeps_its_nanoseconds():
    from explorer.readers.flink.kryo import _time_value  # noqa: PLC2701 - the one conversion, without Kryo bytes

    assert _time_value("java.time.LocalTime", {"hour": 1, "minute": 2, "second": 3, "nano": 5000}) \
        == dt.time(1, 2, 3, 5)
    assert _time_value("java.time.LocalTime", {"hour": 1, "minute": 2, "second": 3, "nano": 5}) \
        == pd.Timedelta("01:02:03.000000005")
