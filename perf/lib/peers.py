"""The trusted implementations the benches measure ours against, built and stepped as their users write them:
Hugging Face's `LlamaForCausalLM` (bf16 autocast or bf16 weights, its float32 loss, torch's AdamW and
clip_grad_norm_), with `peft`'s LoRA adapters for the LoRA runs, and Hugging Face's `BertForPreTraining`.

A peer starts from the weights ours draws from the same seed (`init_hf_like_ours`: our init's rules in our
parameter order), so a first loss is the same to rounding and the per-step losses are comparable.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from training.fp8 import Fp8
from training.llama.model import LlamaShape, cross_entropy, init_parameters

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]  # peft's modules for the MLPerf recipe's adapters


def hf_names_to_ours(named_parameters) -> dict[str, torch.Tensor]:
    """A Hugging Face `LlamaForCausalLM`'s parameters (or peft's wrapping of one) by our model's names:
    `model.` and peft's `base_model.model.` prefixes and `.base_layer` dropped. Adapters are left out."""
    out = {}
    for name, p in named_parameters:
        if "lora_" in name:
            continue
        name = name.removeprefix("base_model.model.").replace(".base_layer.", ".").removeprefix("model.")
        out[name] = p
    return out


def init_hf_like_ours(model: torch.nn.Module, shape: LlamaShape) -> None:
    """Give a Hugging Face Llama (or peft's wrapping of one) the weights ours draws from the same seed:
    our init's rules in our parameter order (`training.llama.model.init_parameters`)."""
    init_parameters(hf_names_to_ours(model.named_parameters()), shape)


def hf_config(shape: LlamaShape):
    """Hugging Face's `LlamaConfig` of our shape, with its SDPA attention."""
    import transformers

    return transformers.LlamaConfig(**shape.to_hf_config(), attn_implementation="sdpa", use_cache=False)


def hf_llama(shape: LlamaShape):
    """Hugging Face's Llama of `shape`, unmaterialized (meta): built, wrapped and sharded before any rank
    allocates its part."""
    import transformers  # imported outside the meta-device context below

    config = hf_config(shape)
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config)


@torch.no_grad()
def initialize_hf(model, shape: LlamaShape, device: torch.device) -> None:
    """Our weights from the same seed (`init_hf_like_ours`), and RoPE's float32 buffer, allocated empty."""
    init_hf_like_ours(model, shape)
    inner = next(m for m in model.modules() if hasattr(m, "rotary_emb"))  # (its decoder, under peft's too)
    rotary = type(inner.rotary_emb)
    try:
        fresh = rotary(config=model.config, device=device)  # transformers 4.x
    except TypeError:
        fresh = rotary(config=model.config)  # 5.x computes it on the CPU
    inner.rotary_emb = fresh.to(device)


def peft_lora(shape: LlamaShape, device: torch.device, mesh, recompute: bool) -> tuple[torch.nn.Module, str]:
    """What a user of peft builds for the MLPerf recipe: `get_peft_model(LoraConfig(r=16, lora_alpha=32,
    lora_dropout=0.1, target_modules=[q, k, v, o]))` on the Hugging Face model in bf16 (GPUs; float32 on the
    CPU), Hugging Face's gradient checkpointing of every block with `recompute`; under several ranks, FSDP2
    per decoder layer then the root (`MixedPrecisionPolicy(bf16, float32)`; its float32 adapters are peft's
    default). Our base weights from the same seed, peft's own adapter init (A Kaiming, B zero). Returns the
    model and how it is sharded."""
    import peft

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = hf_llama(shape)
    with torch.device("meta"):
        model = model.to(dtype)
        lora = peft.LoraConfig(
            r=16, lora_alpha=32, lora_dropout=0.1, bias="none", target_modules=LORA_TARGETS
        )
        model = peft.get_peft_model(model, lora)
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    sharded = "off"
    if mesh is not None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        for layer in model.base_model.model.model.layers:
            fully_shard(layer, mesh=mesh["dp"], mp_policy=policy)
        fully_shard(model, mesh=mesh["dp"], mp_policy=policy)
        sharded = f"FSDP2 over {mesh['dp'].size()} ranks ({str(dtype)[6:]} gather, fp32 reduce)"
    model.to_empty(device=device)
    initialize_hf(model, shape, device)  # our base's weights from the same seed (the same draws)
    with torch.no_grad():  # peft's init for the adapters (A kaiming, B zero)
        for name, p in model.named_parameters():
            if "lora_A" in name:
                torch.nn.init.kaiming_uniform_(p, a=5**0.5)
            elif "lora_B" in name:
                torch.nn.init.zeros_(p)
    model.train()
    return model, sharded


def peft_fused_like(ours: torch.nn.Module, shape: LlamaShape, device: torch.device, recompute: bool = False):
    """Hugging Face + peft with the q/k/v adapters sharing one A, which is exactly our fused q|k|v adapter
    (one A, B's rows split): `ours`' base weights and adapters, dropout off, bf16 weights (`recompute`:
    Hugging Face's gradient checkpointing of every block)."""
    import peft
    import transformers

    config = hf_config(shape)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
        # RoPE's inverse frequencies in float32, as ours (the cast above rounded them to bf16: at position
        # 8000 that moved the angles enough to put the first loss 0.15-0.19% off ours on the same weights)
        model.model.rotary_emb = type(model.model.rotary_emb)(config=config).to(device)
    base = {k: v for k, v in ours.state_dict().items() if "adapter" not in k}
    hf_state = {("lm_head.weight" if k == "lm_head.weight" else f"model.{k}"): v for k, v in base.items()}
    missing, unexpected = model.load_state_dict(hf_state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    lora = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, bias="none", target_modules=LORA_TARGETS)
    model = peft.get_peft_model(model, lora)
    inner = model.base_model.model.model

    def copy(weight: torch.Tensor) -> torch.nn.Parameter:
        return torch.nn.Parameter(weight.detach().float().clone())

    for block, mine in zip(inner.layers, ours.layers):
        attn, adapters = block.self_attn, mine.self_attn
        a = copy(adapters.qkv_adapter.lora_a.weight)
        sizes = [attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features]
        b = adapters.qkv_adapter.lora_b.weight.split(sizes)
        for proj, rows in zip((attn.q_proj, attn.k_proj, attn.v_proj), b):
            proj.lora_A["default"].weight = a  # one A for q, k and v: the fused adapter
            proj.lora_B["default"].weight = copy(rows)
        attn.o_proj.lora_A["default"].weight = copy(adapters.o_adapter.lora_a.weight)
        attn.o_proj.lora_B["default"].weight = copy(adapters.o_adapter.lora_b.weight)
    if recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def hf_step(
    model,
    optimizer,
    clip: float,
    autocast=None,
    fp8: Fp8 | None = None,
    sync_each: bool = False,
    mean_over_ranks: bool = False,
):
    """One optimizer step of a Hugging Face model as its user writes it: `step(micro_batches, lr)` runs each
    (tokens, labels) micro-batch's forward (in `autocast` and FP8's context) and the float32 cross-entropy,
    its backward (the gradients averaged over the micro-batches; FSDP2 reduce-scatters after the last, or
    after each with `sync_each`), torch's clip_grad_norm_ at `clip`, the optimizer at `lr`, FP8's hook.
    Returns the loss, the mean over the ranks with `mean_over_ranks` (as ours logs it)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    autocast = autocast or contextlib.nullcontext()
    fp8 = fp8 or Fp8()

    def step(micro_batches: list[tuple[torch.Tensor, torch.Tensor]], lr: float) -> torch.Tensor:
        for group in optimizer.param_groups:
            group["lr"] = lr
        accum, total = len(micro_batches), 0.0
        for micro, (tokens, labels) in enumerate(micro_batches):
            if accum > 1 and hasattr(model, "set_requires_gradient_sync"):
                model.set_requires_gradient_sync(sync_each or micro == accum - 1)
            with autocast, fp8.forward_context():
                loss = cross_entropy(model(input_ids=tokens, use_cache=False).logits, labels)
            (loss / accum).backward()
            total = total + loss.detach() / accum
        if mean_over_ranks:
            dist.all_reduce(total)
            total = total / dist.get_world_size()
        torch.nn.utils.clip_grad_norm_(params, clip, foreach=True)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        fp8.weights_changed(model)
        return total

    return step


def hf_bert_step(hf, optimizer, seq: int, autocast, device):
    """Hugging Face's BERT step: `step(batch, lr)` with its own loss (MLM + NSP, each a mean) and the given
    optimizer."""
    hf.train()

    def step(b, lr: float) -> torch.Tensor:
        for group in optimizer.param_groups:
            group["lr"] = lr
        n = b.input_ids.shape[0]
        labels = torch.full((n * seq,), -100, dtype=torch.long, device=device)
        labels[b.mlm_index.to(device)] = b.mlm_labels.to(device)
        with autocast:
            out = hf(
                input_ids=b.input_ids.to(device),
                token_type_ids=b.segment_ids.to(device),
                labels=labels.view(n, seq),
                next_sentence_label=b.nsp_labels.to(device),
            )
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return out.loss.detach()

    return step
