"""The settings both Llama benchmarks share, declared once: how the shared model computes and lays itself
out (attention kernel, compiled blocks, recomputation, FSDP2's gathers, the AdamW kernel) and FP8 on or off,
and their translation into the family's `RunSpec` (`llama_run_spec`). `LlamaPretrainConfig` (Llama 3.1 8B)
and `LoraConfig` (Llama 2 70B LoRA) add their own data, schedule, shape and features; a new Llama-family
setting is one field here and one line of `llama_run_spec`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from training.common.config import ConfigError, RunSettings, var
from training.fp4 import HEALING_PRECISIONS, WARMUP_RECIPES, Fp4Settings
from training.fp4 import RECIPES as FP4_RECIPES
from training.fp4.linear import Fp4Recipe
from training.fp8 import Fp8Settings
from training.llama.attention import ATTENTIONS
from training.llama.build import FP8_MLP, AdamWSettings, RunSpec, StepSettings
from training.llama.model import LlamaShape
from training.llama.parallel import Features, Parallelism
from training.lora import LoraSettings

ADAMW_IMPLS = ("auto", "torch")


@dataclass(frozen=True, kw_only=True)
class LlamaRunSettings(RunSettings):
    attention: str = var("ATTENTION", "auto", help=" | ".join(ATTENTIONS))
    compile: bool = var("COMPILE", False, help="torch.compile each transformer block")
    activation_checkpointing: bool = var(
        "ACTIVATION_CHECKPOINTING", False, help="recompute blocks in backward"
    )
    reshard_after_forward: bool = var(
        "RESHARD_AFTER_FORWARD", True, help="0: FSDP2 keeps every block gathered from forward to backward"
    )
    reduce_each_micro_batch: bool = var(
        "REDUCE_EACH_MICRO_BATCH",
        False,
        help="1: FSDP2 reduce-scatters the gradients after every micro-batch, not once a step (no unsharded "
        "float32 gradients of the whole model held between micro-batches: 32 GB for the 8B; LoRA's are the "
        "adapters' only)",
    )
    grad_reduce_in_fp32: bool = var(
        "GRAD_REDUCE_IN_FP32",
        True,
        help="0: FSDP2 reduce-scatters the gradients in bf16, as AMD's and NVIDIA's Llama submissions do "
        "(Megatron's grad_reduce_in_fp32=False): half the bytes copied and sent; the sharded float32 "
        "gradients still accumulate in float32",
    )
    fp8_param_gather: bool = var(
        "FP8_PARAM_GATHER", True, help="FSDP2 all-gathers the FP8 linears' weights in FP8 (native, torchao)"
    )
    fp8_mlp_activations: bool = var(
        "FP8_MLP_ACTIVATIONS",
        False,
        help="1 (native FP8): the blocks not recomputed keep their MLP's SwiGLU inputs for the backward in "
        "e4m3, scaled by their own amax, not bf16 (0.44 GiB less a Llama 2 70B block at 8192 tokens); the "
        "backward computes from the e4m3-rounded values",
    )
    fp8_dpa: bool = var(
        "FP8_DPA",
        False,
        help="1 (with PRECISION=fp8): attention in FP8, NVIDIA's name for it: cuDNN's FP8 SDPA forward and "
        "backward (nvidia-cudnn-frontend, NVIDIA GPUs), Q, K, V and dO cast to e4m3 by their own amax; "
        "ATTENTION must be auto",
    )
    fp4: bool = var(
        "FP4",
        False,
        help="True: the blocks' linears compute in 4 bits (FP4_RECIPE), emulated where the GPU has no FP4 "
        "GEMM; needs PRECISION=fp8 or auto (FP8 heals it: HEALING_ITER)",
    )
    fp4_recipe: str = var("FP4_RECIPE", "nvfp4", help="mxfp4 (AMD's) | nvfp4 (NVIDIA's)")
    healing_iter: int | None = var(
        "HEALING_ITER",
        None,
        help="FP4: the optimizer steps run in 4 bits, then FP8 delayed scaling (HEALING_PRECISION); unset: "
        "4 bits throughout",
        bounds=">= 0",
    )
    healing_precision: str = var("HEALING_PRECISION", "FP8_DS", help="FP8_DS (FP8 delayed scaling)")
    warmup_recipe: str = var(
        "WARMUP_RECIPE", "", help="fp8_hybrid (FP4): the synthetic warm-up steps in FP8, then 4 bits"
    )
    mxfp4_use_hadamard: bool = var(
        "NVTE_MXFP4_USE_HADAMARD", False, help="MXFP4: a 16-point Hadamard rotation before quantizing"
    )
    nvfp4_disable_rht: bool = var(
        "NVTE_NVFP4_DISABLE_RHT", False, help="NVFP4: no random Hadamard transform of the wgrad operands"
    )
    nvfp4_disable_2d: bool = var(
        "NVTE_NVFP4_DISABLE_2D_QUANTIZATION", False, help="NVFP4: weights in 16-blocks, not 16x16 tiles"
    )
    nvfp4_disable_sr: bool = var(
        "NVTE_NVFP4_DISABLE_STOCHASTIC_ROUNDING",
        False,
        help="NVFP4: gradients rounded to nearest, not stochastically",
    )
    adamw_impl: str = var(
        "ADAMW_IMPL",
        "auto",
        help="auto (GPUs: ours in Triton where it matches torch's fused AdamW there, else torch's) | torch",
    )

    def parallelism(self, world_size: int) -> Parallelism:
        """The layout of `world_size` ranks (each benchmark's; a ConfigError naming the variables if it does
        not fit)."""
        raise NotImplementedError

    def synthetic_warmup_passes(self) -> int:
        """The untimed forward and backward passes on random tokens before run_start (each benchmark's
        setting); WARMUP_RECIPE names their precision."""
        raise NotImplementedError

    def scale_problems(self, world_size: int | None = None) -> list[str]:
        """The shared checks (`RunSettings.scale_problems`) and the benchmark's layout on the world size."""
        problems = super().scale_problems(world_size)
        try:
            self.parallelism(world_size or self.world_size())
        except ConfigError as err:
            problems.append(str(err))
        return problems

    def llama_run_spec(
        self,
        shape: LlamaShape,
        clip_norm: float,
        adamw: tuple[float, tuple[float, float], float, float],
        *,
        fp8_recipe: str = "tensorwise",
        lora: LoraSettings | None = None,
        checkpoint_layers: int | None = None,
        keep_attention: bool = False,
        offload_layers: int = 0,
        checkpoint: Path | None = None,
        fp8_weights: bool = False,
    ) -> RunSpec:
        """The run of `shape` these settings describe, with the benchmark's own: its clip and AdamW's (lr,
        betas, eps, weight decay), its FP8 recipe, LoRA adapters, recompute of the first blocks only (and
        around the attention kernel), weights. FP8 for the blocks' linears when asked, each MLP one function
        with the native backend and the weights all-gathered in FP8 where FSDP2 shards them
        (FP8_PARAM_GATHER)."""
        fp8 = None
        if self.fp8:
            fp8 = Fp8Settings(
                backend=self.fp8_backend,
                recipe=fp8_recipe,
                gather_in_fp8=self.fp8_param_gather,
                fuse_mlp=FP8_MLP,
                casts=self.fp8_casts,
                amax_history=self.fp8_amax_history,
                amax_algo=self.fp8_amax_algo,
                mlp_activations_in_fp8=self.fp8_mlp_activations,
                fast_accum=self.fp8_fast_accum,
            )
        features = Features(
            fp8=fp8,
            fp4=self.fp4_settings(),
            lora=lora,
            activation_checkpointing=self.activation_checkpointing,
            checkpoint_layers=checkpoint_layers,
            keep_attention=keep_attention,
            offload_layers=offload_layers,
            compile=self.compile,
            reshard_after_forward=self.reshard_after_forward,
            grad_reduce_in_fp32=self.grad_reduce_in_fp32,
        )
        return RunSpec(
            shape,
            features,
            StepSettings(clip_norm=clip_norm, sync_each_micro_batch=self.reduce_each_micro_batch),
            AdamWSettings(*adamw, impl=self.adamw_impl),
            attention=self.attention,
            precision=self.requested_precision(),
            checkpoint=checkpoint,
            fp8_weights=fp8_weights,
            fp8_attention=self.fp8_dpa,
        )

    def requested_precision(self) -> str:
        """PRECISION with FP8=1 folded in; FP4=True runs its non-4-bit parts as PRECISION=fp8 does (bf16
        compute, native FP8 for the healed linears)."""
        return "fp8" if self.fp4 else super().requested_precision()

    def substitutions(self, world_size: int) -> list[str]:
        """FP4=True where the GPU has no 4-bit GEMM this toolkit calls (anything but sm100: H100, H200,
        MI300X, MI355X, the CPU): the recipe's values through emulated GEMMs, for numerics, not speed."""
        if not self.fp4:
            return []
        line = (
            f"FP4=True: the {self.fp4_recipe.upper()} GEMMs run emulated (quantize, dequantize, float32 "
            "GEMM: the recipe's values, for numerics, not speed) except on sm100 GPUs (B200, B300), where "
            "PyTorch's block-scaled FP4 GEMM runs; the run's fp8 backend line says which"
        )
        return [line]

    def fp4_settings(self) -> Fp4Settings | None:
        """The 4-bit recipe FP4=True asks for (None without it), the vendors' switches mapped one to one."""
        if not self.fp4:
            return None
        recipe = Fp4Recipe(
            self.fp4_recipe,
            mxfp4_hadamard=self.mxfp4_use_hadamard,
            nvfp4_rht=not self.nvfp4_disable_rht,
            nvfp4_2d=not self.nvfp4_disable_2d,
            nvfp4_stochastic=not self.nvfp4_disable_sr,
        )
        # WARMUP_RECIPE=fp8_hybrid: the warm-up's passes in FP8, where there are any
        warmup_in_fp8 = self.warmup_recipe == "fp8_hybrid" and self.synthetic_warmup_passes() > 0
        return Fp4Settings(recipe, self.healing_iter, warmup_in_fp8)

    def fp4_problems(self) -> list[str]:
        """The FP4 settings' values and combinations, each naming its variable."""
        problems = [
            f"{name}={value!r} is not one of {', '.join(choices)}"
            for name, value, choices in (
                ("FP4_RECIPE", self.fp4_recipe, FP4_RECIPES),
                ("HEALING_PRECISION", self.healing_precision, HEALING_PRECISIONS),
                ("WARMUP_RECIPE", self.warmup_recipe, WARMUP_RECIPES),
            )
            if value not in choices
        ]
        if self.fp4 and self.fp8_backend not in ("auto", "native"):
            problems.append(
                f"FP4=True heals into native FP8: FP8_BACKEND={self.fp8_backend} cannot (auto or native)"
            )
        return problems

    @property
    def fp8(self) -> bool:
        """FP8 matmuls in the transformer blocks (PRECISION=fp8, or FP8=1)."""
        return self.requested_precision() == "fp8"

    def llama_problems(self) -> list[str]:
        """The shared settings' choices, each naming its variable."""
        problems = [
            f"{name}={value!r} is not one of {', '.join(choices)}"
            for name, value, choices in (
                ("ATTENTION", self.attention, ATTENTIONS),
                ("ADAMW_IMPL", self.adamw_impl, ADAMW_IMPLS),
            )
            if value not in choices
        ]
        if self.fp4 and self.precision not in ("auto", "bf16", "fp8"):
            problems.insert(0, f"FP4=True (bf16 around 4-bit GEMMs) contradicts PRECISION={self.precision}")
        problems += self.fp4_problems()
        if self.fp8_mlp_activations and not (self.fp8 and self.fp8_backend in ("auto", "native")):
            problems.append(
                "FP8_MLP_ACTIVATIONS=1 needs PRECISION=fp8 with FP8_BACKEND=native (or auto: "
                "native where the OCP FP8 formats run)"
            )
        if self.fp8_dpa and not self.fp8:
            problems.append("FP8_DPA=1 (FP8 attention) needs PRECISION=fp8 (or FP8=1)")
        if self.fp8_dpa and self.attention != "auto":
            problems.append(
                f"FP8_DPA=1 runs cuDNN's FP8 attention: ATTENTION={self.attention} contradicts "
                "it (leave ATTENTION=auto)"
            )
        return problems
