"""Snapshots of every format read from a real S3 endpoint (moto's server on localhost, reached through
pyarrow's S3 client as AWS would be) give what the same snapshots give read locally; a one-operator
question fetches about that operator's bytes; a second open is served from the cache; a changed object
is fetched again; missing buckets, objects and bad credentials are clean errors naming the URL."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pandas as pd
import pytest

import explorer
from explorer.errors import SnapshotNotFoundError, StorageError
from explorer.format.snapshot import read_metadata
from explorer.storage import fetch_stats, reset_fetch_stats

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_data"
_n = itertools.count()


def _frame(snap) -> pd.DataFrame:
    df = snap.keyed_state()
    df = df.astype(str)
    return df.sort_values(list(df.columns), ignore_index=True)


def _same_as_local(s3, local: Path, prefix: str | None = None, **options) -> explorer.Snapshot:
    url = s3.upload(local, "snapshots", prefix or f"{local.name}-{next(_n)}")
    remote = explorer.open(url, **options)
    here = explorer.open(local, **options)
    assert str(remote.path).startswith("s3://") or remote.format == "spark-checkpoint"
    assert (remote.format, remote.kind, remote.checkpoint_id) == (here.format, here.kind, here.checkpoint_id)
    pd.testing.assert_frame_equal(remote.operators.astype(str), here.operators.astype(str))
    pd.testing.assert_frame_equal(_frame(remote), _frame(here))
    return remote


@pytest.mark.parametrize("rel", [
    "sessions/savepoint-rocksdb",                       # engine savepoint
    "url_counts/checkpoints",                           # engine checkpoint directory: newest chk-N
    "flink/heap-canonical-savepoint",                   # Flink heap savepoint
    "flink/rocksdb-native-savepoint",                   # Flink RocksDB native savepoint (SST files)
    "flink/rocksdb-incremental-checkpoint",             # Flink job directory: chk-N + shared/
    "flink/production/plain-filemerging-rocksdb-incremental-checkpoint",  # segments of merged files
    "spark/agg-hdfs",                                   # Spark checkpoint (HDFS-backed store)
])
def test_remote_read_equals_local_read(s3, rel):
    local = SAMPLES / rel
    if not local.exists():
        pytest.skip(f"{rel} not in sample_data")
    snap = _same_as_local(s3, local)
    if rel.startswith("spark/"):
        assert any("local mirror" in n for n in snap.notes)


def test_engine_native_rocksdb_incremental_checkpoint(s3, tmp_path):
    """RocksDB's own files (rocksdict needs local files): mirrored into the cache, then read as locally."""
    from explorer.engine import CollectSink, KeyedProcessFunction, StreamEnvironment, ValueStateDescriptor

    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n", int))

        def process_element(self, value, ctx, out):
            self.n.update((self.n.value() or 0) + 1)

    env = StreamEnvironment(parallelism=2, state_backend="rocksdb")
    env.enable_checkpointing(tmp_path / "chk", interval_records=400, retained=2, incremental=True)
    env.from_collection([(f"k{i % 97}", i) for i in range(2000)], name="src").key_by(0).process(
        Count(), name="count", uid="count").sink_to(CollectSink("out"), name="sink")
    env.execute()
    newest = max((tmp_path / "chk").glob("chk-*"), key=lambda p: int(p.name[4:]))
    assert any(s.get("state_format") == "rocksdb-native"
               for o in read_metadata(newest)["operators"] for s in o["subtasks"])
    snap = _same_as_local(s3, tmp_path / "chk")
    assert snap.path.name == newest.name


def _operator_bytes(folder: Path, operator: str) -> int:
    meta = read_metadata(folder)
    op = next(o for o in meta["operators"] if o["name"] == operator)
    rels = {s["file"] for sub in op["subtasks"] for s in sub["states"]}
    rels |= {sub["timers"]["file"] for sub in op["subtasks"] if sub.get("timers")}
    return sum(meta["files"][r]["bytes"] for r in rels)


def test_one_operator_question_fetches_that_operators_bytes_then_the_cache_serves_it(s3):
    local = SAMPLES / "fraud/savepoint-heap"
    url = s3.upload(local, "snapshots", f"fraud-{next(_n)}")
    ops = explorer.open(local).operators
    keyed = ops[ops["keyed"]]
    operator = keyed.sort_values("bytes")["operator"].iloc[-1]
    total = sum(f.stat().st_size for f in local.rglob("*") if f.is_file())
    reset_fetch_stats()
    snap = explorer.open(url)
    opened = fetch_stats()["bytes_fetched"]
    assert opened <= (local / "_metadata").stat().st_size + (64 << 10)  # the metadata, and a look at its magic bytes
    reset_fetch_stats()
    df = snap.keyed_state(operator=operator)
    asked = fetch_stats()
    want = _operator_bytes(local, operator)
    assert len(df) and asked["bytes_fetched"] <= 1.1 * want, (asked, want)
    assert asked["bytes_fetched"] < total
    # a second open: every file comes from the cache, no state byte is fetched again
    reset_fetch_stats()
    again = explorer.open(url).keyed_state(operator=operator)
    second = fetch_stats()
    assert second["bytes_fetched"] == 0 and second["cache_hits"] > 0, second
    pd.testing.assert_frame_equal(again.astype(str), df.astype(str))


def test_key_group_question_reads_row_groups_by_range(s3):
    local = SAMPLES / "url_counts/savepoint-heap"
    url = s3.upload(local, "snapshots", f"urls-{next(_n)}")
    snap = explorer.open(url)
    here = explorer.open(local)
    row = here.keyed_state().iloc[0]
    reset_fetch_stats()
    got = snap.keyed_state(operator=row["operator"], key_groups=[int(row["key_group"])])
    stats = fetch_stats()
    want = here.keyed_state(operator=row["operator"], key_groups=[int(row["key_group"])])
    pd.testing.assert_frame_equal(got.astype(str), want.astype(str))
    assert stats["ranged_reads"] > 0 and stats["files_fetched"] == 0, stats


def test_changed_remote_object_is_fetched_again(s3):
    checkpoints = SAMPLES / "url_counts/checkpoints"
    prefix = f"moving-{next(_n)}"
    url = s3.upload(checkpoints / "chk-1", "snapshots", prefix)
    first = explorer.open(url)
    pd.testing.assert_frame_equal(_frame(first), _frame(explorer.open(checkpoints / "chk-1")))
    s3.upload(checkpoints / "chk-2", "snapshots", prefix)  # the same names, other bytes
    reset_fetch_stats()
    second = explorer.open(url)
    pd.testing.assert_frame_equal(_frame(second), _frame(explorer.open(checkpoints / "chk-2")))
    assert fetch_stats()["files_fetched"] > 0


def test_missing_bucket_object_and_bad_credentials_are_clean_errors(s3, monkeypatch, tmp_path):
    s3.bucket("present")
    with pytest.raises(SnapshotNotFoundError, match="s3://no-such-bucket-here/x"):
        explorer.open("s3://no-such-bucket-here/x")
    with pytest.raises(SnapshotNotFoundError, match="s3://present/nothing/here"):
        explorer.open("s3://present/nothing/here")
    from moto.core.authorization import enable_iam_authentication

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOBODY000000000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with enable_iam_authentication():
        with pytest.raises(StorageError, match=r"s3://present/snap.*credentials"):
            explorer.open("s3://present/snap")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # none at all: not in the environment nor files
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with enable_iam_authentication():
        with pytest.raises(StorageError, match=r"s3://present/snap.*no S3 credentials were found"):
            explorer.open("s3://present/snap")


def test_list_remote_snapshots(s3):
    prefix = f"jobs-{next(_n)}"
    s3.upload(SAMPLES / "url_counts", "snapshots", prefix)
    remote = explorer.list(f"s3://snapshots/{prefix}")
    here = explorer.list(SAMPLES / "url_counts")
    cols = ["id", "kind", "format", "size_bytes", "files", "complete"]
    assert len(remote) == len(here) >= 3
    pd.testing.assert_frame_equal(remote[cols], here[cols])
    assert all(p.startswith(f"s3://snapshots/{prefix}/") for p in remote["path"])


def test_report_and_dashboard_data_of_a_remote_checkpoint_directory(s3, tmp_path):
    """What takes a path besides explorer.open: the CLI's ls, inspect and report, and the dashboards' data."""
    from explorer.cli import main
    from widgets._data import SnapshotData

    url = s3.upload(SAMPLES / "url_counts/checkpoints", "snapshots", f"report-{next(_n)}")
    assert main(["ls", url]) == 0
    assert main(["report", url, "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert f"Checkpoint history of {url}" in page and "Diff from chk-4 to chk-5" in page
    data = SnapshotData.from_any(url)
    assert str(data.checkpoint_dir) == url and data.snapshot.path.name == "chk-5"


@pytest.mark.parametrize("rel", ["flink/heap-canonical-savepoint", "flink/heap-checkpoint-compressed",
                                 "flink/heap-native-savepoint"])
def test_flink_key_group_question_reads_only_those_key_groups(s3, rel):
    """Flink's key-group offsets: a question about some key groups fetches their spans of the state files."""
    local = SAMPLES / rel
    url = s3.upload(local, "snapshots", f"kg-{next(_n)}")
    here = explorer.open(local)
    rows = here.keyed_state()
    kgs = sorted(set(rows["key_group"]))[:3]
    want = here.keyed_state(key_groups=kgs)
    snap = explorer.open(url)
    reset_fetch_stats()
    got = snap.keyed_state(key_groups=kgs)
    stats = fetch_stats()
    pd.testing.assert_frame_equal(got.astype(str).sort_values(list(got.columns), ignore_index=True),
                                  want.astype(str).sort_values(list(want.columns), ignore_index=True))
    state_bytes = sum(f.stat().st_size for f in local.rglob("*") if f.is_file() and f.name != "_metadata")
    assert len(want) and stats["ranged_reads"] > 0 and stats["bytes_fetched"] < state_bytes / 2, (stats, state_bytes)


def test_settings_from_a_profile_and_from_arguments(s3, monkeypatch, tmp_path):
    """The endpoint and keys from a profile in the AWS config files; or given to explorer.open itself,
    with a cache folder of the caller's choosing."""
    local = SAMPLES / "url_counts/savepoint-heap"
    url = s3.upload(local, "snapshots", f"profile-{next(_n)}")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_REGION"):
        monkeypatch.delenv(name)
    (tmp_path / "credentials").write_text("[bench]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
    (tmp_path / "config").write_text(f"[profile bench]\nregion = us-east-1\ns3 =\n    endpoint_url = {s3.endpoint}\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.setenv("AWS_PROFILE", "bench")
    pd.testing.assert_frame_equal(_frame(explorer.open(url)), _frame(explorer.open(local)))
    monkeypatch.delenv("AWS_PROFILE")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    snap = explorer.open(url, storage_options={"endpoint_url": s3.endpoint, "access_key": "testing",
                                               "secret_key": "testing"}, cache_dir=tmp_path / "mine")
    pd.testing.assert_frame_equal(_frame(snap), _frame(explorer.open(local)))
    assert len(list((tmp_path / "mine" / "objects").glob("*/*.json"))) >= 2


def test_flink_job_directory_opens_the_newest_complete_checkpoint(s3, tmp_path):
    """A chk-N being written (no _metadata yet) is skipped as Flink skips it, with a note; ls shows it."""
    import shutil

    job = tmp_path / "3f1c0e7d8f3a4a0e9c2d1f0a6b7c8d9e"
    shutil.copytree(SAMPLES / "flink/rocksdb-incremental-checkpoint", job)
    (job / "chk-9").mkdir()
    (job / "chk-9" / "a-state-file").write_bytes(b"\0" * 100)
    url = s3.upload(job, "snapshots", f"job-{next(_n)}/{job.name}")
    for where in (job, url):
        with pytest.warns(UserWarning, match="opened chk-8"):
            snap = explorer.open(where)
        assert snap.checkpoint_id == 8 and snap.path.name == "chk-8"
        assert "chk-9 (no complete _metadata" in snap.notes[0]
        listed = explorer.list(where)
        assert listed[["id", "complete"]].values.tolist() == [[8, True], [9, False]]


@pytest.mark.parametrize("rel", ["flink/rocksdb-native-savepoint", "flink/rocksdb-incremental-checkpoint"])
def test_flink_rocksdb_state_question_fetches_only_that_states_sst_files(s3, monkeypatch, rel):
    """Each state is a column family with SST files of its own: the files' tails (properties block,
    metaindex, footer; read by range) say whose they are, and only the asked state's are fetched."""
    from explorer.readers.flink import handles

    monkeypatch.setattr(handles, "SST_TAIL", 2 << 10)  # the samples' SST files are small
    local = SAMPLES / rel
    here = explorer.open(local)
    op = here.states.groupby("operator").size().idxmax()
    counts = here.keyed_state(operator=op).groupby("state").size()
    state = counts.idxmin()
    url = s3.upload(local, "snapshots", f"cf-{next(_n)}")
    reset_fetch_stats()
    got = explorer.open(url).keyed_state(operator=op, state=state)
    one = fetch_stats()["bytes_fetched"]
    monkeypatch.setenv("STATE_EXPLORER_CACHE_DIR", str(Path(os.environ["STATE_EXPLORER_CACHE_DIR"]) / "other"))
    reset_fetch_stats()
    explorer.open(url).keyed_state(operator=op)
    whole = fetch_stats()["bytes_fetched"]
    pd.testing.assert_frame_equal(got.astype(str), here.keyed_state(operator=op, state=state).astype(str))
    assert len(got) and one < whole, (one, whole)


def _table(reader, **query) -> pd.DataFrame:
    from explorer.readers.base import KeyedStateQuery

    pieces = [p.to_pandas() for p in reader.keyed_pieces(KeyedStateQuery(**query))]
    df = pd.concat(pieces, ignore_index=True).astype(str) if pieces else pd.DataFrame()
    return df.sort_values(list(df.columns), ignore_index=True) if len(df) else df


@pytest.mark.parametrize("rel", ["spark/agg-rocksdb", "spark/multi-operator-hdfs", "spark/agg-rocksdb-v2"])
def test_a_spark_checkpoint_fetches_only_the_files_of_the_batch_read(s3, rel):
    """Not the whole checkpoint: the asked batch's logs and the store files of its version back to the last
    full snapshot; other batches' files come when a question needs them (another batch, the history)."""
    from explorer.readers.spark import SparkCheckpointReader

    local = SAMPLES / rel
    total = sum(f.stat().st_size for f in local.rglob("*") if f.is_file())
    url = s3.upload(local, "snapshots", f"{local.name}-{next(_n)}")
    reset_fetch_stats()
    remote = explorer.open(url)
    here = explorer.open(local)
    pd.testing.assert_frame_equal(_frame(remote), _frame(here))
    fetched = fetch_stats()["bytes_fetched"]
    assert 0 < fetched < 0.6 * total, (fetched, total)
    mirror = Path(remote.reader.path)
    newest = max(int(p.name) for p in (local / "commits").iterdir() if p.name.isdigit())
    assert {p.name for p in (mirror / "offsets").iterdir() if p.name.isdigit()} == {str(newest)}
    assert not (mirror / "sources").exists()
    assert "files of batch" in remote.notes[0]
    assert remote.reader.checkpoint_ids() == SparkCheckpointReader(local).checkpoint_ids()
    # an older batch: its files are fetched then, and read as locally
    older = remote.reader.at_batch(newest - 3)
    pd.testing.assert_frame_equal(_table(older), _table(SparkCheckpointReader(local).at_batch(newest - 3)))
    assert (mirror / "offsets" / str(newest - 3)).is_file()
    # the history over every batch fetches the rest
    pd.testing.assert_frame_equal(remote.reader.history().drop(columns="path").astype(str),
                                  SparkCheckpointReader(local).history().drop(columns="path").astype(str))
    assert fetch_stats()["bytes_fetched"] <= total


def test_batch_files_keeps_a_version_back_to_its_full_snapshot():
    from explorer.readers.spark.layout import batch_files

    u = "0c6d5bb1-7d1e-4a52-9d8e-6a1f3f1c2b9a"
    rels = ["metadata", ".metadata.crc", "offsets/6", "offsets/.6.crc", "offsets/7", "commits/6", "commits/7",
            "commits/.7.crc", "sources/0/0", "state/0/_metadata/metadata",
            *[f"state/0/0/{v}.delta" for v in range(1, 9)], *[f"state/0/0/.{v}.delta.crc" for v in range(1, 9)],
            "state/0/0/4.snapshot", "state/0/0/.4.snapshot.crc",
            "state/1/0/3.zip", "state/1/0/6.zip", "state/1/0/7.changelog", "state/1/0/8.changelog",
            "state/1/0/SSTs/000009.sst", f"state/1/1/7_{u}.changelog", f"state/1/1/7_{u}.changelog.crc",
            f"state/1/1/.7_{u}.changelog.crc.crc", f"state/1/1/8_{u}.zip"]
    got = batch_files(rels, 6)  # batch 6 reads version 7
    assert got == sorted([
        "metadata", ".metadata.crc", "offsets/6", "offsets/.6.crc", "commits/6", "commits/7", "commits/.7.crc",
        "state/0/_metadata/metadata", "state/0/0/4.snapshot", "state/0/0/.4.snapshot.crc",
        *[f"state/0/0/{v}.delta" for v in (4, 5, 6, 7)], *[f"state/0/0/.{v}.delta.crc" for v in (4, 5, 6, 7)],
        "state/1/0/6.zip", "state/1/0/7.changelog", "state/1/0/SSTs/000009.sst", f"state/1/1/7_{u}.changelog",
        f"state/1/1/7_{u}.changelog.crc", f"state/1/1/.7_{u}.changelog.crc.crc"])
