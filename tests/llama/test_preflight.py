"""training.llama.preflight.check: config, arithmetic and data problems, by name."""

from __future__ import annotations

from training.llama.preflight import check

DEMO = {
    "BENCHMARK": "llama31_8b",
    "CPU_DEMO": "1",
    "GBS": "8",
    "MBS": "4",
    "MAX_LR": "3e-3",
    "WARMUP_STEPS": "16",
    "SEQ_LENGTH": "64",
    "NUM_LAYERS": "2",
    "HIDDEN_SIZE": "64",
    "FFN_HIDDEN_SIZE": "192",
    "NUM_ATTENTION_HEADS": "4",
    "NUM_QUERY_GROUPS": "2",
    "VOCAB_SIZE": "4096",
    "TRAIN_DATA_PREFIX": "wiki-train_text_document",
    "VALID_DATA_PREFIX": "wiki-validation_text_document",
}


def test_demo_data_passes(demo_data, tmp_path):
    assert check({**DEMO, "DATADIR": str(demo_data), "INDEX_CACHE_DIR": str(tmp_path / "idx")}) == []


def test_problems_are_named(demo_data, tmp_path):
    assert check({**DEMO, "DATADIR": str(tmp_path)}) == [
        f"missing data file(s): {tmp_path}/wiki-train_text_document.bin, "
        f"{tmp_path}/wiki-train_text_document.idx",
        f"missing data file(s): {tmp_path}/wiki-validation_text_document.bin, "
        f"{tmp_path}/wiki-validation_text_document.idx",
    ]
    long_eval = check({**DEMO, "DATADIR": str(demo_data), "SEQ_LENGTH": "8192"})
    assert (
        len(long_eval) == 1
        and "fewer than the 8388609 that EVAL_SAMPLES=1024 sequences of SEQ_LENGTH=8192" in long_eval[0]
    )
    (arithmetic,) = check({**DEMO, "DATADIR": str(demo_data), "DGXNGPU": "3"})
    assert "GBS=8 is not a multiple of MBS x data-parallel size = 4 x 3" in arithmetic
    (missing,) = check({k: v for k, v in DEMO.items() if k != "GBS"} | {"DATADIR": str(demo_data)})
    assert "GBS: required" in missing
    assert check({**DEMO, "BENCHMARK": "llama2_70b_lora", "DATADIR": "/x"})[0].startswith(
        "BENCHMARK=llama2_70b_lora"
    )
