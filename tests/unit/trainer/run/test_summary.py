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


def test_a_run_taken_up_at_a_cut_reports_what_it_trained_and_the_streams_count_beside():
    taken_up = {**RESULT, "samples": 26000.0, "trained_samples": 6000.0, "taken_up_samples": 20000.0, "wire_bytes": 60000.0}
    text = summary_text(taken_up, "exports", ["0179"], None)
    assert text.startswith("trained 6,000 samples in 1.0 s") and "on from a checkpoint cut at 20,000" in text
    assert "the stream's samples are 26,000" in text and "wire 10.0 B/sample" in text
    assert "checkpoint cut" not in summary_text(RESULT, None, [], None)


def test_a_run_with_nothing_new_says_so_instead_of_bytes_per_sample_or_exports():
    idle = {**RESULT, "samples": 20000.0, "trained_samples": 0.0, "taken_up_samples": 20000.0, "wire_bytes": 86933.0}
    text = summary_text(idle, "exports", [], None)
    assert "B/sample" not in text and "nothing new in the stream: 86,933 bytes of calls" in text
    assert "no export written to exports: nothing was trained since the model's last export" in text
    failed = summary_text({**RESULT, "trained_samples": 1000.0}, "exports", [], None)
    assert "no export written to exports: the log says why" in failed


def test_a_holdout_too_small_for_the_managers_gate_is_called_so():
    small = summary_text({**RESULT, "held_out_samples": 800.0}, "exports", ["0179"], None)
    assert "the last 800 held out of training" in small and "gate needs 1,000 at its defaults: too few" in small
    assert "too few" not in summary_text({**RESULT, "held_out_samples": 2000.0}, "exports", ["0179"], None)


def test_a_run_that_waited_for_data_gives_its_speed_while_data_came():
    waited = {**RESULT, "elapsed_s": 60.0, "examples_per_s": 500.0, "idle_s": 50.0, "busy_examples_per_s": 3000.0}
    assert "(500/s on cpu; 3,000/s while data came, idle 50.0 s)" in summary_text(waited, None, [], None)
    busy = {**RESULT, "idle_s": 0.05, "busy_examples_per_s": 1050.0}
    assert "while data came" not in summary_text(busy, None, [], None)


def test_in_process_shards_bytes_are_not_called_a_wire():
    local = summary_text({**RESULT, "ps": "local", "wire_bytes": 2000.0}, None, [], None)
    assert "PS calls (in process, no wire) 2.0 B/sample" in local and "  wire " not in local
    assert "  wire 2.0 B/sample" in summary_text({**RESULT, "ps": "remote", "wire_bytes": 2000.0}, None, [], None)


def test_files_the_stream_lost_are_said_at_the_end():
    text = summary_text({**RESULT, "source_files_lost": 2.0}, None, [], None)
    assert "2 file(s) of the stream not trained" in text
    assert "not trained" not in summary_text(RESULT, None, [], None)
