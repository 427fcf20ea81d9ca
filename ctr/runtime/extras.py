"""Optional dependencies and the extras that install them. The core (LR, FM and FFM training
and serving, the PS, the manager, the client library) needs none of them; a feature that
needs one imports it through `require`, so a missing one is a one-line error that names the
extra to install instead of a traceback."""

from __future__ import annotations

import importlib
from types import ModuleType

# the top-level module -> (the extra that installs it, what it is for)
EXTRAS = {
    "torch": ("dnn", "the wdl and deepfm models"),
    "confluent_kafka": ("kafka", "Kafka sources"),
    "boto3": ("s3", "S3 repositories"),
    "cryptography": ("tls", "certificates (boundless certs, expiry checks)"),
    "matplotlib": ("report", "boundless report's figures"),
    "pyarrow": ("parquet", "Parquet sources"),
}


class MissingExtra(ImportError):
    """A feature was asked for whose optional dependency is not installed."""


def hint(module: str) -> str:
    """The line a user sees when `module` (or a module of its package) is missing."""
    top = module.split(".")[0]
    extra, what = EXTRAS[top]
    return f"{what} need {top}, which is not installed: pip install 'boundless[{extra}]' (or 'boundless[all]')"


def require(module: str) -> ModuleType:
    """Imports an optional dependency, or raises MissingExtra naming its extra."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == module.split(".")[0]:
            raise MissingExtra(hint(module)) from None
        raise


def missing_extra(error: BaseException) -> str | None:
    """The hint for an ImportError of an optional dependency raised anywhere below; else None."""
    if isinstance(error, MissingExtra):
        return str(error)
    if isinstance(error, ModuleNotFoundError) and error.name and error.name.split(".")[0] in EXTRAS:
        return hint(error.name)
    return None
