"""A Llama 2 70B LoRA DATADIR as AMD's scripts lay it out (v5.0 and v5.1
`AMD/benchmarks/llama2_70b_lora/implementations/*/scripts/prepare_data_and_model.sh`): `data/train.npy` and
`data/validation.npy` as its convert_dataset.py writes them (no meta.json), and `model/` holding the NeMo
checkpoint its convert_model.py makes. Its data is read as it is; its model is not, and the verifier and the
preflight say so in one line, naming the command that gets the Hugging Face safetensors, before anything else.
With those safetensors in model/, the folder passes both."""

from __future__ import annotations

import pytest

from input_preprocessing.llama2_70b_lora import layout, verify
from tests.llama2_70b_lora_data.conftest import write_fake_model
from training.llama2_70b_lora import preflight

ENV = {
    "MINIBS": "2",
    "MBS": "1",
    "LR": "2e-3",
    "MAX_STEPS": "12",
    "VAL_CHECK_INTERVAL": "4",
    "SKIP_EVALS": "1",
    "MAX_SEQLEN": "16",
    "TARGET": "0.5",
    "CPU_DEMO": "1",
}


def amd_nemo_model(model, version: str) -> None:
    """model/ as AMD's prepare_data_and_model.sh leaves it (zarr weights in model_weights/)."""
    (model / "model_weights" / "model.decoder.layers.self_attention.linear_qkv.weight").mkdir(parents=True)
    (
        model / "model_weights" / "model.decoder.layers.self_attention.linear_qkv.weight" / ".zarray"
    ).write_text("{}")
    (model / "model_config.yaml").write_text("num_layers: 80\n")
    if version == "v5.1":  # NeMo 2 import_ckpt: context/ beside the weights, the tokenizer copied out
        (model / "context" / "nemo_tokenizer").mkdir(parents=True)
        (model / "context" / "model.yaml").write_text(
            "_target_: nemo.collections.llm.gpt.model.llama.LlamaModel\n"
        )
        (model / "tokenizer.model").write_bytes(b"sentencepiece")
    else:  # the .nemo tarball, unpacked in place and kept
        (model / "llama2-70b.nemo").write_bytes(b"tar")
        (model / "5a7c_tokenizer.model").write_bytes(b"sentencepiece")


@pytest.fixture
def amd_datadir(world, tmp_path):
    folder = tmp_path / "mlperf_llama2"
    for split, rows in world.rows.items():
        layout.save_rows(folder / "data" / f"{split}.npy", rows)
    return folder


@pytest.mark.parametrize("version", ["v5.0", "v5.1"])
def test_amds_nemo_checkpoint_is_one_line_naming_the_command(amd_datadir, version, capsys):
    model = amd_datadir / "model"
    amd_nemo_model(model, version)
    marks = "model_weights/, " + (
        "llama2-70b.nemo, model_config.yaml" if version == "v5.0" else "model_config.yaml"
    )
    command = "HF_TOKEN=... ./input_preprocessing/llama2_70b_lora/prepare_data.sh"
    line = (
        f"{model} holds a NeMo checkpoint ({marks}), not the Hugging Face safetensors this toolkit "
        f"reads: get them with {command} --outputdir {amd_datadir} (writes {model}, keeps the data beside it)"
    )
    assert verify.verify(amd_datadir) == [line]
    assert preflight.check({**ENV, "DATADIR": str(amd_datadir)}) == [line]
    assert verify.main([str(amd_datadir), "--preflight"]) == 1
    assert capsys.readouterr().err == f"verify: {line}\n"


def test_the_preflight_prints_it_once_before_anything_else(amd_datadir, monkeypatch, capsys):
    """`python -m training.preflight`: the check says it, the data verifier (run as a command) says it too,
    and it is printed once."""
    from training import preflight as preflight_command

    amd_nemo_model(amd_datadir / "model", "v5.1")
    env = {**ENV, "BENCHMARK": "llama2_70b_lora", "DATADIR": str(amd_datadir), "LOGDIR": str(amd_datadir)}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert preflight_command.main([]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("preflight: ")]
    assert lines == [f"preflight: {preflight.nemo_checkpoint_problem(amd_datadir / 'model')}"]


def test_with_the_safetensors_in_model_their_folder_passes(amd_datadir, capsys):
    """AMD's data (no meta.json: the MLCommons set's sizes, rows and AMD's md5 are expected) beside the
    Hugging Face model that prepare_data.sh downloads, NeMo files and all."""
    amd_nemo_model(amd_datadir / "model", "v5.1")
    write_fake_model(amd_datadir / "model")
    assert verify.verify(amd_datadir, full=True) == []
    assert verify.main([str(amd_datadir), "--preflight"]) == 0, capsys.readouterr().err
    assert preflight.check({**ENV, "DATADIR": str(amd_datadir)}) == []


@pytest.fixture
def nvidia_dataset(world, tmp_path):
    """<dataset>/gov_report/{train,validation}.npy and <dataset>/model as NVIDIA's README lays them out
    (`download_dataset.py --data_dir <dataset>/gov_report`): DATADIR the gov_report folder, MODEL set."""
    folder = tmp_path / "dataset"
    for split, rows in world.rows.items():
        layout.save_rows(folder / "gov_report" / f"{split}.npy", rows)
    return folder


def test_nvidias_gov_report_folder_with_a_hugging_face_model_passes(nvidia_dataset, capsys):
    datadir, model = nvidia_dataset / "gov_report", nvidia_dataset / "model"
    write_fake_model(model)
    assert verify.verify(datadir, model_folder=model) == []
    assert verify.main([str(datadir), "--preflight", "--model", str(model)]) == 0, capsys.readouterr().err
    assert preflight.check({**ENV, "DATADIR": str(datadir), "MODEL": str(model)}) == []


def test_nvidias_nemo_model_is_the_same_one_line(nvidia_dataset):
    datadir, model = nvidia_dataset / "gov_report", nvidia_dataset / "model"
    (model / "context" / "nemo_tokenizer").mkdir(parents=True)
    (model / "weights").mkdir()
    (model / "weights" / "__0_0.distcp").write_bytes(b"shard")
    line = verify.verify(datadir, model_folder=model)
    assert len(line) == 1 and "holds a NeMo checkpoint (context/, weights/*.distcp)" in line[0], line
    assert f"--outputdir {nvidia_dataset}" in line[0]
    assert preflight.check({**ENV, "DATADIR": str(datadir), "MODEL": str(model)}) == line


@pytest.mark.parametrize("vendor", ["amd-v5.0", "amd-v5.1", "nvidia"])
def test_the_verifier_and_the_preflight_say_the_same_line(tmp_path, vendor):
    """Written twice (input_preprocessing/ imports no training benchmark): the two must agree."""
    from training.llama2_70b_lora import folders

    model = tmp_path / "model"
    if vendor == "nvidia":
        (model / "context").mkdir(parents=True)
        (model / "weights").mkdir()
        (model / "weights" / "__0_1.distcp").write_bytes(b"shard")
    else:
        model.mkdir()
        amd_nemo_model(model, vendor.split("-")[1])
    assert verify.nemo_checkpoint_problem(model) == folders.nemo_checkpoint_problem(model) is not None
    write_fake_model(model)
    assert verify.nemo_checkpoint_problem(model) is folders.nemo_checkpoint_problem(model) is None
    for datadir in (tmp_path / "ours", tmp_path / "gov_report"):
        (datadir / "data" if datadir.name == "ours" else datadir).mkdir(parents=True)
        ((datadir / "data" if datadir.name == "ours" else datadir) / "train.npy").write_bytes(b"rows")
        assert verify.data_folder(datadir) == folders.data_dir(datadir)
