"""Convert MLPerf's TF1 BERT checkpoint (`model.ckpt-28252`) to a PyTorch state dict, without TensorFlow.

    python -m input_preprocessing.bert.tf_checkpoint PHASE1/model.ckpt-28252 OUT.pt [--bert-config JSON]

Reading. A TF1 checkpoint is a "tensor bundle": `PREFIX.index` is a LevelDB-format table (SSTable) whose
keys are variable names and whose values are `BundleEntryProto` messages (dtype, shape, shard, offset, size,
masked CRC32C), with the empty key holding the `BundleHeaderProto`; `PREFIX.data-0000N-of-0000M` hold the
raw little-endian tensor bytes. This module parses both (table footer, index block, data blocks with prefix
compressed keys, protobuf varints) and checks every tensor's CRC32C, as TensorFlow's reader does.

Naming. The output uses the state-dict keys of NVIDIA's `BertForPretraining` (its MLPerf implementation's
modeling.py), which are Hugging Face's `BertForPreTraining` keys less `cls.predictions.decoder.bias` (NVIDIA's
decoder has no bias: `cls.predictions.bias` is the output bias); TF dense kernels ([in, out]) are transposed
(T) to torch `Linear` weights ([out, in]). Below, L stands for `bert/encoder/layer_N/` on
the TF side and `bert.encoder.layer.N.` on the PyTorch side.

    TF variable                                     PyTorch key                                         op
    bert/embeddings/word_embeddings                 bert.embeddings.word_embeddings.weight
    bert/embeddings/position_embeddings             bert.embeddings.position_embeddings.weight
    bert/embeddings/token_type_embeddings           bert.embeddings.token_type_embeddings.weight
    bert/embeddings/LayerNorm/{gamma,beta}          bert.embeddings.LayerNorm.{weight,bias}
    L attention/self/{query,key,value}/{kernel,bias}  L attention.self.{query,key,value}.{weight,bias}    T
    L attention/output/dense/{kernel,bias}          L attention.output.dense.{weight,bias}              T
    L attention/output/LayerNorm/{gamma,beta}       L attention.output.LayerNorm.{weight,bias}
    L intermediate/dense/{kernel,bias}              L intermediate.dense.{weight,bias}                  T
    L output/dense/{kernel,bias}                    L output.dense.{weight,bias}                        T
    L output/LayerNorm/{gamma,beta}                 L output.LayerNorm.{weight,bias}
    bert/pooler/dense/{kernel,bias}                 bert.pooler.dense.{weight,bias}                     T
    cls/predictions/transform/dense/{kernel,bias}   cls.predictions.transform.dense.{weight,bias}       T
    cls/predictions/transform/LayerNorm/{gamma,beta}  cls.predictions.transform.LayerNorm.{weight,bias}
    cls/predictions/output_bias                     cls.predictions.bias
    (tied to bert/embeddings/word_embeddings)       cls.predictions.decoder.weight
    cls/seq_relationship/output_weights [2, hidden] cls.seq_relationship.weight (already [out, in])
    cls/seq_relationship/output_bias                cls.seq_relationship.bias

Everything else in the checkpoint (the optimizer's `adam_m`/`adam_v` slots, `global_step`) is skipped.
`save_torch` writes the file as NVIDIA's convert_tf_checkpoint.py writes it, so that its trainer reads it
(`torch.load(...)["model"]`, loaded strictly): `torch.save({"model": state_dict})` of float32 tensors, the
vocabulary rows (the embeddings, the decoder weight tied to them, the output bias) padded with zeros to a
multiple of 8. This toolkit's trainer reads that and a plain state dict, keeping the vocabulary's rows.
"""

import argparse
import json
import re
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The tensors with a row per vocabulary entry, and the multiple NVIDIA's convert_tf_checkpoint.py and
# run_pretraining.py pad the vocabulary to (30,522 -> 30,528).
VOCAB_TENSORS = (
    "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.weight",
    "cls.predictions.bias",
)
VOCAB_MULTIPLE = 8
_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_BYTES = 48

# tensorflow/core/framework/types.proto DataType -> numpy dtype (the ones a BERT checkpoint can hold).
_DTYPES = {
    1: np.float32,
    2: np.float64,
    3: np.int32,
    4: np.uint8,
    5: np.int16,
    6: np.int8,
    9: np.int64,
    10: np.bool_,
    17: np.uint16,
    19: np.float16,
    22: np.uint32,
    23: np.uint64,
}
_DT_BFLOAT16 = 14


class CheckpointError(ValueError):
    pass


# ---------------------------------------------------------------------------------------------------------
# Protobuf wire format: just enough to read BundleHeaderProto and BundleEntryProto.


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise CheckpointError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs of a protobuf message: varints and fixed32/64 as int, the rest as bytes."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + n], pos + n
        elif wire == 5:
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        else:
            raise CheckpointError(f"unsupported protobuf wire type {wire}")
        out.append((number, value))
    return out


@dataclass(frozen=True)
class BundleEntry:
    dtype: int
    shape: tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    crc32c: int | None
    sliced: bool


def _parse_entry(buf: bytes) -> BundleEntry:
    dtype, shape, shard, offset, size, crc, sliced = 0, [], 0, 0, 0, None, False
    for number, value in _fields(buf):
        if number == 1:
            dtype = value
        elif number == 2:  # TensorShapeProto: repeated Dim dim = 2 {int64 size = 1}
            for dim_number, dim in _fields(value):
                if dim_number == 2:
                    shape.append(next((v for n, v in _fields(dim) if n == 1), 0))
        elif number == 3:
            shard = value
        elif number == 4:
            offset = value
        elif number == 5:
            size = value
        elif number == 6:
            crc = value
        elif number == 7:
            sliced = True
    return BundleEntry(
        int(dtype), tuple(int(d) for d in shape), int(shard), int(offset), int(size), crc, sliced
    )


# ---------------------------------------------------------------------------------------------------------
# LevelDB table (SSTable), uncompressed blocks as TensorFlow writes them.


def _block(data: bytes, handle: bytes, name: str) -> bytes:
    offset, pos = _varint(handle, 0)
    size, _ = _varint(handle, pos)
    if offset + size + 5 > len(data):
        raise CheckpointError(f"{name}: block at {offset} (+{size}) runs past the end of the file")
    if data[offset + size] != 0:
        raise CheckpointError(
            f"{name}: compressed table blocks (type {data[offset + size]}) are not supported"
        )
    return data[offset : offset + size]


def _block_entries(block: bytes, name: str) -> list[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise CheckpointError(f"{name}: table block too short")
    num_restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    end = len(block) - 4 - 4 * num_restarts
    entries: list[tuple[bytes, bytes]] = []
    key = b""
    pos = 0
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        value_len, pos = _varint(block, pos)
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        entries.append((key, block[pos : pos + value_len]))
        pos += value_len
    return entries


def read_table(path: Path) -> dict[bytes, bytes]:
    """All key/value pairs of a LevelDB-format table file."""
    data = path.read_bytes()
    if len(data) < _FOOTER_BYTES:
        raise CheckpointError(f"{path}: too short to be a checkpoint index ({len(data)} bytes)")
    footer = data[-_FOOTER_BYTES:]
    if struct.unpack_from("<Q", footer, 40)[0] != _TABLE_MAGIC:
        raise CheckpointError(f"{path}: not a TensorFlow checkpoint index (bad table magic)")
    _, pos = _varint(footer, 0)  # metaindex handle: offset
    _, pos = _varint(footer, pos)  # metaindex handle: size
    index_handle = footer[pos:]
    table: dict[bytes, bytes] = {}
    for _, handle in _block_entries(_block(data, index_handle, str(path)), str(path)):
        table.update(_block_entries(_block(data, handle, str(path)), str(path)))
    return table


# ---------------------------------------------------------------------------------------------------------
# CRC32C (Castagnoli), vectorised over many lanes with numpy so that a 1.3 GB checkpoint checks in seconds.

_POLY = 0x82F63B78
_TABLE = np.zeros(256, dtype=np.uint32)
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ (_POLY if _c & 1 else 0)
    _TABLE[_i] = _c
_TABLE_LIST = [int(x) for x in _TABLE]


def _crc_bytes(crc: int, data: bytes) -> int:
    table = _TABLE_LIST
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def _zeros_operator(n: int) -> list[np.ndarray]:
    """Byte tables of the linear map 'register after n zero bytes': z(r) = T0[r&255]^T1[r>>8&255]^..."""
    basis = np.array([1 << i for i in range(32)], dtype=np.uint32)
    for _ in range(n):
        basis = _TABLE[basis & 0xFF] ^ (basis >> 8)
    tables = []
    values = np.arange(256, dtype=np.uint32)
    for byte in range(4):
        t = np.zeros(256, dtype=np.uint32)
        for bit in range(8):
            t ^= np.where((values >> bit) & 1, basis[8 * byte + bit], 0).astype(np.uint32)
        tables.append(t)
    return tables


def crc32c(data: bytes, lane_bytes: int = 4096) -> int:
    """Standard CRC32C of `data`. Large inputs run as independent lanes (one numpy step per byte position
    for all lanes), combined through the linear 'advance over zero bytes' operator."""
    lanes = len(data) // lane_bytes
    if lanes < 64:
        return _crc_bytes(0xFFFFFFFF, data) ^ 0xFFFFFFFF
    body = np.frombuffer(data, dtype=np.uint8, count=lanes * lane_bytes).reshape(lanes, lane_bytes).T.copy()
    regs = np.zeros(lanes, dtype=np.uint32)
    for column in body:
        regs = _TABLE[(regs ^ column) & 0xFF] ^ (regs >> 8)
    t0, t1, t2, t3 = (t.tolist() for t in _zeros_operator(lane_bytes))
    crc = 0xFFFFFFFF
    for reg in regs.tolist():
        crc = t0[crc & 0xFF] ^ t1[crc >> 8 & 0xFF] ^ t2[crc >> 16 & 0xFF] ^ t3[crc >> 24] ^ reg
    return _crc_bytes(crc, data[lanes * lane_bytes :]) ^ 0xFFFFFFFF


def _unmask(masked: int) -> int:
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------------------


class Tf1Checkpoint:
    """Read-only view of a TF1 checkpoint given its prefix (e.g. `phase1/model.ckpt-28252`)."""

    def __init__(self, prefix: Path):
        self.prefix = Path(prefix)
        index = Path(f"{prefix}.index")
        if not index.is_file():
            raise FileNotFoundError(f"{index}: no such checkpoint index")
        table = read_table(index)
        header = dict(_fields(table.pop(b"", b"")))
        self.num_shards = int(header.get(1, 1))
        if header.get(2, 0) != 0:
            raise CheckpointError(f"{index}: big-endian checkpoints are not supported")
        self.entries = {k.decode(): _parse_entry(v) for k, v in table.items()}

    def names(self) -> list[str]:
        return sorted(self.entries)

    def read(self, name: str, check_crc: bool = True) -> np.ndarray:
        entry = self.entries[name]
        if entry.sliced:
            raise CheckpointError(f"{name}: partitioned (sliced) variables are not supported")
        data_file = Path(f"{self.prefix}.data-{entry.shard_id:05d}-of-{self.num_shards:05d}")
        with open(data_file, "rb") as f:
            f.seek(entry.offset)
            raw = f.read(entry.size)
        if len(raw) != entry.size:
            raise CheckpointError(f"{data_file}: {name} is cut short ({len(raw)} of {entry.size} bytes)")
        if check_crc and entry.crc32c is not None and crc32c(raw) != _unmask(entry.crc32c):
            raise CheckpointError(f"{data_file}: CRC32C mismatch for {name} (corrupt checkpoint)")
        if entry.dtype == _DT_BFLOAT16:
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            return bits.view(np.float32).reshape(entry.shape)
        if entry.dtype not in _DTYPES:
            raise CheckpointError(f"{name}: unsupported dtype {entry.dtype}")
        return np.frombuffer(raw, dtype=np.dtype(_DTYPES[entry.dtype]).newbyteorder("<")).reshape(entry.shape)


_LAYER = re.compile(r"bert/encoder/layer_(\d+)/(.+)")
_LAYER_PARTS = {
    "attention/self/query": "attention.self.query",
    "attention/self/key": "attention.self.key",
    "attention/self/value": "attention.self.value",
    "attention/output/dense": "attention.output.dense",
    "attention/output/LayerNorm": "attention.output.LayerNorm",
    "intermediate/dense": "intermediate.dense",
    "output/dense": "output.dense",
    "output/LayerNorm": "output.LayerNorm",
}
_FIXED = {
    "bert/embeddings/word_embeddings": "bert.embeddings.word_embeddings.weight",
    "bert/embeddings/position_embeddings": "bert.embeddings.position_embeddings.weight",
    "bert/embeddings/token_type_embeddings": "bert.embeddings.token_type_embeddings.weight",
    "cls/predictions/output_bias": "cls.predictions.bias",
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
}
_MODULES = {
    "bert/embeddings/LayerNorm": "bert.embeddings.LayerNorm",
    "bert/pooler/dense": "bert.pooler.dense",
    "cls/predictions/transform/dense": "cls.predictions.transform.dense",
    "cls/predictions/transform/LayerNorm": "cls.predictions.transform.LayerNorm",
}
_PARAMS = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}


def torch_name(tf_name: str) -> tuple[str, bool] | None:
    """(PyTorch key, transpose?) for a model variable; None for anything else (optimizer slots, step)."""
    if tf_name in _FIXED:
        return _FIXED[tf_name], False
    module, _, param = tf_name.rpartition("/")
    if param not in _PARAMS:
        return None
    m = _LAYER.fullmatch(module)
    if m and m.group(2) in _LAYER_PARTS:
        key = f"bert.encoder.layer.{m.group(1)}.{_LAYER_PARTS[m.group(2)]}"
    elif module in _MODULES:
        key = _MODULES[module]
    else:
        return None
    return f"{key}.{_PARAMS[param]}", param == "kernel"


def expected_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """PyTorch key -> shape for a `bert_config.json` (used to check a conversion is complete and right)."""
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    shapes = {
        "bert.embeddings.word_embeddings.weight": (v, h),
        "bert.embeddings.position_embeddings.weight": (cfg["max_position_embeddings"], h),
        "bert.embeddings.token_type_embeddings.weight": (cfg["type_vocab_size"], h),
        "bert.embeddings.LayerNorm.weight": (h,),
        "bert.embeddings.LayerNorm.bias": (h,),
        "bert.pooler.dense.weight": (h, h),
        "bert.pooler.dense.bias": (h,),
        "cls.predictions.transform.dense.weight": (h, h),
        "cls.predictions.transform.dense.bias": (h,),
        "cls.predictions.transform.LayerNorm.weight": (h,),
        "cls.predictions.transform.LayerNorm.bias": (h,),
        "cls.predictions.bias": (v,),
        "cls.seq_relationship.weight": (2, h),
        "cls.seq_relationship.bias": (2,),
    }
    for n in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{n}."
        for name in (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
        ):
            shapes[p + name + ".weight"] = (h, h)
            shapes[p + name + ".bias"] = (h,)
        shapes[p + "intermediate.dense.weight"] = (i, h)
        shapes[p + "intermediate.dense.bias"] = (i,)
        shapes[p + "output.dense.weight"] = (h, i)
        shapes[p + "output.dense.bias"] = (h,)
        for ln in ("attention.output.LayerNorm", "output.LayerNorm"):
            shapes[p + ln + ".weight"] = (h,)
            shapes[p + ln + ".bias"] = (h,)
    return shapes


def convert(prefix: Path, bert_config: dict | None = None) -> dict[str, np.ndarray]:
    """The checkpoint's model variables under PyTorch names (float32, contiguous), checked against
    `bert_config` when given."""
    ckpt = Tf1Checkpoint(prefix)
    out: dict[str, np.ndarray] = {}
    for name in ckpt.names():
        target = torch_name(name)
        if target is None:
            continue
        key, transpose = target
        value = ckpt.read(name).astype(np.float32)
        out[key] = np.ascontiguousarray(value.T if transpose else value)
    if "bert.embeddings.word_embeddings.weight" not in out:
        raise CheckpointError(f"{prefix}: no bert/embeddings/word_embeddings; is this a BERT checkpoint?")
    out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
    if bert_config is not None:
        problems = []
        for key, shape in expected_shapes(bert_config).items():
            if key not in out:
                problems.append(f"missing {key}")
            elif out[key].shape != shape:
                problems.append(f"{key}: shape {out[key].shape}, config says {shape}")
        if problems:
            raise CheckpointError(f"{prefix} does not match its bert_config: " + "; ".join(problems[:10]))
    return out


def save_torch(state: dict[str, np.ndarray], path: Path) -> None:
    """Write `state` (from `convert`) to `path` as NVIDIA's converter does: `{"model": state_dict}`, the
    vocabulary rows padded with zeros to a multiple of VOCAB_MULTIPLE."""
    import torch

    from training.common.files import atomic_path

    tensors: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        # Tied weights share one tensor, as in the model itself.
        same = next((tensors[k] for k in tensors if state[k] is value), None)
        if same is not None:
            tensors[key] = same
            continue
        tensor = torch.from_numpy(value)
        pad = -len(tensor) % VOCAB_MULTIPLE if key in VOCAB_TENSORS else 0
        tensors[key] = torch.cat([tensor, tensor.new_zeros((pad, *tensor.shape[1:]))]) if pad else tensor
    with atomic_path(path) as tmp:
        torch.save({"model": tensors}, tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path, help="TF1 checkpoint prefix, e.g. phase1/model.ckpt-28252")
    parser.add_argument(
        "output", type=Path, help='where to write the PyTorch checkpoint (.pt, {"model": ...})'
    )
    parser.add_argument("--bert-config", type=Path, help="bert_config.json to check shapes against")
    args = parser.parse_args(argv)
    try:
        cfg = json.loads(args.bert_config.read_text()) if args.bert_config else None
        state = convert(args.checkpoint, cfg)
        save_torch(state, args.output)
    except (OSError, CheckpointError, KeyError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {len(state)} tensors to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
