"""The training-throughput suite (AMD's ROCm PyTorch training container, seed 002), as its users type it:

    torchrun --nproc_per_node=8 train_fsdp.py configs/throughput/llama-3.1-8b-4k.json llama \
        --batch_size 3 --enable_fp8 True
    torchrun --nproc_per_node=8 train_fsdp.py configs/throughput/mistral-7b-v0.1.json mistral --batch_size 4
    python train_fsdp.py --suite [--nproc_per_node 8] [--output_dir DIR]     # the seed's whole table

`python train_fsdp.py --help` (or `--suite --help`) lists the flags; training/throughput/README.md says more.
"""

import os
import sys

# The CUDA caching allocator's expandable segments, unless PYTORCH_(CUDA_)ALLOC_CONF is set: near the memory's
# limit the default allocator gave memory back to the driver and asked for it again every step (cudaFree
# synchronizes the GPU): FLUX.1 at its auto batch on 4 x H100 ran 2.0x slower (perf/RESULTS.md). Set here,
# before torch starts; the suite's rows inherit it.
if not (os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF")):
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

if __name__ == "__main__":
    if sys.argv[1:2] == ["--suite"]:
        from training.throughput.suite import main
    else:
        from training.throughput.run import main
    from training.common.outcome import exit_process  # (a torchrun worker skips the interpreter's teardown)

    exit_process(main(sys.argv[2:] if sys.argv[1:2] == ["--suite"] else sys.argv[1:]))
