"""The whole pipeline: golden output, packing invariants, resume after a kill, verify, the demo command."""

import json
import os
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest

from input_preprocessing.bert.verify import main as verify_main
from input_preprocessing.bert.verify import verify
from input_preprocessing.common.checksums import BLOCK, block_offsets
from tests.bert_data.helpers import DUMP, REPO, data_digests, prepare, prepare_subprocess

SMALL_RUN = ("--packed-data", "--shards", "4", "--eval-samples", "200", "--jobs", "1")

# Content digests of the small run (text made from the first 18 sample articles by our Wikipedia
# extraction, 3 parts; seed 12345). A change here means the data changed: extraction, tokenization,
# example creation, packing or shuffling. Update only for an intended change, and say why.
GOLDEN = {
    "hdf5/eval_varlength/part_eval_10k.hdf5": (
        "ed7a39a0ea6aee3fcc0f3dcec9f0acd878e3e6aa1d5c4acec2c38b213ec4838b"
    ),
    "hdf5/packed_data/part_00000": "619223862bda4633b2d6e09bc3acd79f73ebaf573e2244204b090a8eb55e8959",
    "hdf5/packed_data/part_00001": "c1144d23cf21f1d84e294673d5cefc5882917c737826f8a6ad33a41505f03f45",
    "hdf5/packed_data/part_00002": "2cb2249b38e448862bd9cd7f2685c5beadd6581854968ef521a7a4c1a658380f",
    "hdf5/packed_data/part_00003": "be294eaa43bd2f75bd1d8dfc9e05d8d6ec505f2b0f66c3975d2caece11665415",
}


@pytest.fixture(scope="module")
def packed_run(tmp_path_factory, small_text) -> Path:
    root = tmp_path_factory.mktemp("packed")
    assert prepare("--outputdir", root, "--text-dir", small_text, *SMALL_RUN) == 0
    return root


@pytest.fixture(scope="module")
def unpacked_run(tmp_path_factory, small_text) -> Path:
    root = tmp_path_factory.mktemp("unpacked")
    assert (
        prepare("--outputdir", root, "--text-dir", small_text, "--shards", "3", "--eval-samples", "50") == 0
    )
    return root


def test_fixed_seed_gives_the_golden_output(packed_run):
    assert data_digests(packed_run) == GOLDEN


def test_output_does_not_depend_on_the_number_of_workers(tmp_path, small_text, packed_run):
    args = [a if a != "1" else "2" for a in SMALL_RUN]  # --jobs 2
    assert prepare("--outputdir", tmp_path, "--text-dir", small_text, *args) == 0
    assert data_digests(tmp_path) == data_digests(packed_run)


def test_layout_manifest_and_eval_format(packed_run):
    assert json.loads((packed_run / "phase1" / "bert_config.json").read_text())["hidden_size"] == 1024
    assert (packed_run / "phase1" / "vocab.txt").stat().st_size == 231_508
    assert not (packed_run / "work").exists()
    manifest = json.loads((packed_run / "manifest.json").read_text())
    files = {e["path"]: e for e in manifest["files"]}
    assert set(files) == {"phase1/bert_config.json", "phase1/vocab.txt", *GOLDEN}
    assert sum(files[f"hdf5/packed_data/part_{i:05d}"]["sequences"] for i in range(4)) == 2975
    assert manifest["stats"]["plan"]["sequences_per_row"] > 1.2
    with h5py.File(packed_run / "hdf5/eval_varlength/part_eval_10k.hdf5", "r") as f:
        assert f["next_sentence_labels"].shape == (200,) and f["next_sentence_labels"].dtype == np.int8
        for name, dtype in [
            ("input_ids", np.int16),
            ("segment_ids", np.int8),
            ("masked_lm_positions", np.int16),
        ]:
            assert f[name].shape == (200,) and h5py.check_vlen_dtype(f[name].dtype) == dtype
        assert f["input_ids"][0][0] == 101 and f["input_ids"][0][-1] == 102  # [CLS] ... [SEP]


def sequences_of(root: Path, packed: bool) -> Counter:
    """Every training sequence in the shards, as a hashable tuple, with how often it occurs."""
    out: Counter = Counter()
    folder = root / ("hdf5/packed_data" if packed else "hdf5/training-3/hdf5_3_shards_varlength_shuffled")
    for path in sorted(folder.iterdir()):
        with h5py.File(path, "r") as f:
            rows = {name: f[name][:] for name in f}
        for i in range(len(rows["input_ids"])):
            lens = rows["packed_input_len"][i] if packed else [len(rows["input_ids"][i])]
            mask_lens = rows["packed_masked_lm_len"][i] if packed else [len(rows["masked_lm_ids"][i])]
            nsp = rows["next_sentence_labels"][i] if packed else [rows["next_sentence_labels"][i]]
            assert sum(lens) == len(rows["input_ids"][i]) == len(rows["segment_ids"][i]) <= 512
            assert 1 <= len(lens) <= 3 and len(mask_lens) == len(lens) == len(nsp)
            start = mask_start = 0
            for n, m, label in zip(lens, mask_lens, nsp):
                tokens = rows["input_ids"][i][start : start + n]
                positions = rows["masked_lm_positions"][i][mask_start : mask_start + m]
                assert tokens[0] == 101 and tokens[-1] == 102  # each sequence keeps its [CLS] ... [SEP]
                assert ((positions > start) & (positions < start + n - 1)).all()  # inside its own sequence
                key = (
                    tokens.tobytes(),
                    rows["segment_ids"][i][start : start + n].tobytes(),
                    (positions - start).tobytes(),
                    rows["masked_lm_ids"][i][mask_start : mask_start + m].tobytes(),
                    int(label),
                )
                out[key] += 1
                start += n
                mask_start += m
    return out


def test_packed_shards_hold_every_sequence_exactly_once(packed_run, unpacked_run):
    packed, unpacked = sequences_of(packed_run, True), sequences_of(unpacked_run, False)
    assert sum(unpacked.values()) == 2975 and max(unpacked.values()) == 1
    assert packed == unpacked


@pytest.mark.parametrize("stage", ["examples", "scatter", "shards"])
def test_resume_after_kill_gives_the_same_result(tmp_path, small_text, stage):
    args = ["--outputdir", tmp_path, "--text-dir", small_text, *SMALL_RUN]
    killed = prepare_subprocess(*args, "--debug-kill-after", f"{stage}:1")
    assert killed.returncode == -9, killed.stderr
    assert (tmp_path / ".prep" / f"{stage}.done").exists() is False
    (tmp_path / "hdf5" / "packed_data").mkdir(parents=True, exist_ok=True)
    (tmp_path / "hdf5" / "packed_data" / "part_00001.12345.tmp").write_bytes(b"half-written")
    resumed = prepare_subprocess(*args)
    assert resumed.returncode == 0, resumed.stderr
    assert "already done, skipping" in resumed.stderr
    assert data_digests(tmp_path) == GOLDEN


def test_changed_settings_are_refused_on_resume(packed_run, small_text, capsys):
    args = ["--outputdir", packed_run, "--text-dir", small_text, *SMALL_RUN, "--shards", "5"]
    assert prepare(*args) == 1
    assert "holds a run with other settings (shards: 4 before, 5 now)" in capsys.readouterr().err


def test_shorter_rows_for_local_text(tmp_path, small_text, capsys):
    """--max-seq-length and --max-predictions-per-seq (the CPU default's 128-token rows; 12 predictions here,
    fewer than 15% of 128, to see the cap): every training row and eval sequence fits, with at most that many
    predictions each; MLCommons' data keeps 512 and 76."""
    args = ["--outputdir", tmp_path / "data", "--text-dir", small_text, *SMALL_RUN]
    assert prepare(*args, "--max-seq-length", "128", "--max-predictions-per-seq", "12") == 0
    with h5py.File(tmp_path / "data/hdf5/packed_data/part_00000") as f:
        assert max(len(ids) for ids in f["input_ids"]) == 128
        assert max(max(counts) for counts in f["packed_masked_lm_len"]) == 12
    with h5py.File(tmp_path / "data/hdf5/eval_varlength/part_eval_10k.hdf5") as f:
        assert max(len(ids) for ids in f["input_ids"]) == 128
        assert max(len(positions) for positions in f["masked_lm_positions"]) == 12
    assert verify(tmp_path / "data") == []
    for bad, says in (
        (["--max-seq-length", "8"], "expected 16 to 512"),
        (["--max-seq-length", "1024"], "expected 16 to 512"),
    ):
        with pytest.raises(SystemExit):
            prepare(*args, *bad)
        assert says in capsys.readouterr().err
    with pytest.raises(SystemExit):
        prepare("--outputdir", tmp_path / "mlcommons", "--max-seq-length", "128")
    assert "go with local text" in capsys.readouterr().err


def test_too_many_shards_for_the_data_is_an_error(tmp_path, small_text, capsys):
    assert (
        prepare("--outputdir", tmp_path, "--text-dir", small_text, "--packed-data", "--shards", "5000") == 1
    )
    assert "only 2436 training rows for --shards 5000" in capsys.readouterr().err


def test_verify_names_damaged_missing_extra_and_identical_shards(tmp_path, packed_run, capsys):
    root = tmp_path / "data"
    shutil.copytree(packed_run, root)
    assert verify(root) == [] and verify(root, full=True) == []
    shards = root / "hdf5" / "packed_data"
    with open(shards / "part_00001", "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)
    (shards / "part_00002").unlink()
    shutil.copyfile(shards / "part_00000", shards / "part_00003")
    (shards / "part_00009").write_bytes(b"stray")
    problems = verify(root)
    assert any(p.startswith("hdf5/packed_data/part_00001: ") and "truncated" in p for p in problems), problems
    assert "hdf5/packed_data/part_00002: missing" in problems
    assert any(p.startswith("hdf5/packed_data/part_00003: ") for p in problems), problems
    assert any(p.startswith("hdf5/packed_data/part_00009: not in the manifest") for p in problems), problems
    assert verify_main([str(root)]) == 1
    assert "part_00002: missing" in capsys.readouterr().err


def overwrite_tokens(shard: Path, sampled: bool) -> None:
    """Change 8 bytes of one row's token ids in place (by 1 each: the HDF5 still reads and the ids stay in
    the vocabulary), inside one of the blocks the fast check samples, or (`sampled` false) between them."""
    raw = shard.read_bytes()
    blocks = [(start, start + BLOCK) for start in block_offsets(len(raw))]
    with h5py.File(shard) as f:
        for ids in f["input_ids"][1:]:  # not the first row, whose digest the manifest holds
            at = raw.index(np.asarray(ids).tobytes()) + 64
            if any(lo <= at and at + 8 <= hi for lo, hi in blocks) == sampled:
                break
    with open(shard, "r+b") as f:
        f.seek(at)
        f.write(bytes(b ^ 1 for b in raw[at : at + 8]))
    assert shard.stat().st_size == len(raw)


def test_verify_catches_bytes_overwritten_in_place(tmp_path, packed_run, capsys):
    """Token ids overwritten in place, the shard's size and HDF5 structure kept: the fast check re-hashes the
    sampled blocks and names the shard; damage between the sampled blocks is left to the full check."""
    root = tmp_path / "data"
    shutil.copytree(packed_run, root)
    shard = root / "hdf5" / "packed_data" / "part_00001"
    overwrite_tokens(shard, sampled=True)
    damaged = (
        "hdf5/packed_data/part_00001: sampled blocks differ from the manifest (modified in place or corrupt)"
    )
    assert verify(root) == [damaged] and verify(root, full=True) == [damaged]
    assert verify_main([str(root), "--preflight"]) == 1
    assert "part_00001: sampled blocks differ" in capsys.readouterr().err
    shutil.copyfile(packed_run / "hdf5" / "packed_data" / "part_00001", shard)
    overwrite_tokens(shard, sampled=False)
    assert verify(root) == []
    assert verify(root, full=True) == [
        "hdf5/packed_data/part_00001: sha256 differs from the manifest (modified or corrupt)"
    ]


def test_a_manifest_without_sampled_blocks_still_verifies_with_a_note(tmp_path, packed_run, capsys):
    """Data prepared before sampled blocks were recorded: the fast check passes, saying what it skipped."""
    root = tmp_path / "data"
    shutil.copytree(packed_run, root)
    manifest = json.loads((root / "manifest.json").read_text())
    for entry in manifest["files"]:
        del entry["sampled_sha256"]
    (root / "manifest.json").write_text(json.dumps(manifest))
    assert verify(root) == []
    assert verify_main([str(root), "--preflight"]) == 0
    assert "the sampled-block check was skipped" in capsys.readouterr().out


def test_verify_identical_shards(tmp_path, packed_run):
    root = tmp_path / "data"
    shutil.copytree(packed_run, root)
    manifest = json.loads((root / "manifest.json").read_text())
    entries = {e["path"]: e for e in manifest["files"]}
    # A copy of shard 0 recorded as shard 3 (what the known shuffle bug produced): identical shards.
    shutil.copyfile(root / "hdf5/packed_data/part_00000", root / "hdf5/packed_data/part_00003")
    entries["hdf5/packed_data/part_00003"].update(
        {k: entries["hdf5/packed_data/part_00000"][k] for k in ("size", "sha256", "samples", "head_sha256")}
    )
    (root / "manifest.json").write_text(json.dumps(manifest))
    problems = verify(root)
    assert any("part_00003: identical to hdf5/packed_data/part_00000" in p for p in problems), problems


def test_verify_without_manifest_checks_their_layout(tmp_path):
    """A folder without a manifest is read as AMD's or NVIDIA's scripts lay it out (tests in
    test_their_layouts.py): an empty one lacks everything."""
    problems = verify(tmp_path)
    assert problems[:2] == [
        f"missing: {tmp_path / 'phase1' / 'bert_config.json'}",
        f"missing: {tmp_path / 'phase1' / 'model.ckpt-28252.pt'} (the converted phase-1 checkpoint)",
    ]
    assert problems[2].startswith("no packed training shards: neither ")
    assert (
        problems[3]
        == f"missing: {tmp_path / 'hdf5/eval_varlength/part_eval_10k.hdf5'} (the 10,000-sample eval set)"
    )


def test_demo_command_on_the_wikipedia_sample(tmp_path):
    """The small default: the bundled Wikipedia excerpt to phase1 + eval + packed shards."""
    start = time.monotonic()
    run = prepare_subprocess(
        "--outputdir",
        tmp_path,
        "--packed-data",
        "--wiki-dump",
        DUMP,
        "--shards",
        "8",
        "--eval-samples",
        "1500",
    )
    assert run.returncode == 0, run.stderr
    assert time.monotonic() - start < 120
    assert "sequences per row" in run.stderr
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    stats = manifest["stats"]
    assert stats["inputs"]["articles"] == 105 and stats["inputs"]["eval_articles"] == 10
    assert stats["examples"]["sequences"] > 10_000 and stats["eval"]["samples"] == 1500
    assert stats["plan"]["sequences_per_row"] > 1.25
    assert sorted(p.name for p in (tmp_path / "hdf5/packed_data").iterdir()) == [
        f"part_{i:05d}" for i in range(8)
    ]
    assert sorted(p.name for p in (tmp_path / "phase1").iterdir()) == ["bert_config.json", "vocab.txt"]
    assert verify(tmp_path, full=True) == []


def test_dispatcher_rejects_an_unknown_benchmark():
    env = {**os.environ, "BENCHMARK": "no-such-benchmark"}
    run = subprocess.run(
        [str(REPO / "input_preprocessing/prepare_data.sh"), "--help"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 2 and "BENCHMARK=no-such-benchmark" in run.stderr
