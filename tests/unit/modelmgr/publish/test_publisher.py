"""The manager's idle cost does not grow with history: a poll lists the exports folder only
when it changed (or every RELIST_S) and looks only at exports not handled yet; handled
export folders past --keep-exports and rejection records past --keep-rejections go."""

from __future__ import annotations

import os

from ctr.repository.versions import Repository
from modelmgr.publish import publisher as publisher_module
from modelmgr.publish.gate import QualityGate
from modelmgr.publish.publisher import Publisher


def test_an_idle_manager_does_not_rescan_its_history(tmp_path, monkeypatch):
    exports = tmp_path / "exports"
    exports.mkdir()
    repo = Repository(tmp_path / "repo", "ctr")
    for i in range(2000):
        (exports / f"{i:020d}").mkdir()
    repo.mark_handled(f"{1999:020d}")  # every one of them handled
    (exports / f"{5000:020d}").mkdir()  # one being written: no READY yet
    pub = Publisher(repo, exports, QualityGate(), keep_exports=0)
    listed: list[object] = []
    real = os.scandir

    def scandir(p):  # type: ignore[no-untyped-def]
        listed.append(p)
        return real(p)

    stats: list[object] = []
    real_exists = type(exports).exists

    def exists(self):  # type: ignore[no-untyped-def]
        stats.append(self)
        return real_exists(self)

    monkeypatch.setattr(publisher_module.os, "scandir", scandir)
    monkeypatch.setattr(type(exports), "exists", exists)
    for _ in range(20):
        assert pub.poll() == []
    assert len(listed) == 1  # the folder did not change: listed once
    assert all(p.parent.name == f"{5000:020d}" for p in stats)  # type: ignore[attr-defined]  # only the unhandled export is looked at


def test_handled_exports_and_old_rejection_records_are_retired(tmp_path):
    exports = tmp_path / "exports"
    exports.mkdir()
    repo = Repository(tmp_path / "repo", "ctr")
    for i in range(30):
        (exports / f"{i:020d}").mkdir()
        (exports / f"{i:020d}" / "READY").write_text("x")  # no export.json: each is rejected (schema)
    pub = Publisher(repo, exports, QualityGate(), keep_exports=5, keep_rejections=10)
    assert pub.poll() == []
    assert len(list(exports.iterdir())) == 5 and sorted(p.name for p in exports.iterdir())[0] == f"{25:020d}"
    records = repo.rejected()
    assert len(records) == 10 and min(r["export_id"] for r in records) == f"{20:020d}"
    assert repo.counter().handled_through == f"{29:020d}"  # the pruned ones stay handled
