"""Parts of the training steps on one GPU, each variant against the way the step does it now.

    python -m perf.parts [llama-optim] [adamw-sweep] [llama-gemm] [llama-ce] [bert-gemm] [fp8-cast]
        [fp8-linear] [fp8-mlp] [fp8-gemm]

llama-optim: the update after backward for one rank's quarter of Llama 3.1 8B under FSDP2 on 4 GPUs (2.0e9
float32 parameters in the 291 shard shapes): gradient norm, clip (scale), fused AdamW, and AdamW with the clip
folded into its `grad_scale` (no separate pass over the gradients); and ours (`fused_adamw.TritonAdamW`).
adamw-sweep: `TritonAdamW`'s kernel (bf16-held weights) over its launch settings, against `copy_` of as
many bytes.
llama-gemm: the block's projections at 8192 tokens, fwd + bwd: q/k/v as three linears vs one fused, gate/up as
two vs one; bf16 and torchao float8 (tensorwise), compiled.
llama-ce: final projection to the 128,256-entry vocabulary and float32 cross-entropy, fwd + bwd: eager (what
the trainer runs) vs compiled.
bert-gemm: the 3 GEMMs (forward, input gradient, weight gradient) of each of BERT-Large's 4 linears per layer
at 48 x 512 tokens, bf16 `mm` vs `torch._scaled_mm` FP8 (e4m3 x e4m3 forward, e5m2 x e4m3 gradients,
operands already cast and laid out: the upper bound of what FP8 can save on the GEMMs alone).
fp8-cast: the native FP8 linear's cast + transpose (+ amax) of one matrix: the Triton kernel
(`training.fp8.kernels`) checked bit for bit against PyTorch's cast, and timed against the same
written in PyTorch and compiled, each in a CUDA graph (GB/s counts the bytes read and written once).
fp8-linear: one linear of each of BERT-Large's and Llama 3.1 8B's shapes, compiled, fwd + bwd: bf16
`nn.Linear` vs `Fp8Linear` with its casts in PyTorch vs in the Triton kernel; the two FP8 paths' outputs and
gradients compared, and each one's amax checked (the true maxima after a step, unchanged by a no-grad
forward).
fp8-mlp: Llama 3.1 8B's MLP (SwiGLU, 4096 -> 14336 -> 4096) at 8192 tokens and BERT-Large's FFN (GELU, 1024
-> 4096 -> 1024, biases) at 48 x 512 tokens, compiled, fwd + bwd: bf16 vs native FP8 linear by linear vs
fused (`FusedFp8MLP`: x cast once, the activation and its gradients written only in FP8 by the Triton
kernels); the fused output and gradients against the unfused ones, and the kernels checked against PyTorch at
these shapes (`training.fp8.casts.triton_casts_fault`).
fp8-gemm: every FP8 GEMM of a Llama 3.1 8B block and of a Llama 2 70B block at 8192 tokens (forward, input
gradient, and for the 8B the weight gradient), as the native linear calls `torch._scaled_mm` (e4m3 x e4m3,
e5m2 x e4m3, random operands already cast and laid out), with the partial sums promoted (what the native
path runs by default) and with cuBLASLt's fast accumulation: each shape's share of the dense FP8 peak
(1,979 TFLOP/s, the H100 and H200 datasheets'), and a block's GEMM time with every GEMM promoted against
Transformer Engine's split (forward fast, gradients promoted: FP8_FAST_ACCUM=1).
Prints a table per part last: median ms (CUDA events) and TFLOP/s where the work is GEMMs.
"""

from __future__ import annotations

import sys
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from perf.lib.timing import table, timed
from training.llama.model import LlamaShape

DEV = torch.device("cuda")
BF16 = torch.bfloat16


def llama_shards(shape: LlamaShape, ranks: int) -> list[tuple[int, ...]]:
    """The local shapes FSDP2 (Shard(0)) gives one rank of `ranks` for every parameter of the model."""
    h, kv, f = shape.hidden_size, shape.num_kv_heads * shape.head_dim, shape.ffn_hidden_size
    block = [(h, h), (kv, h), (kv, h), (h, h), (f, h), (f, h), (h, f), (h,), (h,)]
    full = [(shape.vocab_size, h)] + block * shape.num_layers + [(h,), (shape.vocab_size, h)]
    return [(-(-s[0] // ranks), *s[1:]) for s in full]


def llama_optim() -> None:
    shapes = llama_shards(LlamaShape(), 4)
    params = [torch.randn(s, device=DEV) * 0.02 for s in shapes]
    for p in params:
        p.requires_grad_(True)
        p.grad = torch.randn_like(p) * 1e-3
    grads = [p.grad for p in params]
    n = sum(p.numel() for p in params)
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1, fused=True)
    opt.step()  # state allocated
    results = []

    def norm():
        return torch.nn.utils.get_total_norm(grads, foreach=True)

    def coef():
        return torch.clamp(1.0 / (norm() + 1e-6), max=1.0)

    def folded():
        opt.grad_scale = 1.0 / coef()  # AdamW divides each gradient by it inside its fused kernel
        opt.step()
        del opt.grad_scale

    def clip():
        return torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)

    def scale():
        torch._foreach_mul_(grads, coef())

    timed(results, "gradient norm (get_total_norm, foreach)", norm, 0)
    timed(results, "scale (_foreach_mul_ by the clip coefficient)", scale, 0)
    timed(results, "clip_grad_norm_ (torch, foreach): norm + scale", clip, 0)
    timed(results, "fused AdamW step", opt.step, 0)
    timed(results, "clip_grad_norm_ + fused AdamW (the trainer now)", lambda: (clip(), opt.step()), 0)
    timed(results, "norm + fused AdamW with grad_scale (clip folded in)", folded, 0)
    from training.llama.fused_adamw import TritonAdamW, adamw_fault

    ours = TritonAdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-5, weight_decay=0.1)
    ours.step()
    timed(
        results, f"ours: TritonAdamW step (check against torch's: {adamw_fault(DEV) or 'ok'})", ours.step, 0
    )
    gb = 28 * n / 1e9  # read parameter, gradient, both moments; write parameter and moments
    for name, ms, _ in (results[3], results[-1]):  # torch's fused AdamW step, ours
        print(f"{name}: {gb / ms:.2f} TB/s ({gb:.0f} GB per step)")
    table(
        f"Llama 3.1 8B update, one rank of 4: {n / 1e9:.2f}e9 fp32 parameters in {len(params)} tensors",
        results,
    )


def adamw_sweep() -> None:
    """`TritonAdamW`'s kernel over its launch settings, on one rank of 8's shards of Llama 3.1 8B held in
    bf16 (`hold_bf16`: 28 bytes a parameter, the bf16 gradient read and the bf16 weight written), against
    `copy_` of as many bytes (each read once and written once)."""
    import triton

    from training.llama.fused_adamw import _adamw_kernel

    shapes = llama_shards(LlamaShape(), 8)  # 1.0e9 parameters: 44 GB with the copy's buffers
    masters = [torch.randn(s, device=DEV) * 0.02 for s in shapes]
    grads, weights = [torch.randn_like(p).to(BF16) for p in masters], [p.to(BF16) for p in masters]
    moments = [(torch.zeros_like(p), torch.rand_like(p)) for p in masters]
    n = sum(p.numel() for p in masters)
    gb = 28 * n / 1e9

    def update(block: int, warps: int) -> None:
        for p, g, (m, v), w in zip(masters, grads, moments, weights):
            _adamw_kernel[(triton.cdiv(p.numel(), block),)](
                p,
                g,
                m,
                v,
                p,
                w,
                p.numel(),
                1e-6,
                0.9,
                0.95,
                1e-8,
                0.1,
                1e-6,
                1.0,
                SCALED=False,
                COPY=True,
                BLOCK=block,
                num_warps=warps,
            )

    results = []
    for block in (1024, 2048, 4096, 8192):
        for warps in (4, 8, 16):
            timed(results, f"BLOCK {block}, {warps} warps", partial(update, block, warps), 0)
    half = torch.empty(int(gb * 1e9 / 8), device=DEV)  # gb / 2 bytes, read and written
    other = torch.empty_like(half)
    timed(results, "copy_ of as many bytes", lambda: other.copy_(half), 0)
    for name, ms, _ in results:
        print(f"{name}: {gb / ms:.2f} TB/s")
    table(f"AdamW update of {n / 1e9:.2f}e9 bf16-held parameters ({gb:.0f} GB a step)", results)


class Separate(nn.Module):
    def __init__(self, k: int, outs: list[int]):
        super().__init__()
        self.linears = nn.ModuleList(nn.Linear(k, o, bias=False) for o in outs)

    def forward(self, x):
        return [lin(x) for lin in self.linears]


class Fused(nn.Module):
    def __init__(self, k: int, outs: list[int]):
        super().__init__()
        self.outs = outs
        self.linear = nn.Linear(k, sum(outs), bias=False)

    def forward(self, x):
        return list(self.linear(x).split(self.outs, dim=-1))


def backward_of(module: nn.Module, x: torch.Tensor, grads: list[torch.Tensor]):
    return lambda: torch.autograd.backward(module(x), grads)


def llama_gemm() -> None:
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    s, tokens = LlamaShape(), 8192
    h, kv, f = s.hidden_size, s.num_kv_heads * s.head_dim, s.ffn_hidden_size
    x = torch.randn(tokens, h, device=DEV, dtype=BF16, requires_grad=True)
    results = []
    for what, outs in (("q/k/v", [h, kv, kv]), ("gate/up", [f, f])):
        flop = 6 * tokens * h * sum(outs)
        grads = [torch.randn(tokens, o, device=DEV, dtype=BF16) for o in outs]
        for precision in ("bf16", "fp8"):
            for kind in (Separate, Fused):
                module = kind(h, outs).to(DEV, BF16)
                if precision == "fp8":
                    convert_to_float8_training(module, config=Float8LinearConfig())
                step = backward_of(torch.compile(module), x, grads)
                name = f"{what} {precision} {'one fused linear' if kind is Fused else 'separate linears'}"
                timed(results, name, step, flop)
    table(f"Llama 3.1 8B projections, fwd+bwd, {tokens} tokens, compiled", results)


def llama_ce() -> None:
    s, tokens = LlamaShape(), 8192
    x = torch.randn(tokens, s.hidden_size, device=DEV, dtype=BF16, requires_grad=True)
    head = nn.Linear(s.hidden_size, s.vocab_size, bias=False).to(DEV, BF16)
    labels = torch.randint(0, s.vocab_size, (tokens,), device=DEV)

    def loss(x, labels):
        return F.cross_entropy(head(x).float(), labels)

    compiled = torch.compile(loss)
    flop = 6 * tokens * s.hidden_size * s.vocab_size
    results = []
    for name, fn in (("eager: logits, .float(), cross_entropy", loss), ("compiled", compiled)):
        torch.cuda.reset_peak_memory_stats()
        timed(results, name, lambda fn=fn: fn(x, labels).backward(), flop)
        peak = torch.cuda.max_memory_allocated() / 2**30
        results[-1] = (f"{results[-1][0]} (peak {peak:.1f} GiB)", *results[-1][1:])
    table(f"Llama 3.1 8B output layer + cross-entropy, fwd+bwd, {tokens} tokens", results)


def bert_linear(results: list, name: str, m: int, k: int, n: int) -> dict[str, float]:
    """ms of one linear's three GEMMs in bf16 and in FP8."""
    x, w, g = (torch.randn(a, b, device=DEV, dtype=BF16) for a, b in ((m, k), (n, k), (m, n)))
    x8, w8, g8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), g.to(torch.float8_e5m2)
    xt8, wt8, gt8 = (t.t().contiguous() for t in (x8, w8, g8))
    one = torch.ones((), device=DEV)

    def bf16():
        x @ w.t()  # forward
        g @ w  # input gradient
        g.t() @ x  # weight gradient

    def fp8():  # _scaled_mm wants a row-major first and a column-major second operand
        torch._scaled_mm(x8, w8.t(), one, one, out_dtype=BF16)
        torch._scaled_mm(g8, wt8.t(), one, one, out_dtype=BF16)
        torch._scaled_mm(gt8, xt8.t(), one, one, out_dtype=BF16)

    ms = {}
    for precision, fn in (("bf16", bf16), ("fp8", fp8)):
        timed(results, f"{name} ({m}x{k}x{n}) {precision}", fn, 6 * m * k * n)
        ms[precision] = results[-1][1]
    return ms


def bert_gemm() -> None:
    m, layers, linears = 48 * 512, 24, {"qkv": (1024, 3072), "attention out": (1024, 1024)}
    linears |= {"ffn in": (1024, 4096), "ffn out": (4096, 1024)}
    results, total = [], {"bf16": 0.0, "fp8": 0.0}
    for name, (k, n) in linears.items():
        for precision, ms in bert_linear(results, name, m, k, n).items():
            total[precision] += ms * layers
    table(f"BERT-Large linears' GEMMs, fwd + 2 bwd, {m} tokens per step", results)
    print(f"\nper step over {layers} layers: bf16 {total['bf16']:.1f} ms, fp8 {total['fp8']:.1f} ms")


E5M2 = torch.float8_e5m2


def timed_graphed(results: list, name: str, fn, work: float, calls: int = 10) -> None:
    """`timed` for a short kernel: `calls` calls of `fn` captured in a CUDA graph and replayed, so that the
    time is the GPU's alone, without the launches' CPU overhead; reported per call."""
    for _ in range(3):
        fn()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    timed(results, name, graph.replay, work * calls)
    results[-1] = (name, results[-1][1] / calls, results[-1][2])


def fp8_cast() -> None:
    from training.fp8 import casts, kernels

    def torch_path(t, scale, dtype, amax):
        amax.copy_(t.abs().amax().float())
        t8 = casts.cast(t, scale, dtype)
        return t8, t8.t().contiguous()

    compiled = torch.compile(torch_path)
    results = []
    for m, n in ((24576, 1024), (24576, 4096), (8192, 4096), (8192, 14336)):
        fault = casts.triton_casts_fault(DEV, (m, n))  # bf16 and float32 inputs, both formats
        assert not fault, f"the Triton kernel got {fault} wrong"
        t = torch.randn(m, n, device=DEV, dtype=BF16) * 3
        scale, amax = torch.tensor(40.0, device=DEV), torch.zeros((), device=DEV)
        gb = m * n * 4 * 1e3  # 2 bytes read, 1 + 1 written (x 1e3: the table prints GB/s)
        y, yt = torch.empty_like(t, dtype=E5M2), torch.empty_like(t.t(), dtype=E5M2)
        for block in ((64, 64, 4), (64, 128, 4), (128, 64, 4), (128, 128, 8), (32, 128, 4)):
            step = partial(kernels.launch, t, scale, y, yt, amax, True, block)
            timed_graphed(results, f"{m}x{n} e5m2 + amax, Triton {block}", step, gb)
        step = partial(compiled, t, scale, E5M2, amax)
        timed_graphed(results, f"{m}x{n} e5m2 + amax, PyTorch compiled", step, gb)
    print("Triton cast-transpose: bit-identical to PyTorch's cast and amax on every shape, bf16 and float32")
    table("FP8 cast + transpose + amax of one bf16 matrix", results, unit="GB/s")


def fp8_linear() -> None:
    from training.fp8.native import Fp8Linear

    shapes = {"BERT qkv": (24576, 1024, 3072), "BERT ffn in": (24576, 1024, 4096)}
    shapes |= {"BERT ffn out": (24576, 4096, 1024), "Llama q": (8192, 4096, 4096)}
    shapes |= {"Llama gate": (8192, 4096, 14336), "Llama down": (8192, 14336, 4096)}
    results, diffs = [], []
    for name, (m, k, n) in shapes.items():
        x = (torch.randn(m, k, device=DEV, dtype=BF16) * 2).requires_grad_()
        g = torch.randn(m, n, device=DEV, dtype=BF16) * 1e-3
        base = nn.Linear(k, n, bias=name.startswith("BERT")).to(DEV, BF16)
        grads = {}
        for variant in ("bf16", "fp8 PyTorch casts", "fp8 Triton casts"):
            triton = variant.endswith("Triton casts")
            lin = base if variant == "bf16" else Fp8Linear.from_linear(base, triton)
            torch._dynamo.reset()
            run = torch.compile(lin)

            def step(run=run, x=x, g=g, base=base):
                x.grad = base.weight.grad = None
                y = run(x)
                y.backward(g)
                return y

            timed(results, f"{name} ({m}x{k}x{n}) {variant}", step, 6 * m * k * n)
            if variant != "bf16":  # both FP8 paths from the same amax state give the same numbers
                lin.reset_amax()
                grads[variant] = [step().detach(), x.grad.clone(), base.weight.grad.clone()]
                amax = (float(lin.x_amax), float(lin.g_amax))
                with torch.no_grad():
                    run(x)  # a no-grad forward leaves the amax alone
                assert amax == (float(lin.x_amax), float(lin.g_amax))
                assert amax == (float(x.detach().abs().max()), float(g.abs().max())), (name, variant, amax)
        diffs.append((name, [float((a.float() - b.float()).abs().max()) for a, b in zip(*grads.values())]))
    table("One linear, compiled, fwd + bwd", results)
    print("\nmax |Triton path - PyTorch path| (y, dx, dw):")
    for name, d in diffs:
        print(f"  {name}: " + ", ".join(f"{v:.3g}" for v in d))


class Mlp(nn.Module):
    """An MLP as the models run it: Llama's SwiGLU (`swiglu`: gate, no biases) or BERT's GELU FFN (biases)."""

    def __init__(self, hidden: int, ffn: int, swiglu: bool):
        super().__init__()
        self.up, self.down = nn.Linear(hidden, ffn, bias=not swiglu), nn.Linear(ffn, hidden, bias=not swiglu)
        self.gate = nn.Linear(hidden, ffn, bias=False) if swiglu else None

    def forward(self, x):
        if self.gate is None:
            return self.down(F.gelu(self.up(x)))
        return self.down(F.silu(self.gate(x)) * self.up(x))


def fp8_mlp() -> None:
    fp8_mlp_case("Llama MLP", 8192, 4096, 14336, swiglu=True)
    fp8_mlp_case("BERT FFN", 24576, 1024, 4096, swiglu=False)


def fp8_mlp_case(name: str, tokens: int, hidden: int, ffn: int, swiglu: bool) -> None:
    from training.fp8 import Fp8Settings, MlpLayout, apply_fp8, casts, reset_after_materialize

    fault = casts.triton_casts_fault(DEV, (tokens, ffn))
    assert not fault, f"the Triton kernels got {fault} wrong"
    torch.manual_seed(0)
    bf16 = Mlp(hidden, ffn, swiglu).to(DEV, BF16)
    for p in bf16.parameters():
        nn.init.normal_(p, std=0.02)
    x = torch.randn(tokens, hidden, device=DEV, dtype=BF16).requires_grad_()
    g = torch.randn(tokens, hidden, device=DEV, dtype=BF16) * 1e-3
    results, outputs = [], {}
    for variant in ("bf16", "fp8, linear by linear", "fp8, fused"):
        mlp = bf16
        if variant != "bf16":  # the same parameters, under FP8 linears: `layers.0` is what apply_fp8 swaps
            holder = nn.Module()
            holder.layers = nn.ModuleList([Mlp(hidden, ffn, swiglu)])
            for part in ("up", "down", "gate") if swiglu else ("up", "down"):
                setattr(holder.layers[0], part, getattr(bf16, part))
            layout = MlpLayout(Mlp, "up", "down", "gate" if swiglu else None)
            apply_fp8(holder, Fp8Settings("native", fuse_mlp=layout if variant.endswith("fused") else None))
            mlp = holder.layers[0]
        torch._dynamo.reset()
        run = torch.compile(mlp)

        def step(run=run):
            x.grad = None
            for p in bf16.parameters():
                p.grad = None
            y = run(x)
            y.backward(g)
            return y

        timed(
            results,
            f"{name} {tokens}x{hidden}x{ffn} {variant}",
            step,
            6 * tokens * hidden * ffn * (2 + swiglu),
        )
        if variant != "bf16":  # from the same amax state: the first step casts with scale 1, then the amax
            reset_after_materialize(mlp)
            for _ in range(2):
                y = step()
            grads = [y.detach(), x.grad.clone(), *(p.grad.clone() for p in bf16.parameters())]
            # gate's input amax (and its next) is up's (unused when fused)
            amax = [float(b) for n, b in sorted(mlp.named_buffers()) if not n.startswith("gate.x_amax")]
            outputs[variant] = grads, amax
    (unfused, amax), (fused, fused_amax) = outputs.values()
    table(f"{name}, compiled, fwd + bwd", results)
    errors = [float((a.float() - b.float()).norm() / b.float().norm()) for a, b in zip(fused, unfused)]
    print(
        "fused vs linear by linear, relative error (y, dx, parameter gradients): "
        + ", ".join(f"{e:.2e}" for e in errors)
    )
    print(f"amax (linear by linear): {amax}\namax (fused):            {fused_amax}")


FP8_PEAK = 1979.0  # dense FP8 TFLOP/s of the H100 / H200 SXM (datasheets)


def fp8_gemm() -> None:
    tokens = 8192
    models = {
        "8b": (LlamaShape(), True),  # (shape, weight gradients: pretraining)
        "70b": (LlamaShape(hidden_size=8192, ffn_hidden_size=28672, num_heads=64, num_kv_heads=8), False),
    }
    for name, (shape, trained) in models.items():
        h, kv, f = shape.hidden_size, shape.num_kv_heads * shape.head_dim, shape.ffn_hidden_size
        linears = {
            "q": (h, h),
            "k": (h, kv),
            "v": (h, kv),
            "o": (h, h),
            "gate": (h, f),
            "up": (h, f),
            "down": (f, h),
        }
        results, block = [], {"promoted": 0.0, "te split": 0.0}
        for linear, (k, n) in linears.items():
            gen = torch.Generator(DEV).manual_seed(0)
            x, w, g = (
                torch.randn(a, b, device=DEV, generator=gen, dtype=BF16)
                for a, b in ((tokens, k), (n, k), (tokens, n))
            )
            x8, w8, g8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn), g.to(E5M2)
            wt8, gt8, xt8 = (t.t().contiguous() for t in (w8, g8, x8))
            one = torch.ones((), device=DEV)
            gemms = {"fwd": (x8, w8), "dgrad": (g8, wt8)} | ({"wgrad": (gt8, xt8)} if trained else {})
            for gemm, (a, b) in gemms.items():
                ms = {}
                for fast in (False, True):
                    label = f"{name} {linear} {gemm} {a.shape[0]}x{a.shape[1]}x{b.shape[0]}"
                    label += ", fast accumulation" if fast else ", promoted"
                    flop = 2 * a.shape[0] * a.shape[1] * b.shape[0]
                    timed(
                        results,
                        label,
                        partial(torch._scaled_mm, a, b.t(), one, one, out_dtype=BF16, use_fast_accum=fast),
                        flop,
                    )
                    ms[fast] = results[-1][1]
                    share = f"{float(results[-1][2]) / FP8_PEAK:.0%}" if ms[fast] == ms[fast] else "-"
                    results[-1] = (*results[-1][:2], f"{results[-1][2]} ({share} of peak)")
                block["promoted"] += ms[False]
                block["te split"] += ms[gemm == "fwd"]
        table(f"FP8 GEMMs of a Llama {name} block at {tokens} tokens (torch._scaled_mm)", results)
        print(
            f"\n{name} block, every GEMM: {block['promoted']:.2f} ms promoted; {block['te split']:.2f} ms "
            "with the forward's fast (FP8_FAST_ACCUM=1)"
        )


def main() -> int:
    parts = {
        "llama-optim": llama_optim,
        "adamw-sweep": adamw_sweep,
        "llama-gemm": llama_gemm,
        "llama-ce": llama_ce,
        "bert-gemm": bert_gemm,
        "fp8-cast": fp8_cast,
        "fp8-linear": fp8_linear,
        "fp8-mlp": fp8_mlp,
        "fp8-gemm": fp8_gemm,
    }
    for part in sys.argv[1:] or list(parts):
        parts[part]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
