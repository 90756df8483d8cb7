"""A Hugging Face tokenizer folder, read with `tokenizers` alone (no `transformers`): what the Llama
benchmarks' data preparation encodes with (the C4 preprocessing, the demo sets) and what their verifiers
check a tokenizer folder by."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"  # Llama 3's, in the tokenizers the demo data trains

EOD_CANDIDATES = ("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>")


class HFTokenizer:
    """The parts of a Hugging Face tokenizer folder preprocessing needs: encode, vocabulary size, EOD id."""

    def __init__(self, folder: Path, eod_token: str | None = None):
        folder = Path(folder)
        path = folder / "tokenizer.json" if folder.is_dir() else folder
        if not path.is_file():
            raise FileNotFoundError(
                f"{path}: no tokenizer.json (a Hugging Face 'fast' tokenizer folder is needed)"
            )
        self.path = path
        self.tokenizer = Tokenizer.from_file(str(path))
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        self.eod_token = eod_token or self._eos_from_config(path.parent)
        self.eod = self.tokenizer.token_to_id(self.eod_token) if self.eod_token else None
        if self.eod is None:
            raise ValueError(
                f"{path}: end-of-document token {self.eod_token!r} is not in the vocabulary; pass --eod-token"
            )

    def _eos_from_config(self, folder: Path) -> str | None:
        config = folder / "tokenizer_config.json"
        if config.is_file():
            eos = json.loads(config.read_text()).get("eos_token")
            if isinstance(eos, dict):
                eos = eos.get("content")
            if eos:
                return eos
        return next((t for t in EOD_CANDIDATES if self.tokenizer.token_to_id(t) is not None), None)

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]


def train_tokenizer(texts: list[str], vocab_size: int, folder: Path) -> Path:
    """A byte-level BPE tokenizer (Llama 3's kind, small), saved as a Hugging Face tokenizer folder."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(folder / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "model_max_length": 8192,
        "add_bos_token": False,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    (folder / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": BOS, "eos_token": EOS}, indent=2) + "\n"
    )
    return folder
