"""`python -m perf.logs`, what the GPU scripts in perf/ print from their logs, on small logs: the scorer's
test logs (`tests/scoring/scoring_logs.py`) and an official result set (`tests/data/mlperf_results`)."""

from __future__ import annotations

import json

import pytest
import torch

from perf import logs
from tests.scoring.scoring_logs import RESULTS, T0, bert_log_lines, mllog_line, write_log

NVIDIA_LORA = RESULTS / "v4.1/NVIDIA/h200_ngc24.09_nemo/llama2_70b_lora"


def bert_run(folder, evals, losses):
    """A runner's LOGDIR: one BERT log with these evaluations and the trainer's step lines."""
    folder.mkdir()
    steps = [f"step {i} samples {samples} loss {loss}" for i, (samples, loss) in enumerate(losses, 1)]
    lines = bert_log_lines(evals=evals)
    lines.insert(-3, mllog_line("backend_precision", "bf16"))
    write_log(folder / "bert_test_1.log", lines[:-3] + steps + lines[-3:])
    return folder


def test_compare_sets_each_run_beside_the_first(tmp_path, capsys):
    bf16 = bert_run(tmp_path / "curve_bf16", ((1000, 0.40), (2000, 0.50)), [(1000, 8.0), (2000, 7.0)])
    fp8 = bert_run(tmp_path / "curve_fp8", ((1000, 0.41), (2000, 0.48)), [(1000, 8.4), (2000, 7.0)])
    out = tmp_path / "curves.json"
    assert logs.main(["compare", "--json", str(out), f"bf16={bf16}", f"fp8={fp8}"]) == 0
    printed = capsys.readouterr().out
    assert "'backend_precision': 'bf16'" in printed
    assert "| 2000 | 0.5000 | 0.4800 |" in printed and "| 1000 | 8.0000 | 8.4000 |" in printed
    assert "eval_accuracy: fp8 vs bf16: largest difference 0.0200, relative 4.00e-02 over 2 points" in printed
    assert "training loss: fp8 vs bf16: largest difference 0.4000, relative 5.00e-02 over 2 points" in printed
    written = json.loads(out.read_text())
    assert written["accuracy"]["fp8"] == {"1000": 0.41, "2000": 0.48}
    assert written["train_loss"]["bf16"] == {"1000": 8.0, "2000": 7.0}


def test_compare_names_a_run_without_a_log_and_fails(tmp_path, capsys):
    bf16 = bert_run(tmp_path / "bf16", ((1000, 0.4),), [(1000, 8.0)])
    assert logs.main(["compare", f"bf16={bf16}", f"cp2={tmp_path / 'cp2'}"]) == 1
    assert f"cp2: no run log in {tmp_path / 'cp2'}" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="'cp2' is not NAME=LOGDIR"):
        logs.main(["compare", "cp2"])


def test_throughput_of_each_run_against_a_rate(capsys):
    assert logs.main(["throughput", str(NVIDIA_LORA), "--against", "2.5"]) == 0
    printed = capsys.readouterr().out.splitlines()
    windows = "[2.47, 2.47, 2.47, 2.47, 2.47]"
    assert printed[0] == f"result_0.txt: tracked_stats throughput by eval window {windows} samples/s"
    ratios = "[0.989, 0.988, 0.989, 0.989, 0.989]"
    assert printed[1] == f"result_0.txt: against the bench's 2.5 samples/s: {ratios}"
    assert len(printed) == 20  # ten runs, two lines each


def test_throughput_in_tokens_per_gpu_and_against_a_bench(tmp_path, capsys):
    run = tmp_path / "runner"
    run.mkdir()
    lines = [mllog_line("max_sequence_length", 512)]
    lines += [mllog_line("tracked_stats", {"throughput": v}, T0 + i) for i, v in enumerate((100.0, 200.0))]
    write_log(run / "bert_test_1.log", lines)
    bench = tmp_path / "bench_bert.json"
    bench.write_text(json.dumps({"runs": {"compiled": {"samples_per_s": 400.0}}}))
    argv = ["throughput", str(run), "--gpus", "8", "--bench", str(bench), "--variant", "compiled"]
    assert logs.main(argv) == 0
    printed = capsys.readouterr().out
    assert "bert_test_1.log: [6400, 12800] tokens/s per GPU" in printed
    assert "against the bench's 400.0 samples/s: [0.25, 0.5]" in printed
    assert logs.main(["throughput", str(tmp_path / "none")]) == 1
    with pytest.raises(SystemExit):
        logs.main(["throughput", str(run), "--bench", str(bench)])  # without --variant


def test_scaling_against_one_gpu(tmp_path, capsys):
    for name, rate in (("bench_bert.json", 100.0), ("bench_bert_2gpu.json", 180.0)):
        (tmp_path / name).write_text(json.dumps({"runs": {"compiled": {"samples_per_s": rate}}}))
    assert logs.main(["scaling", str(tmp_path), "compiled", "1", "2"]) == 0
    assert "| 2 | 180 | 90 | 90.0% |" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="the first count must be 1"):
        logs.main(["scaling", str(tmp_path), "compiled", "2"])


def test_lora_projection_beside_the_peer(tmp_path, capsys):
    (tmp_path / "bench_lora.json").write_text(
        json.dumps({"runs": {"peft-bf16-ac": {"ms": 9000.0, "tokens_per_s": 500.0, "model_tflops": 300.0}}})
    )
    (tmp_path / "lora_fp8").mkdir()
    (tmp_path / "lora_bf16").mkdir()
    stats = {"throughput": 1.0, "tokens_per_s_per_gpu": 1000.0, "model_tflops_per_gpu": 600.0}
    write_log(
        tmp_path / "lora_fp8" / "llama2_70b_lora_test_1.log",
        [
            mllog_line("eval_samples", 173),
            mllog_line("tracked_stats", stats),
            mllog_line("eval_start", time_ms=T0),
            mllog_line("eval_stop", time_ms=T0 + 17300),
        ],
    )
    write_log(tmp_path / "lora_bf16" / "llama2_70b_lora_test_1.log", [mllog_line("eval_samples", 173)])
    assert logs.main(["lora-projection", str(tmp_path), "8"]) == 0
    printed = capsys.readouterr().out
    assert "| peer peft-bf16-ac (bench) | 9.00 | 500 | 300 | 1.00x | |" in printed
    assert "| lora_fp8 | 8.19 | 1000 | 600 | 2.00x |" in printed  # 8 x 8192 tokens / 8 GPUs / 1000 per s
    assert "| lora_bf16 | no tracked_stats" in printed


def test_gpus_as_torch_sees_them(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    assert logs.main(["gpus"]) == 0 and logs.main(["gpus", "--system"]) == 0
    assert capsys.readouterr().out.split() == ["4", "H100"]
