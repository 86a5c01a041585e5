"""Where snapshots live: local folders, S3, GCS, HDFS and Azure, read through one path type.

:func:`as_path` turns what a user passes to ``explorer.open`` into a path the readers use:
a :class:`pathlib.Path` for a local path (``file://`` too), a :class:`StoragePath` for
``s3://`` (``s3a://``), ``gs://``, ``hdfs://`` and ``abfs://`` (``abfss://``) URLs. Readers
list, test and open files through the methods both have, so they need not know where the
bytes are; remote files are fetched lazily into a bounded :class:`FileCache`
(:mod:`.cache`), read by range where a format lets them (:mod:`.remote`), and settings come
from the environment and the AWS config files (:mod:`.config`).

This is a low layer (with ``format``): it imports only :mod:`explorer.errors`.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from ..errors import StorageError
from .cache import FileCache, parse_size
from .config import aws_settings, s3_options
from .remote import FetchStats, RangedFile, Store, StoragePath, fetch_stats, reset_fetch_stats, storage_error

__all__ = ["FetchStats", "FileCache", "RangedFile", "Store", "StoragePath", "as_path", "aws_settings", "beside",
           "fetch_stats", "is_remote", "is_remote_url", "parse_size", "reset_fetch_stats", "s3_options",
           "storage_error"]

#: URL schemes read through a remote store
REMOTE_SCHEMES = ("s3", "s3a", "s3n", "gs", "gcs", "hdfs", "viewfs", "abfs", "abfss")

_FS_LOCK = threading.Lock()
_FILESYSTEMS: dict[tuple, pafs.FileSystem] = {}


def is_remote_url(path: Any) -> bool:
    """Whether ``path`` is a URL of a remote store (a string, not a Path)."""
    return isinstance(path, str) and urlparse(path).scheme.lower() in REMOTE_SCHEMES


def is_remote(path: Any) -> bool:
    """Whether ``path`` is a remote :class:`StoragePath` or a remote URL."""
    return isinstance(path, StoragePath) or is_remote_url(path)


def _filesystem(kind: tuple, make) -> pafs.FileSystem:
    with _FS_LOCK:
        if kind not in _FILESYSTEMS:
            _FILESYSTEMS[kind] = make()
        return _FILESYSTEMS[kind]


def _freeze(options: Mapping[str, Any]) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in options.items()))


def as_path(path: Any, storage_options: Mapping[str, Any] | None = None,
            cache: FileCache | None = None) -> "Path | StoragePath":
    """A :class:`StoragePath` for a remote URL, a :class:`~pathlib.Path` for anything local; a path
    that already is one comes back as it is. ``storage_options``: arguments of the pyarrow filesystem
    (S3: any :class:`pyarrow.fs.S3FileSystem` argument or ``endpoint_url``); ``cache``: where fetched
    files go (default :class:`FileCache()`)."""
    if isinstance(path, (StoragePath, Path)):
        return path
    if not isinstance(path, str):
        return Path(path)
    u = urlparse(path)
    scheme = u.scheme.lower()
    if scheme == "file":
        return Path(unquote(u.path))
    if scheme not in REMOTE_SCHEMES:
        return Path(path)
    opts = dict(storage_options or {})
    try:
        store = _open_store(scheme, u, opts, cache)
    except StorageError:
        raise
    except Exception as exc:  # noqa: BLE001 - a filesystem that cannot be made: name the URL
        raise storage_error(exc, path, "connecting to") from exc
    return StoragePath(store, _key_of(path, u, scheme))


def _key_of(path: str, u, scheme: str) -> str:
    """The key a store of ``scheme`` names the URL ``path`` (parsed as ``u``) by."""
    key = unquote(u.path)
    if scheme in ("s3", "s3a", "s3n", "gs", "gcs"):
        if not u.netloc:
            raise StorageError(f"{path}: found no bucket name; expected {scheme}://BUCKET/PATH")
        key = u.netloc + key
    elif scheme in ("abfs", "abfss"):
        container = u.username or ""
        if not container:
            raise StorageError(f"{path}: found no container; expected {scheme}://CONTAINER@ACCOUNT.dfs.core.windows.net/PATH")
        key = container + key
    return key


#: the store kind of each scheme, as the first part of a store's id (``Store.store_id``)
_STORE_KIND = {"s3": "s3", "s3a": "s3", "s3n": "s3", "gs": "gs", "gcs": "gs", "hdfs": "hdfs", "viewfs": "hdfs",
               "abfs": "abfs", "abfss": "abfs"}


def beside(url: str, like: StoragePath) -> StoragePath | None:
    """The folder ``url`` names, on the store of ``like`` (its filesystem, credentials and cache: what the user
    opened the snapshot with), or None when ``url`` is not a URL of that kind of store (a local path; a ``gs://``
    folder beside an ``s3://`` snapshot). What ``allow_roots=`` URLs are compared with a remote snapshot's
    files as."""
    u = urlparse(url) if isinstance(url, str) else None
    scheme = u.scheme.lower() if u is not None else ""
    if scheme not in REMOTE_SCHEMES or not like.store.store_id.startswith(_STORE_KIND[scheme] + "|"):
        return None
    out = StoragePath(like.store, _key_of(url, u, scheme))
    if scheme in ("hdfs", "viewfs", "abfs", "abfss") and str(out).split("/")[2] != str(like).split("/")[2]:
        return None  # another cluster or account: not this store
    return out


def _open_store(scheme: str, u, opts: dict[str, Any], cache: FileCache | None) -> Store:
    if scheme in ("s3", "s3a", "s3n"):
        kw = s3_options(opts)
        fs = _filesystem(("s3", _freeze(kw)), lambda: pafs.S3FileSystem(**kw))
        sid = f"s3|{kw.get('scheme', 'https')}://{kw.get('endpoint_override', 'aws')}|{kw.get('access_key', '')}"
        hint = None if "access_key" in kw or kw.get("anonymous") else (
            "no S3 credentials were found in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or in "
            "the profile's ~/.aws/credentials and ~/.aws/config (AWS_PROFILE), so the request went out as the "
            "AWS SDK's own chain left it (instance role, SSO, or unsigned); expected credentials that may read it")
        return Store(fs, sid, lambda k: f"s3://{k}", cache, hint)
    if scheme in ("gs", "gcs"):
        fs = _filesystem(("gs", _freeze(opts)), lambda: pafs.GcsFileSystem(**opts))
        return Store(fs, f"gs|{opts.get('endpoint_override', 'google')}", lambda k: f"gs://{k}", cache)
    if scheme in ("hdfs", "viewfs"):
        host = f"{scheme}://{u.hostname}" if scheme == "viewfs" else (u.hostname or "default")
        port = u.port or (8020 if u.hostname else 0)
        fs = _filesystem(("hdfs", host, port, _freeze(opts)),
                         lambda: pafs.HadoopFileSystem(host, port, **opts))
        base = f"{scheme}://{u.netloc}"
        return Store(fs, f"hdfs|{u.netloc}", lambda k: base + (k if k.startswith("/") else "/" + k), cache)
    # abfs[s]://container@account.dfs.core.windows.net/path (pyarrow >= 16)
    account = (u.hostname or "").split(".")[0]
    if not hasattr(pafs, "AzureFileSystem"):
        raise StorageError(f"{u.geturl()}: this pyarrow has no AzureFileSystem; expected pyarrow >= 16 for abfs://")
    azure_opts = {"account_name": account, **opts}
    fs = _filesystem(("abfs", _freeze(azure_opts)), lambda: pafs.AzureFileSystem(**azure_opts))
    host = u.hostname

    def url_of(k: str) -> str:
        container, _, rest = k.partition("/")
        return f"{scheme}://{container}@{host}/{rest}"

    return Store(fs, f"abfs|{account}", url_of, cache)
