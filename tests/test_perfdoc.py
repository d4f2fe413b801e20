"""docs/performance.md's figures come from recorded `course bench` runs and nothing else."""
from __future__ import annotations

import json

from course import perfdoc
from conftest import ROOT


def test_performance_page_is_what_its_records_generate():
    block = perfdoc.current_block(ROOT)
    assert block == perfdoc.generated(ROOT), (
        "docs/performance.md's generated block does not match docs/bench/*.json: "
        "run `course bench --update-docs` (or record a new run)")


def test_a_record_renders_its_machine_and_versions(tmp_path):
    rec = {"date": "2026-11-24 20:00 UTC", "command": "course bench --quick", "seconds": 12,
           "machine": {"cores": 2, "cpu": "Some CPU", "system": "Linux x86_64", "python": "3.11.7",
                       "torch": "2.13.0+cpu", "gpu": None},
           "loadavg_before": 0.1, "loadavg_after": 1.9, "exit": 0, "output": "row 1\nrow 2\n"}
    text = perfdoc.markdown(rec, "quick.json")
    for part in ["`course bench --quick`", "2026-11-24 20:00 UTC", "2 cores", "Some CPU", "no GPU",
                 "before 0.1", "after 1.9", "torch 2.13.0+cpu", "row 1\nrow 2"]:
        assert part in text, part
    (tmp_path / "docs" / "bench").mkdir(parents=True)
    (tmp_path / "docs" / "bench" / "quick.json").write_text(json.dumps(rec))
    (tmp_path / "docs" / "performance.md").write_text(f"intro\n{perfdoc.START}\nold figures\n{perfdoc.END}\nend\n")
    assert perfdoc.update(tmp_path) and perfdoc.current_block(tmp_path) == perfdoc.generated(tmp_path)
    assert "old figures" not in (tmp_path / "docs" / "performance.md").read_text()
    assert not perfdoc.update(tmp_path)
