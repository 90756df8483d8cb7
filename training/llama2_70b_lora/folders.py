"""Where a Llama 2 70B LoRA DATADIR keeps its rows and its model, in each layout a partner arrives with, and
the one-line answer to a model folder holding a NeMo checkpoint (the preflight's; the data verifier,
`input_preprocessing/llama2_70b_lora/verify.py`, says the same line and resolves the same folders).

- ours and AMD's (`prepare_data_and_model.sh`): DATADIR/data/{train,validation}.npy and DATADIR/model;
- NVIDIA's (its README: `DATADIR=<dataset>/gov_report`, `MODEL=<dataset>/model`): the rows in DATADIR itself,
  the model where MODEL says.
"""

from __future__ import annotations

from pathlib import Path

ROWS = ("train.npy", "validation.npy")


def data_dir(datadir: Path) -> Path:
    """The folder holding train.npy and validation.npy: DATADIR/data, or DATADIR itself where the rows lie
    there and not in data/ (NVIDIA's gov_report/)."""
    nested = datadir / "data"
    if not (nested / ROWS[0]).is_file() and (datadir / ROWS[0]).is_file():
        return datadir
    return nested


def model_dir(datadir: Path, model: Path | None = None) -> Path:
    """The Hugging Face checkpoint's folder: MODEL when given, else DATADIR/model."""
    return model if model is not None else datadir / "model"


def nemo_checkpoint_problem(folder: Path) -> str | None:
    """One line naming the command that gets the Hugging Face safetensors, when `folder` holds a NeMo
    checkpoint instead (AMD's prepare_data_and_model.sh leaves model_weights/ and model_config.yaml, v5.0 also
    llama2-70b.nemo; NVIDIA's NeMo 2 import leaves context/ and weights/*.distcp); None otherwise."""
    hf = (folder / "model.safetensors.index.json").is_file() or (folder / "model.safetensors").is_file()
    marks = ["model_weights/"] if (folder / "model_weights").is_dir() else []
    marks += sorted(p.name for p in (*folder.glob("*.nemo"), *folder.glob("model_config.yaml")))
    if (folder / "context").is_dir() and any((folder / "weights").glob("*.distcp")):
        marks += ["context/", "weights/*.distcp"]
    if hf or not marks:
        return None
    command = "HF_TOKEN=... ./input_preprocessing/llama2_70b_lora/prepare_data.sh"
    return (
        f"{folder} holds a NeMo checkpoint ({', '.join(marks)}), not the Hugging Face safetensors this "
        f"toolkit reads: get them with {command} --outputdir {folder.parent} (writes "
        f"{folder.parent / 'model'}, keeps the data beside it)"
    )
