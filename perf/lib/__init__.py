"""What the `perf/` commands share, as a small library: each command (`perf/*.py`) is a thin script on top of
it, and no command imports another (`tests/test_layering.py`).

- `overrides`: a bench variant as its benchmark's config plus `NAME=VALUE` overrides in the config's own
  names, built as the trainer builds its config (`from_env`), and the options every such bench takes;
- `shapes`: the toy shape of the CPU smoke runs (`--tiny`);
- `rows`, `bert_rows`, `text`: the rows the benches train on (the bundled Wikipedia excerpt, BERT's packed
  rows);
- `schedules`: the benches' learning rates;
- `parity`: the one tolerance table and the one verdict on a variant's losses;
- `peers`: the trusted implementations the benches compare with (Hugging Face, peft), built and stepped as
  their users write them;
- `timing`: steps timed, the peak memory, the matmul peak, profiles, versions, the kernel benches' rows;
- `memory`: the memory marks of one step;
- `processes`: the processes a command runs in (one, or torchrun's), their device and process group.

Run the commands as modules from the repository root:

    python -m perf.bench_lora ...
    torchrun --nproc_per_node=4 -m perf.bench_llama ...
"""
