"""Write the tiny TF1 BERT checkpoint fixture used by test_tf_checkpoint.py.

Run once, with TensorFlow, in a scratch virtualenv (TensorFlow is not a dependency of this project):

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu numpy
    /tmp/tfvenv/bin/python tests/bert_data/make_tf1_fixture.py tests/data

It writes, through TensorFlow's own TF1 `Saver` (the writer that produced MLPerf's `model.ckpt-28252`):
  tf1_bert_tiny.ckpt.index, tf1_bert_tiny.ckpt.data-00000-of-00001   the checkpoint (no .meta: not needed)
  tf1_bert_tiny_expected.npz    every variable as TensorFlow reads it back, keyed by its TF name
  tf1_bert_tiny_config.json     the tiny model's bert_config.json
The variables carry the real BERT names (2 layers, hidden 8), plus optimizer slots and `global_step`, which
the converter must skip, as the MLPerf checkpoint holds them too.
"""

import json
import sys
from pathlib import Path

import numpy as np
import tensorflow as tf

CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 8,
    "initializer_range": 0.02,
    "intermediate_size": 16,
    "max_position_embeddings": 16,
    "num_attention_heads": 2,
    "num_hidden_layers": 2,
    "type_vocab_size": 2,
    "vocab_size": 24,
}


def variable_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    shapes = {
        "bert/embeddings/word_embeddings": (v, h),
        "bert/embeddings/position_embeddings": (cfg["max_position_embeddings"], h),
        "bert/embeddings/token_type_embeddings": (cfg["type_vocab_size"], h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
    }
    for n in range(cfg["num_hidden_layers"]):
        p = f"bert/encoder/layer_{n}"
        for name in ("query", "key", "value"):
            shapes[f"{p}/attention/self/{name}/kernel"] = (h, h)
            shapes[f"{p}/attention/self/{name}/bias"] = (h,)
        shapes[f"{p}/attention/output/dense/kernel"] = (h, h)
        shapes[f"{p}/attention/output/dense/bias"] = (h,)
        shapes[f"{p}/attention/output/LayerNorm/gamma"] = (h,)
        shapes[f"{p}/attention/output/LayerNorm/beta"] = (h,)
        shapes[f"{p}/intermediate/dense/kernel"] = (h, i)
        shapes[f"{p}/intermediate/dense/bias"] = (i,)
        shapes[f"{p}/output/dense/kernel"] = (i, h)
        shapes[f"{p}/output/dense/bias"] = (h,)
        shapes[f"{p}/output/LayerNorm/gamma"] = (h,)
        shapes[f"{p}/output/LayerNorm/beta"] = (h,)
    shapes.update(
        {
            "bert/pooler/dense/kernel": (h, h),
            "bert/pooler/dense/bias": (h,),
            "cls/predictions/transform/dense/kernel": (h, h),
            "cls/predictions/transform/dense/bias": (h,),
            "cls/predictions/transform/LayerNorm/gamma": (h,),
            "cls/predictions/transform/LayerNorm/beta": (h,),
            "cls/predictions/output_bias": (v,),
            "cls/seq_relationship/output_weights": (2, h),
            "cls/seq_relationship/output_bias": (2,),
        }
    )
    return shapes


def main(out_dir: Path) -> None:
    tf.compat.v1.disable_eager_execution()
    rng = np.random.default_rng(20240601)
    shapes = variable_shapes(CONFIG)
    graph = tf.Graph()
    with graph.as_default():
        variables = [
            tf.compat.v1.Variable(rng.standard_normal(shape).astype(np.float32), name=name)
            for name, shape in shapes.items()
        ]
        # Optimizer slots for two variables and the step counter: present in the real checkpoint, skipped.
        for name in ("bert/embeddings/word_embeddings", "bert/encoder/layer_0/attention/self/query/kernel"):
            for slot in ("adam_m", "adam_v"):
                value = rng.standard_normal(shapes[name]).astype(np.float32)
                variables.append(tf.compat.v1.Variable(value, name=f"{name}/{slot}"))
        variables.append(tf.compat.v1.Variable(np.int64(28252), name="global_step"))
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, str(out_dir / "tf1_bert_tiny.ckpt"), write_meta_graph=False, write_state=False)

    reader = tf.train.load_checkpoint(str(out_dir / "tf1_bert_tiny.ckpt"))
    expected = {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}
    np.savez_compressed(out_dir / "tf1_bert_tiny_expected.npz", **expected)
    (out_dir / "tf1_bert_tiny_config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    print(f"wrote {len(expected)} variables with TensorFlow {tf.__version__} to {out_dir}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
