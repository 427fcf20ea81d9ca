"""Boundless: online CTR training and serving.

    import boundless
    summary = boundless.train(source="clicks.csv", model="fm", ps="local", label="clicked")
    with boundless.local_platform() as p: ...

`boundless.train`, `boundless.local_platform` and `boundless.PredictClient` load on first
use, so `import boundless` stays cheap (the `boundless` command imports this package too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ctr.runtime.kernel_cache import install as _install_kernel_cache

_install_kernel_cache()  # before any module of this package defines a numba kernel

if TYPE_CHECKING:
    from boundless.api import LocalPlatform, Models, NotPublished, TrainingSummary, local_platform, train
    from modelmgr.commands.admin_client import AdminClient
    from serving.client import PredictClient

__all__ = [
    "AdminClient",
    "LocalPlatform",
    "Models",
    "NotPublished",
    "PredictClient",
    "TrainingSummary",
    "local_platform",
    "train",
]
_WHERE = {
    "train": "boundless.api",
    "local_platform": "boundless.api",
    "LocalPlatform": "boundless.api",
    "Models": "boundless.api",
    "NotPublished": "boundless.api",
    "TrainingSummary": "boundless.api",
    "PredictClient": "serving.client",
    "AdminClient": "modelmgr.commands.admin_client",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'boundless' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_WHERE[name]), name)
