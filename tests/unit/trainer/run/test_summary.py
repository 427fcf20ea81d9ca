"""The trainer's closing words name what a person must not miss."""

from __future__ import annotations

from trainer.run.summary import summary_text

RESULT = {"samples": 1000.0, "elapsed_s": 1.0, "examples_per_s": 1000.0, "progressive_logloss": 0.5, "window_auc": 0.7}


def test_ranks_whose_mlps_differed_are_named_in_the_summary():
    text = summary_text({**RESULT, "mlp_replicas_differ": 2.0}, None, [], None)
    assert "the ranks' MLPs differed at 2 progress report(s)" in text
    assert "MLPs differed" not in summary_text({**RESULT, "mlp_replicas_differ": 0.0}, None, [], None)
    assert "MLPs differed" not in summary_text(RESULT, None, [], None)  # one process


def test_the_summary_names_the_cpu_the_run_used_when_it_is_known():
    text = summary_text({**RESULT, "cpu_s": 2.5}, None, [], None)
    assert "(1,000/s on cpu, 2.5 CPU-s)" in text
    assert "CPU-s" not in summary_text(RESULT, None, [], None)
