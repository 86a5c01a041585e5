"""Where a remote store is and who we are to it, taken as the AWS tools take it.

S3 settings come from the environment and the shared config files, in the order the AWS
CLI and SDKs document ("Configuration and credential file settings", "Environment
variables to configure the AWS CLI"):

* credentials: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``;
  else the profile (``AWS_PROFILE``, else ``default``) in ``AWS_SHARED_CREDENTIALS_FILE``
  (``~/.aws/credentials``), then in ``AWS_CONFIG_FILE`` (``~/.aws/config``, section
  ``[profile NAME]`` or ``[default]``); else nothing, and the SDK's own chain (instance
  metadata, SSO, web identity) decides;
* region: ``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile's ``region``;
* endpoint: ``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the profile's ``s3 =`` sub-section
  ``endpoint_url``, the profile's ``endpoint_url`` (an S3-compatible server: MinIO, Ceph, moto);
* CA bundle: ``AWS_CA_BUNDLE``, the profile's ``ca_bundle``.

``explorer.open(url, storage_options={...})`` overrides any of these
(:func:`s3_options` merges them last).
"""

from __future__ import annotations

import configparser
import os
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse


def _profile_sections(path: Path, profile: str, config_style: bool) -> dict[str, str]:
    if not path.is_file():
        return {}
    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except configparser.Error:
        return {}
    names = [profile] if not config_style else ([f"profile {profile}", profile] if profile != "default" else ["default"])
    for name in names:
        if parser.has_section(name):
            return dict(parser.items(name))
    return {}


def _nested(value: str) -> dict[str, str]:
    """``s3 =`` sub-section of a config profile (indented ``key = value`` lines)."""
    out = {}
    for line in value.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def aws_settings(env: Mapping[str, str] | None = None, home: Path | None = None) -> dict[str, Any]:
    """The S3 settings the AWS tools would use here: ``access_key``, ``secret_key``,
    ``session_token``, ``region``, ``endpoint_url``, ``ca_bundle``, ``profile`` (absent when unset)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME", str(Path.home()))) if home is None else home
    profile = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
    creds_file = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials").expanduser()
    config_file = Path(env.get("AWS_CONFIG_FILE") or home / ".aws" / "config").expanduser()
    creds = _profile_sections(creds_file, profile, config_style=False)
    conf = _profile_sections(config_file, profile, config_style=True)
    out: dict[str, Any] = {"profile": profile}
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        out["access_key"], out["secret_key"] = env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            out["session_token"] = env["AWS_SESSION_TOKEN"]
    else:
        for source in (creds, conf):
            if source.get("aws_access_key_id") and source.get("aws_secret_access_key"):
                out["access_key"], out["secret_key"] = source["aws_access_key_id"], source["aws_secret_access_key"]
                if source.get("aws_session_token"):
                    out["session_token"] = source["aws_session_token"]
                break
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or conf.get("region")
    if region:
        out["region"] = region
    endpoint = (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
                or _nested(conf.get("s3", "")).get("endpoint_url") or conf.get("endpoint_url"))
    if endpoint:
        out["endpoint_url"] = endpoint
    ca = env.get("AWS_CA_BUNDLE") or conf.get("ca_bundle")
    if ca:
        out["ca_bundle"] = ca
    return out


def s3_options(overrides: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Keyword arguments of :class:`pyarrow.fs.S3FileSystem` from :func:`aws_settings`, then ``overrides``
    (``storage_options``: any S3FileSystem argument, or ``endpoint_url``)."""
    s = aws_settings(env)
    out: dict[str, Any] = {}
    for ours, theirs in (("access_key", "access_key"), ("secret_key", "secret_key"),
                         ("session_token", "session_token"), ("region", "region"), ("ca_bundle", "tls_ca_file_path")):
        if ours in s:
            out[theirs] = s[ours]
    over = dict(overrides or {})
    endpoint = over.pop("endpoint_url", None) or s.get("endpoint_url")
    if endpoint:
        u = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        out["endpoint_override"] = u.netloc + (u.path.rstrip("/") if u.path not in ("", "/") else "")
        out["scheme"] = u.scheme or "https"
        out.setdefault("region", "us-east-1")  # a custom endpoint: no region lookup against AWS
    out.update(over)
    return out
