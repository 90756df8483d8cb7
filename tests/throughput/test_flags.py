"""train_fsdp.py's flags as the seed's users type them (python-fire's shapes), and each bad flag or config
named in its error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.common.config import ConfigError
from training.throughput.config import load_model, model_for, parse_args

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "throughput"
LLAMA = str(CONFIGS / "llama-3.1-8b-4k.json")


def test_the_seeds_commands_parse():
    a = parse_args([LLAMA, "llama", "--batch_size", "3", "--enable_fp8", "True"])
    assert (a.batch_size, a.enable_fp8, a.num_iteration, a.grad_accum, a.seed) == (3, True, 128, 8, 1024)
    a = parse_args([str(CONFIGS / "mistral-7b-v0.1.json"), "mistral", "--batch_size=4", "--enable_fp8"])
    assert (a.batch_size, a.enable_fp8) == (4, True)
    a = parse_args(
        [
            LLAMA,
            "llama",
            "--batch-size",
            "auto",
            "--enable-fp8",
            "False",
            "--num_iteration",
            "64",
            "--seed",
            "7",
            "--seq_len",
            "2048",
        ]
    )
    assert (a.batch_size, a.enable_fp8, a.num_iteration, a.seed, a.seq_len) == (None, False, 64, 7, 2048)
    assert (a.steps, a.warmup_steps) == (8, 4)
    assert model_for(a).shape.max_seq_length == 2048
    assert a.reduce_each_iteration  # as AMD's FSDP1
    assert not parse_args([LLAMA, "llama", "--reduce_each_iteration", "False"]).reduce_each_iteration
    assert a.attention == "auto"
    assert parse_args([LLAMA, "llama", "--attention", "flash4"]).attention == "flash4"
    flux = parse_args([str(CONFIGS / "flux.1-dev.json"), "flux"])
    assert (flux.num_iteration, flux.grad_accum) == (20, 1)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batch_size", "0"], "--batch_size takes a positive integer, not '0'"),
        (["--batch_size", "three"], "--batch_size takes a positive integer, not 'three'"),
        (["--enable_fp8", "yes"], "--enable_fp8 takes True or False, not 'yes'"),
        (["--reduce_each_iteration", "no"], "--reduce_each_iteration takes True or False, not 'no'"),
        (["--num_iteration", "-4"], "--num_iteration takes a positive integer, not '-4'"),
        (["--seq_len", "8k"], "--seq_len takes a positive integer, not '8k'"),
        (["--batchsize", "3"], "unknown flag --batchsize (did you mean --batch_size?)"),
        (["--num_iteration", "12"], "--num_iteration 12 is not a multiple of --grad_accum 8"),
        (["--num_iteration", "8"], "a measurement needs 2"),
        (["--fp8_backend", "cuda"], "argument --fp8_backend: invalid choice: 'cuda'"),
        (["--fp8-backend", "cuda"], "argument --fp8-backend: invalid choice: 'cuda'"),  # as it was typed
        (["--attention", "flash5"], "argument --attention: invalid choice: 'flash5'"),
        (["--grad_accumlate_pre_steps", "0"], "--grad_accum takes a positive integer, not '0'"),
    ],
)
def test_bad_flags_are_named(argv, message):
    with pytest.raises(ConfigError, match=None) as err:
        parse_args([LLAMA, "llama", *argv])
    assert message in str(err.value)


def test_bad_model_types_and_configs_are_named(tmp_path):
    with pytest.raises(ConfigError, match="MODEL_TYPE 'gpt' is not one of llama, mistral, flux"):
        parse_args([LLAMA, "gpt"])
    with pytest.raises(ConfigError, match="is a llama config \\(arch_name\\), not mistral"):
        load_model(LLAMA, "mistral")
    with pytest.raises(ConfigError, match="no such model config"):
        load_model(tmp_path / "missing.json", "llama")
    cfg = json.loads(Path(LLAMA).read_text())
    for change, message in [
        ({"num_layer": 2}, "unknown key 'num_layer' \\(did you mean num_layers\\?\\)"),
        ({"window_size": 0}, "window_size must be a positive integer or null, not 0"),
        ({"num_kv_heads": 5}, "do not divide into heads and KV groups"),
    ]:
        (tmp_path / "c.json").write_text(json.dumps({**cfg, **change}))
        with pytest.raises(ConfigError, match=message):
            load_model(tmp_path / "c.json", "llama")
    with pytest.raises(ConfigError, match="FLUX runs in BF16 only"):
        parse_args([str(CONFIGS / "flux.1-dev.json"), "flux", "--enable_fp8", "True"])


def test_every_shipped_config_is_the_model_it_names():
    """Parameter counts of the real models: Llama 3.1 8B 8.03 B, 70B 70.55 B, Mistral 7B v0.1 7.24 B."""
    counts = {
        "llama-3.1-8b-8k": 8_030_261_248,
        "llama-3.1-8b-4k": 8_030_261_248,
        "llama-3.1-70b": 70_553_706_496,
        "mistral-7b-v0.1": 7_241_732_096,
    }
    for stem, params in counts.items():
        spec = load_model(CONFIGS / f"{stem}.json", "mistral" if "mistral" in stem else "llama")
        assert spec.shape.num_params() == params
    mistral = load_model(CONFIGS / "mistral-7b-v0.1.json", "mistral").shape
    assert (mistral.sliding_window, mistral.num_kv_heads, mistral.vocab_size, mistral.rope_scaling) == (
        4096,
        8,
        32000,
        None,
    )
    flux = load_model(CONFIGS / "flux.1-dev.json", "flux").flux
    assert (flux.image_tokens, flux.text_length, flux.transformer["num_single_layers"]) == (1024, 512, 38)
