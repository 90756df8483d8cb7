"""Flux.1's data: the sample in the published layout, read back by the trainer's reader bit for bit; each
rank's share and order as the reference's loaders; the guidance dropout; the verifier's checks."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from input_preprocessing.flux1 import layout
from input_preprocessing.flux1.verify import verify
from training.flux1 import data


def folders(root):
    return root / layout.TRAIN, root / layout.VALID, root / layout.EMPTY


def test_the_sample_is_the_published_layout_and_reads_back_exactly(tmp_path):
    rows = [
        {
            "__key__": f"k{i}",
            "t5_encodings": torch.randn(3, 8),
            "clip_encodings": torch.randn(8),
            "mean": torch.randn(4, 2, 2),
            "logvar": torch.randn(4, 2, 2),
            "timestep": i % 8,
        }
        for i in range(16)
    ]
    layout.write_split(tmp_path / "split", rows, rows_per_file=5)  # 4 files, in state.json's order
    table = layout.read_split(tmp_path / "split")
    assert table.schema.field("timestep").type == "int32" and table.column_names == list(layout.COLUMNS)
    assert b"huggingface" in table.schema.metadata
    got = data.EncodedImages(tmp_path / "split").batch([0, 7, 15], timesteps=True)
    for name, field in (("t5_encodings", got.t5), ("mean", got.mean), ("logvar", got.logvar)):
        want = torch.stack([rows[i][name].to(torch.bfloat16) for i in (0, 7, 15)])
        assert field.dtype == torch.bfloat16 and torch.equal(field, want)  # the stored bits, unchanged
    assert got.timestep.tolist() == [0, 7, 7]


def test_each_rank_reads_its_contiguous_share_as_datasets_shards():
    """`datasets`' shard(contiguous=True): the first n % ranks shares one row longer."""
    assert [list(data.share(10, 3, r)) for r in range(3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert sum(len(data.share(1_099_776, 24, r)) for r in range(24)) == 1_099_776


def test_training_loops_over_the_share_and_drops_a_tenth_of_the_captions(sample_data):
    train = data.EncodedImages(sample_data / layout.TRAIN)
    empty = data.load_empty_encodings(sample_data / layout.EMPTY)
    stream = data.TrainStream(train, empty, micro_batch=48, ranks=2, rank=1, seed=0)
    first = [next(stream) for _ in range(6)]  # 288 rows of a 256-row share: across its end
    again = train.batch([256 + i % 256 for i in range(256, 288)])
    assert torch.equal(first[-1].mean[-32:], again.mean)  # rows 256.. in order, then again from its start
    dropped = torch.cat([(b.clip == empty[1].to(torch.bfloat16)).all(dim=1) for b in first])
    # 288 Bernoulli(0.1) draws: 28.8 expected, sd 5.1; 4 sd either side
    assert 8 <= int(dropped.sum()) <= 50
    own = torch.cat([b.t5 for b in first])[dropped]
    assert torch.equal(own, empty[0].to(torch.bfloat16).expand_as(own))


def test_validation_tags_every_sample_with_its_timestep(sample_data):
    valid = data.EncodedImages(sample_data / layout.VALID)
    batches = list(data.ValidationSet(valid, samples=64, batch_size=10, ranks=2, rank=0))
    assert [len(b.timestep) for b in batches] == [10, 10, 10, 2]
    assert torch.cat([b.timestep for b in batches]).tolist() == [i % 8 for i in range(32)]


def test_the_verifier_passes_the_sample_and_names_what_is_wrong(sample_data, tmp_path):
    problems, notes = verify(*folders(sample_data))
    assert problems == [] and "512 rows, not the published 1,099,776" in notes[0]
    broken = tmp_path / "broken"
    shutil.copytree(sample_data, broken)
    (broken / layout.EMPTY / "clip_empty.npy").unlink()
    rows = [
        {
            "__key__": "v",
            "t5_encodings": torch.zeros(16, 64),
            "clip_encodings": torch.zeros(64),
            "mean": torch.zeros(16, 8, 8),
            "logvar": torch.zeros(16, 8, 8),
            "timestep": t,
        }
        for t in (0, 0, 1, 9)
    ]
    shutil.rmtree(broken / layout.VALID)
    layout.write_split(broken / layout.VALID, rows)
    problems, _ = verify(*folders(broken))
    assert any("timesteps [9] outside 0..7" in p for p in problems)
    assert any("clip_empty.npy (the published empty encodings)" in p for p in problems)
    np.save(broken / layout.EMPTY / "clip_empty.npy", np.zeros((1, 32), np.float16))
    assert any("the data's encodings need" in p for p in verify(*folders(broken))[0])


def test_a_split_that_is_not_the_layout_is_a_named_error(tmp_path):
    (tmp_path / "x").mkdir()
    with pytest.raises(data.DataError, match=r"x: no \.arrow files"):
        data.EncodedImages(tmp_path / "x")
