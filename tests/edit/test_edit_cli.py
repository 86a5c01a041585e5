"""``state-explorer edit`` and ``state-explorer compatible`` on an engine savepoint, end to end through main()."""

from __future__ import annotations

import pytest

import explorer
from explorer.cli import main


@pytest.fixture(scope="module")
def savepoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "sp"
    assert main(["savepoint", "url_counts", "-n", "3000", "--after-records", "1500", "-o", str(out)]) == 0
    return out


def test_edit_then_compatible(savepoint, tmp_path, capsys):
    capsys.readouterr()
    hot = explorer.open(savepoint).hot_keys().iloc[0]["key"]
    out = tmp_path / "edited"
    assert main(["edit", str(savepoint), "-o", str(out), "--rename-operator", "url-count=url-count-v2",
                 "--drop-key", f"url-count-v2={hot}", "--drop-key", f"url-stats={hot}",
                 "--max-parallelism", "256"]) == 0
    printed = capsys.readouterr().out
    assert "rename_operator" in printed and f"wrote {out}" in printed
    snap = explorer.open(out)
    assert hot not in set(snap.keyed_state()["key"])
    assert set(snap.operators["max_parallelism"]) == {256}

    # the original job (uid url-count, max parallelism 128) cannot take the edited savepoint
    assert main(["compatible", str(out), str(savepoint)]) == 1
    printed = capsys.readouterr().out
    assert "will fail" in printed and "url-count-v2" in printed and "max parallelism" in printed
    assert main(["compatible", str(savepoint), str(savepoint)]) == 0
    assert "the new job restores it" in capsys.readouterr().out

    # and the job that has the new uid and max parallelism restores it
    assert main(["edit", str(savepoint), "-o", str(tmp_path / "e2"), "--drop-key", f"url-count={hot}",
                 "--max-parallelism", "256"]) == 0
    assert main(["run", "url_counts", "-n", "3000", "--max-parallelism", "256",
                 "--from-savepoint", str(tmp_path / "e2")]) == 0


def test_edit_usage_errors(savepoint, tmp_path, capsys):
    assert main(["edit", str(savepoint), "-o", str(tmp_path / "x")]) == 2
    assert "no edit given" in capsys.readouterr().err
    assert main(["edit", str(savepoint), "-o", str(tmp_path / "x"), "--drop-operator", "nope"]) == 2
    assert "no operator 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["edit", str(savepoint), "-o", str(tmp_path / "x"), "--drop-key", "nokey"])


def test_edit_parallelism_splits_the_keyed_state(savepoint, tmp_path, capsys):
    import explorer

    out = tmp_path / "p3"
    assert main(["edit", str(savepoint), "-o", str(out), "--parallelism", "3"]) == 0
    assert "with_parallelism(parallelism=3" in capsys.readouterr().out
    after = explorer.open(out).keyed_state()
    assert sorted(after.subtask.unique()) == [0, 1, 2]
    assert len(after) == len(explorer.open(savepoint).keyed_state())
