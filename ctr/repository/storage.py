"""Where a repository's files live: a local folder or an S3-compatible bucket
(`s3://bucket/prefix`, through boto3; the endpoint and credentials come from boto3's
usual sources, e.g. AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).

Keys are '/'-separated paths under the repository's root. Writes of small files are
atomic on both (a rename locally, a single PUT on S3); files are uploaded whole in one PUT
so the returned ETag is their MD5, which the upload is checked against."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from ctr.runtime.extras import require


class Storage(Protocol):
    url: str
    local_root: Path | None  # the folder itself for local storage; None for S3

    def read_bytes(self, key: str) -> bytes:
        """FileNotFoundError when absent."""

    def write_bytes(self, key: str, data: bytes) -> None: ...

    def put_file(self, key: str, path: Path) -> None:
        """Uploads a file, checked against what arrived."""

    def get_file(self, key: str, path: Path) -> None: ...

    def exists(self, key: str) -> bool: ...

    def children(self, prefix: str) -> list[str]:
        """Names of the folders directly under `prefix`."""

    def files(self, prefix: str) -> list[str]:
        """Names of the files directly under `prefix`."""

    def delete_tree(self, prefix: str) -> None: ...

    def delete(self, key: str) -> None:
        """Removes one file (nothing when it is not there)."""


def open_storage(repo: str | Path) -> Storage:
    text = str(repo)
    if text.startswith("s3://"):
        bucket, _, prefix = text[5:].partition("/")
        if not bucket:
            raise ValueError(f"--repo {text}: an S3 repository is s3://BUCKET[/PREFIX]")
        return S3Storage(bucket, prefix.strip("/"))
    return LocalStorage(Path(repo))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalStorage:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.local_root: Path | None = root
        self.url = str(root)

    def _p(self, key: str) -> Path:
        return self.root / key

    def read_bytes(self, key: str) -> bytes:
        return self._p(key).read_bytes()

    def write_bytes(self, key: str, data: bytes) -> None:
        """Readers see the old file or the whole new one, also across a power cut."""
        path = self._p(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)

    def put_file(self, key: str, path: Path) -> None:
        dst = self._p(key)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dst)

    def get_file(self, key: str, path: Path) -> None:
        shutil.copyfile(self._p(key), path)

    def exists(self, key: str) -> bool:
        return self._p(key).exists()

    def children(self, prefix: str) -> list[str]:
        d = self._p(prefix)
        return sorted(p.name for p in d.iterdir() if p.is_dir()) if d.is_dir() else []

    def files(self, prefix: str) -> list[str]:
        d = self._p(prefix)
        return sorted(p.name for p in d.iterdir() if p.is_file()) if d.is_dir() else []

    def delete_tree(self, prefix: str) -> None:
        shutil.rmtree(self._p(prefix), ignore_errors=True)

    def delete(self, key: str) -> None:
        path = self._p(key)
        path.unlink(missing_ok=True)
        fsync_dir(path.parent)  # the removal is durable before what follows it


class StorageUnreachable(OSError):
    """The storage did not do what was asked for a reason of its own, not the data's: S3 or
    the network to it down, a timeout, throttling, credentials refused. A writer tries the
    same work again later (modelmgr's publisher does, as for a full disk)."""


class S3Storage:
    def __init__(self, bucket: str, prefix: str, client: Any = None) -> None:
        boto3 = require("boto3")  # only S3 repositories load it

        self.bucket = bucket
        self.prefix = prefix
        self.local_root: Path | None = None
        self.url = f"s3://{bucket}/{prefix}".rstrip("/")
        self.s3 = client or boto3.client("s3")
        errors = require("botocore.exceptions")
        self._unreached = (errors.BotoCoreError, errors.ClientError)

    @contextlib.contextmanager
    def _reaching(self, key: str) -> Iterator[None]:
        """botocore's errors (no endpoint, no credentials, no bucket, access denied) as
        StorageUnreachable, an OSError naming the object: the commands print it as the error
        of an unreadable folder, where a botocore traceback came out, and daemons treat it as
        one."""
        try:
            yield
        except self._unreached as e:
            raise StorageUnreachable(f"{self.url}/{key}: {e}") from None

    def _k(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def object_key(self, key: str) -> str:
        """The bucket's key of a repository key."""
        return self._k(key)

    def read_bytes(self, key: str) -> bytes:
        with self._reaching(key):
            try:
                return self.s3.get_object(Bucket=self.bucket, Key=self._k(key))["Body"].read()  # type: ignore[no-any-return]
            except self.s3.exceptions.NoSuchKey:
                raise FileNotFoundError(f"{self.url}/{key}") from None

    def write_bytes(self, key: str, data: bytes) -> None:
        md5 = hashlib.md5(data, usedforsecurity=False)
        with self._reaching(key):
            self.s3.put_object(
                Bucket=self.bucket, Key=self._k(key), Body=data, ContentMD5=base64.b64encode(md5.digest()).decode()
            )

    def put_file(self, key: str, path: Path) -> None:
        md5 = hashlib.md5(usedforsecurity=False)
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                md5.update(chunk)
        with open(path, "rb") as f, self._reaching(key):  # one PUT, checked by the server against Content-MD5
            r = self.s3.put_object(
                Bucket=self.bucket, Key=self._k(key), Body=f, ContentMD5=base64.b64encode(md5.digest()).decode()
            )
        if r.get("ETag", "").strip('"') != md5.hexdigest():
            raise OSError(f"{self.url}/{key}: the stored object's ETag does not match the file's MD5")

    def get_file(self, key: str, path: Path) -> None:
        try:
            self.s3.download_file(self.bucket, self._k(key), str(path))
        except Exception as e:  # botocore's ClientError for a missing key
            raise FileNotFoundError(f"{self.url}/{key}: {e}") from None

    def exists(self, key: str) -> bool:
        with self._reaching(key):  # no endpoint is not "not there"
            try:
                self.s3.head_object(Bucket=self.bucket, Key=self._k(key))
                return True
            except self.s3.exceptions.ClientError:  # 404 (or no access): not there for a reader
                return False

    def _list(self, prefix: str) -> tuple[list[str], list[str]]:
        full = self._k(prefix).rstrip("/") + "/" if prefix else (self.prefix + "/" if self.prefix else "")
        dirs, files = [], []
        with self._reaching(prefix):
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full, Delimiter="/"):
                dirs += [p["Prefix"][len(full) :].rstrip("/") for p in page.get("CommonPrefixes", [])]
                files += [o["Key"][len(full) :] for o in page.get("Contents", [])]
        return sorted(dirs), sorted(files)

    def children(self, prefix: str) -> list[str]:
        return self._list(prefix)[0]

    def files(self, prefix: str) -> list[str]:
        return self._list(prefix)[1]

    def delete(self, key: str) -> None:
        with self._reaching(key):
            self.s3.delete_object(Bucket=self.bucket, Key=self._k(key))

    def delete_tree(self, prefix: str) -> None:
        full = self._k(prefix).rstrip("/") + "/"
        with self._reaching(prefix):
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    self.s3.delete_objects(Bucket=self.bucket, Delete={"Objects": keys})
