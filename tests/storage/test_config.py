"""S3 settings come from where the AWS tools take them: the environment, then the profile's
credentials and config files; an endpoint of an S3-compatible server is honoured."""

from __future__ import annotations

from pathlib import Path

from explorer.storage import aws_settings, s3_options


def _files(home: Path) -> None:
    (home / ".aws").mkdir()
    (home / ".aws" / "credentials").write_text(
        "[default]\naws_access_key_id = DEFAULTKEY\naws_secret_access_key = defaultsecret\n"
        "[ci]\naws_access_key_id = CIKEY\naws_secret_access_key = cisecret\naws_session_token = citoken\n")
    (home / ".aws" / "config").write_text(
        "[default]\nregion = eu-west-1\n"
        "[profile ci]\nregion = eu-central-1\nca_bundle = /etc/ci-ca.pem\ns3 =\n    endpoint_url = https://minio.ci:9000\n")


def test_profile_from_the_shared_files(tmp_path):
    _files(tmp_path)
    s = aws_settings({"HOME": str(tmp_path), "AWS_PROFILE": "ci"})
    assert (s["access_key"], s["secret_key"], s["session_token"]) == ("CIKEY", "cisecret", "citoken")
    assert s["region"] == "eu-central-1" and s["endpoint_url"] == "https://minio.ci:9000"
    assert s["ca_bundle"] == "/etc/ci-ca.pem"
    d = aws_settings({"HOME": str(tmp_path)})
    assert (d["access_key"], d["region"]) == ("DEFAULTKEY", "eu-west-1") and "endpoint_url" not in d


def test_environment_wins_over_files(tmp_path):
    _files(tmp_path)
    env = {"HOME": str(tmp_path), "AWS_PROFILE": "ci", "AWS_ACCESS_KEY_ID": "ENVKEY", "AWS_SECRET_ACCESS_KEY": "envsecret",
           "AWS_REGION": "us-west-2", "AWS_ENDPOINT_URL": "http://general:1", "AWS_ENDPOINT_URL_S3": "http://s3only:2",
           "AWS_CA_BUNDLE": "/env/ca.pem"}
    s = aws_settings(env)
    assert (s["access_key"], s["region"], s["endpoint_url"], s["ca_bundle"]) == (
        "ENVKEY", "us-west-2", "http://s3only:2", "/env/ca.pem")
    assert "session_token" not in s  # the file's token belongs to the file's keys
    opts = s3_options(env=env)
    assert (opts["endpoint_override"], opts["scheme"], opts["tls_ca_file_path"]) == ("s3only:2", "http", "/env/ca.pem")
    assert s3_options({"endpoint_url": "https://other:3", "region": "x"}, env=env)["endpoint_override"] == "other:3"


def test_files_named_by_the_environment(tmp_path):
    creds = tmp_path / "creds.ini"
    creds.write_text("[default]\naws_access_key_id = K\naws_secret_access_key = S\n")
    s = aws_settings({"HOME": str(tmp_path / "nohome"), "AWS_SHARED_CREDENTIALS_FILE": str(creds)})
    assert s["access_key"] == "K" and "region" not in s
    assert s3_options(env={"HOME": str(tmp_path / "nohome")}) == {}  # nothing set: the SDK's own chain decides
