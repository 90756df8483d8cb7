"""The training-throughput suite (seed 002, AMD's ROCm PyTorch training container): `train_fsdp.py`, on the
shared Llama model code and FSDP2 stack, and diffusers' FLUX.1 transformer. Not an MLPerf benchmark; see
README.md."""
