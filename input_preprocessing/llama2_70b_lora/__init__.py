"""Llama 2 70B LoRA data and model preparation: the MLCommons GovReport set as AMD's and NVIDIA's `.npy`
files, the Llama 2 70B safetensors from Hugging Face, and the CPU default's sample (see README.md)."""
