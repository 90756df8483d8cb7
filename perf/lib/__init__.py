"""What the `perf/` commands share, as a small library: no command imports another, they all import from here.

- `variants`: the benchmarks' own runs as `RunSpec`s (their configs' `run_spec`) and the bench variants
  derived from them;
- `shapes`: the toy shapes of the CPU smoke runs;
- `rows`: the token rows the benches train on (the bundled Wikipedia excerpt, `text`) and BERT's packed rows;
- `schedules`: the benches' learning rates;
- `parity`: the one tolerance table and the one verdict on a variant's losses, the peers' weights;
- `peers`: the trusted implementations the benches compare with (Hugging Face, peft);
- `timing`: steps timed, the matmul peak, profiles, versions, the tables' cells;
- `memory`: the memory marks of one step.
"""
