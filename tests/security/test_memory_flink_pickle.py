"""Issue 29, finding 12: a PyFlink pickle of nested shared references expands exponentially when converted.

``N`` then ``DUP TUPLE2`` repeated (two bytes a level) is a tuple of depth k sharing one object per
level: 2**k leaves once it is turned into Arrow values (k = 34 fits PyFlink's 72-byte record). The
restricted interpreter builds it cheaply (shared, no callables); converting it peaked at 651 MiB and
56 s, one level more was a MemoryError. The interpreter now counts the size the value expands to,
shared references counted each time they are used, against the memory budget, and refuses with
``SnapshotTooLargeError``.
"""

import shutil

import pytest

from explorer.errors import SnapshotTooLargeError
from explorer.format import budget
from explorer.readers.flink.pickles import read_pickle
from tests.support.peak import peak_of

SAMPLE = "sample_data/flink/production/pyflink-heap-canonical-savepoint"
AT, LENGTH = 4306, 72  # a 72-byte pickle record (after its 4-byte length) in the sample's _metadata
BUDGET_MB = 64
MARGIN_MB = 384


def bomb(levels: int, length: int | None = None) -> bytes:
    body = b"N" + b"2\x86" * levels
    room = 0 if length is None else length - 3 - len(body)  # filled with no-ops: PUSH NONE, POP (and one BININT1)
    pad = b"K\x000" + b"N0" * ((room - 3) // 2) if room % 2 else b"N0" * (room // 2)
    data = b"\x80\x04" + pad + body + b"."
    assert length is None or len(data) == length
    return data


def test_the_interpreter_refuses_an_exponential_expansion_without_building_it():
    with budget.using(BUDGET_MB << 20), pytest.raises(SnapshotTooLargeError, match="expands to"):
        read_pickle(bomb(34), "value")
    tree = None
    for _ in range(3):
        tree = (tree, tree)
    assert read_pickle(bomb(3)) == tree


def test_a_savepoint_holding_the_72_byte_bomb_is_refused_within_budget(tmp_path):
    snap = tmp_path / "sp"
    shutil.copytree(SAMPLE, snap)
    data = bytearray((snap / "_metadata").read_bytes())
    assert data[AT:AT + 2] == b"\x80\x04" and data[AT + LENGTH - 1:AT + LENGTH] == b"."
    data[AT:AT + LENGTH] = bomb(22, LENGTH)  # 4 M leaves: enough to pass any sane budget, quick to refuse
    (snap / "_metadata").write_bytes(bytes(data))
    peak, message = peak_of(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
        import explorer
        s = explorer.open({str(snap)!r}, memory_budget="{BUDGET_MB}MB")
        result = raised(s.keyed_state)
    """)
    assert message.startswith("SnapshotTooLargeError: ") and str(snap) in message, message
    assert peak < BUDGET_MB + MARGIN_MB, f"peak {peak:.0f} MiB"
