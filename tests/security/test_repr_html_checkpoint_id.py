"""Finding 4: ``checkpoint_id`` is read from the snapshot's metadata, which anyone can write; a string there was
printed unescaped by ``Snapshot._repr_html_`` (the notebook display)."""

from __future__ import annotations

import explorer
from tests.security.crafted import HOSTILE_HTML, hostile_job, with_metadata


def test_repr_html_checkpoint_id(tmp_path):
    sp, _ = hostile_job(tmp_path / "job")
    snap = explorer.open(with_metadata(sp, tmp_path / "crafted", checkpoint_id=HOSTILE_HTML))
    shown = snap._repr_html_()
    assert HOSTILE_HTML not in shown
    assert "#&lt;img src=x onerror=alert(1)&gt;" in shown
