"""training.fp8: the Transformer Engine path with a stand-in `transformer_engine` (not installable here), the
native linear and fused MLP against their references, backend and cast choices named."""

import contextlib
import copy
import importlib.machinery
import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from training.bert.model import BertForPackedPretraining, BertShape
from training.fp8 import Fp8Settings, MlpLayout, apply_fp8, casts
from training.fp8.native import Fp8Linear, FusedFp8MLP


class FakeTeLinear(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, params_dtype=None, device=None):
        super().__init__(in_features, out_features, bias=bias, dtype=params_dtype, device=device)


def fake_transformer_engine(monkeypatch) -> list[str]:
    entered = []
    te, pytorch, common, recipe = (
        types.ModuleType(n)
        for n in (
            "transformer_engine",
            "transformer_engine.pytorch",
            "transformer_engine.common",
            "transformer_engine.common.recipe",
        )
    )
    te.__spec__ = importlib.machinery.ModuleSpec("transformer_engine", None)
    pytorch.Linear = FakeTeLinear
    pytorch.fp8_autocast = lambda enabled, fp8_recipe: contextlib.nullcontext(entered.append(fp8_recipe))
    recipe.DelayedScaling = lambda **kw: kw
    recipe.Format = types.SimpleNamespace(HYBRID="hybrid")
    te.pytorch, te.common, common.recipe = pytorch, common, recipe
    for module in (te, pytorch, common, recipe):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    return entered


def test_te_swaps_bert_encoder_linears_keeping_weights_and_biases(monkeypatch):
    entered = fake_transformer_engine(monkeypatch)
    torch.manual_seed(0)
    model = BertForPackedPretraining(
        BertShape(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=128
        )
    )
    for p in model.parameters():  # non-zero biases, as a checkpoint has
        nn.init.normal_(p)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fp8 = apply_fp8(model, Fp8Settings("te"))  # by name: auto picks native where OCP FP8 runs
    assert fp8.backend == "te" and "8 linear layers" in fp8.description
    assert type(model.layers[1].ffn.down) is FakeTeLinear and type(model.mlm_transform) is nn.Linear
    after = model.state_dict()
    assert after.keys() == before.keys() and all(torch.equal(after[k], before[k]) for k in before)
    with fp8.forward_context():
        pass
    assert entered == [{"fp8_format": "hybrid", "amax_history_len": 4, "amax_compute_algo": "most_recent"}]
    # FP8_AMAX_HISTORY and FP8_AMAX_ALGO reach Transformer Engine's recipe (NVIDIA v4.0's LoRA: 32, max)
    bert = BertForPackedPretraining(
        BertShape(
            num_hidden_layers=1, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=128
        )
    )
    fp8 = apply_fp8(bert, Fp8Settings("te", amax_history=32, amax_algo="max"))
    with fp8.forward_context():
        pass
    assert entered[-1]["amax_history_len"] == 32 and entered[-1]["amax_compute_algo"] == "max"
    assert "amax history 32 max" in fp8.description


def _steps(lin: nn.Module, scales: list[float]) -> list[tuple[float, float, torch.Tensor]]:
    """Train-mode steps of `lin` on inputs and incoming gradients whose amaxes are `scales` (step k: k's);
    after each, (its x_amax, its g_amax, its output)."""
    out = []
    for k, scale in enumerate(scales):
        x = torch.randn(8, 64, generator=torch.Generator().manual_seed(k))
        x = (x / x.abs().max() * scale).requires_grad_()
        g = torch.randn(8, 32, generator=torch.Generator().manual_seed(100 + k))
        with torch.autocast("cpu", torch.bfloat16):
            y = lin(x)
        y.backward((g / g.abs().max() * scale / 1e3).to(y.dtype))
        out.append((float(lin.x_amax), float(lin.g_amax), y.detach()))
    return out


def test_amax_history_max_scales_by_the_largest_of_the_last_steps():
    """FP8_AMAX_ALGO=max, FP8_AMAX_HISTORY=3 (Transformer Engine's delayed scaling, in the native linear):
    after each step the amax the next cast scales by is the largest of the last 3 steps' amaxes, of the input
    and of the incoming gradient alike; one large step keeps the scale down for 3 steps, then it recovers."""
    torch.manual_seed(0)
    base = nn.Linear(64, 32)
    lin = Fp8Linear.from_linear(base, history=3)
    scales = [8.0, 1.0, 1.0, 1.0, 2.0, 1.0]
    got = _steps(lin, scales)
    window = [max(scales[max(0, k - 2) : k + 1]) for k in range(len(scales))]
    assert [x for x, _, _ in got] == pytest.approx(window, rel=1e-2)
    assert [g for _, g, _ in got] == pytest.approx([w / 1e3 for w in window], rel=1e-2)
    lin.reset_amax()
    assert float(lin.x_amax_history.abs().sum() + lin.g_amax_history.abs().sum()) == 0.0


def test_most_recent_amax_is_the_native_default_bit_for_bit():
    """FP8_AMAX_ALGO=most_recent (the default, AMD's recipe: history 4) scales by the last step's amax, as the
    native linear always did: no history buffers, the same outputs and amaxes bit for bit as a linear made
    without the settings, whatever FP8_AMAX_HISTORY; max over a history of 1 is the same."""
    torch.manual_seed(0)
    base = nn.Linear(64, 32)
    reference = _steps(Fp8Linear.from_linear(base), [8.0, 1.0, 2.0])
    for settings in (
        Fp8Settings("native"),
        Fp8Settings("native", amax_history=32),
        Fp8Settings("native", amax_history=1, amax_algo="max"),
    ):
        model = nn.Module()
        model.layers = nn.Sequential(nn.Linear(64, 32))
        model.layers[0].load_state_dict(base.state_dict())
        fp8 = apply_fp8(model, settings)
        lin = model.layers[0]
        assert lin.x_amax_history is None and "amax the most recent" in fp8.description
        got = _steps(lin, [8.0, 1.0, 2.0])
        assert all(a[:2] == b[:2] and torch.equal(a[2], b[2]) for a, b in zip(got, reference))
    fp8 = apply_fp8(nn.Module(), Fp8Settings("native", amax_history=4, amax_algo="max"))
    assert "amax the max of the last 4 steps" in fp8.description


def test_native_fp8_linear_matches_bf16_within_fp8_error_and_tracks_amax():
    """Our delayed-scaling FP8 linear, eager and compiled: same parameters (names and objects) as the
    nn.Linear it replaces, output and gradients within FP8's error of the bf16 linear's, and the amax
    buffers hold the last step's input and gradient maxima."""
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(64, 32))
    model = nn.Module()  # apply_fp8 swaps the linears of `layers.*` only
    model.layers = nn.Sequential(nn.Linear(64, 32))
    model.layers[0].load_state_dict(ref[0].state_dict())
    weight = model.layers[0].weight
    fp8 = apply_fp8(model, Fp8Settings("native"))
    lin = model.layers[0]
    assert fp8.backend == "native" and "1 linear layers" in fp8.description
    assert type(lin).__name__ == "Fp8Linear" and lin.weight is weight
    for run in (lin, torch.compile(lin)):
        for _ in range(3):  # the first step casts with scale 1; later ones with the previous amax
            x = (torch.randn(4, 16, 64) * 3).requires_grad_()
            xr = x.detach().clone().requires_grad_()
            g = torch.randn(4, 16, 32) * 1e-3
            lin.zero_grad(), ref.zero_grad()
            with torch.autocast("cpu", torch.bfloat16):
                y, yr = run(x), ref(xr)
            y.backward(g.to(y.dtype)), yr.backward(g.to(yr.dtype))
        for got, want, tol in (
            (y, yr, 0.06),
            (x.grad, xr.grad, 0.1),
            (lin.weight.grad, ref[0].weight.grad, 0.1),
        ):
            assert float((got.detach().float() - want.float()).norm() / want.float().norm()) < tol
        torch.testing.assert_close(lin.bias.grad, ref[0].bias.grad, rtol=1e-2, atol=1e-4)
        torch.testing.assert_close(lin.x_amax, x.detach().abs().amax())
        torch.testing.assert_close(lin.g_amax, g.to(torch.bfloat16).abs().amax().float())


@pytest.mark.parametrize("kind, history", [("swiglu", 0), ("gelu", 0), ("swiglu", 2)])
def test_fused_mlp_gives_the_bits_of_its_fp8_linears_one_by_one(kind, history):
    """`FusedFp8MLP` (x cast once, the activation and its gradients written only in FP8; on CPU through
    PyTorch's eager ops) against the same `Fp8Linear`s run one after another, Llama's SwiGLU (no biases) and
    BERT's GELU FFN (biases, float32 input and weights under bf16 autocast), over 3 steps from the same amax
    state: the same output, input and parameter gradients and amax buffers, bit for bit; with an amax history
    (FP8_AMAX_ALGO=max) too."""
    torch.manual_seed(0)
    bias, names = kind == "gelu", ("up", "down", "gate") if kind == "swiglu" else ("up", "down")
    shapes = {"up": (64, 96), "gate": (64, 96), "down": (96, 64)}
    base = {n: nn.Linear(*shapes[n], bias=bias) for n in names}
    runs = []
    for fused in (False, True):
        lin = {n: Fp8Linear.from_linear(m, history=history) for n, m in base.items()}
        mlp = FusedFp8MLP("up", "down", "gate" if kind == "swiglu" else None, lin)
        results = []
        for step in range(3):
            x = (torch.randn(4, 8, 64, generator=torch.Generator().manual_seed(step)) * 3).requires_grad_()
            for m in base.values():
                m.zero_grad()
            with torch.autocast("cpu", torch.bfloat16):
                if fused:
                    y = mlp(x)
                elif kind == "swiglu":
                    y = lin["down"](F.silu(lin["gate"](x)) * lin["up"](x))
                else:
                    y = lin["down"](F.gelu(lin["up"](x)))
            y.backward(
                torch.randn(y.shape, generator=torch.Generator().manual_seed(9 + step)).to(y.dtype) / 1e3
            )
            results.append(
                [y.detach(), x.grad] + [p.grad.clone() for m in base.values() for p in m.parameters()]
            )
        amax = [b.clone() for n, m in lin.items() for b in (m.x_amax, m.g_amax)]
        runs.append((results, amax[:-2] + amax[-1:] if kind == "swiglu" else amax))  # gate's x_amax: unused
    (unfused, amax), (fused, fused_amax) = runs
    for got, want in zip(fused + [fused_amax], unfused + [amax]):
        assert all(torch.equal(g, w) for g, w in zip(got, want))


def _saved_bytes(fn) -> tuple[object, int]:
    """fn()'s result and the bytes of the tensors autograd saved for its backward."""
    sizes = []

    def pack(t):
        sizes.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return out, sum(sizes)


def test_swiglu_inputs_kept_in_fp8_halve_their_memory_and_train_within_fp8_error():
    """`FusedFp8MLP.saves_fp8` (FP8_MLP_ACTIVATIONS): the SwiGLU's inputs, gate and up (32 tokens x 96), are
    kept for the backward as e4m3 codes and a scale each, 2 x 32 x 96 bytes less than bf16 for 8 bytes of
    scales; the forward is the same, bit for bit; the gradients, from e4m3-rounded inputs, within FP8's error
    of those from bf16 ones, and not equal to them (the codes are what the backward read)."""
    torch.manual_seed(0)
    base = {
        "up": nn.Linear(64, 96, bias=False),
        "gate": nn.Linear(64, 96, bias=False),
        "down": nn.Linear(96, 64, bias=False),
    }
    runs = []
    for packed in (False, True):
        mlp = FusedFp8MLP("up", "down", "gate", {n: Fp8Linear.from_linear(m) for n, m in base.items()})
        mlp.saves_fp8 = packed
        for m in base.values():
            m.zero_grad()
        x = (torch.randn(4, 8, 64, generator=torch.Generator().manual_seed(1)) * 3).requires_grad_()
        with torch.autocast("cpu", torch.bfloat16):
            y, saved = _saved_bytes(lambda: mlp(x))  # noqa: B023
        y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(2)).to(y.dtype))
        runs.append((y.detach(), saved, [x.grad, *(m.weight.grad for m in base.values())]))
    (y, saved, grads), (y8, saved8, grads8) = runs
    assert torch.equal(y, y8) and saved - saved8 == 2 * 32 * 96 - 8
    assert not torch.equal(grads[0], grads8[0])
    for want, got in zip(grads, grads8):
        assert float((got.float() - want.float()).norm() / want.float().norm()) < 0.1


def test_native_fp8_refuses_mi300_class_gpus_by_name(monkeypatch):
    """MI300X / MI325X (gfx942) multiply only the FNUZ FP8 formats; the native linear uses the OCP ones."""
    import training.fp8.apply as fp8

    monkeypatch.setattr(fp8, "_rocm_arch", lambda: "gfx942:sramecc+:xnack-")
    with pytest.raises(ValueError, match="FP8_BACKEND=native.*gfx942.*MI300X"):
        fp8.choose_backend("native")
    monkeypatch.setattr(fp8, "_rocm_arch", lambda: "gfx950")
    assert fp8.choose_backend("native") == "native"


def test_frozen_weights_write_no_transposed_copies_and_compute_the_same(monkeypatch):
    """LoRA's frozen base: only the weight gradients' GEMMs read the transposed copies of x, of the MLP's
    activation and of the gradients, so none is written; the output and the input gradient are those of the
    same weights trained, bit for bit (a linear, then the fused SwiGLU MLP)."""
    from training.fp8 import native

    asked = []  # (the weights' casts pass no `transpose`: their transposed copies feed the input gradient)

    def spying(name, real):
        def spy(*args, **kwargs):
            if "transpose" in kwargs:
                asked.append((name, kwargs["transpose"]))
            return real(*args, **kwargs)

        return spy

    for name in ("cast_transpose", "act_cast_transpose", "act_backward_cast_transpose"):
        monkeypatch.setattr(native, name, spying(name, getattr(native, name)))
    torch.manual_seed(0)
    shapes = {"up": (64, 96), "gate": (64, 96), "down": (96, 64)}
    base = {n: nn.Linear(*shape, bias=False) for n, shape in shapes.items()}
    proj = nn.Linear(64, 64, bias=False)
    runs = []
    for frozen in (False, True):
        for p in [proj.weight, *(m.weight for m in base.values())]:
            p.requires_grad_(not frozen)
        lin = {n: Fp8Linear.from_linear(m) for n, m in base.items()}
        mlp, first = FusedFp8MLP("up", "down", "gate", lin), Fp8Linear.from_linear(proj)
        x = (torch.randn(4, 8, 64, generator=torch.Generator().manual_seed(1)) * 3).requires_grad_()
        asked.clear()
        with torch.autocast("cpu", torch.bfloat16):
            y = mlp(first(x))
        y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(2)).to(y.dtype) / 1e3)
        runs.append((y.detach(), x.grad))
        assert len(asked) == 6 and all(transpose is not frozen for _, transpose in asked), asked
    (y, dx), (y2, dx2) = runs
    assert torch.equal(y, y2) and torch.equal(dx, dx2)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the Triton casts run on GPUs")
@pytest.mark.parametrize("shape", [(2048, 1024), (1000, 1000)])
def test_triton_kernels_match_pytorch(shape):
    """On GPUs: the cast kernel's FP8 copy, transposed copy and amax equal PyTorch's cast, for bf16 and
    float32 inputs (float32: the weights under autocast; Triton 3.6 got their transposed copies wrong until
    the kernel re-read them); the SwiGLU kernels' within one FP8 code of PyTorch's eager ops."""
    assert casts.triton_casts_fault(torch.device("cuda"), shape) == ""


def fake_kernels(fault: str = "") -> types.SimpleNamespace:
    """A stand-in for `training.fp8.kernels` (no Triton here): PyTorch's casts, SwiGLU and GELU, with a
    `fault` on demand (`transpose`: float32 transposes flipped; `swiglu`: silu left out of SwiGLU; `alone`:
    the copy written without its transposed one flipped; `packed`: e4m3 codes read without their scale)."""

    def cast_transpose(t, scale, amax, dtype, update_amax, transpose=True):
        amax.copy_(t.float().abs().max())
        y = casts.cast(t, scale, dtype)
        yt = y.t().contiguous() if transpose else y.new_empty(0)
        if fault == "transpose" and t.dtype == torch.float32:
            yt = yt.flip(0)
        if fault == "alone" and not transpose:
            y = y.flip(0)
        return y, yt

    def swiglu_cast_transpose(g, u, scale, amax, update_amax, transpose=True):
        h = (g if fault == "swiglu" else F.silu(g)) * u
        return cast_transpose(h, scale, amax, torch.float8_e4m3fn, update_amax, transpose)

    def swiglu_backward_cast_transpose(
        dh, g, u, g_scale, u_scale, g_amax, u_amax, transpose=True, g_inv=None, u_inv=None
    ):
        if g_inv is not None:
            ones = torch.ones(())
            g, u = (
                casts.unpack_e4m3(t, ones if fault == "packed" else i) for t, i in ((g, g_inv), (u, u_inv))
            )
        dg, du = torch.ops.aten.silu_backward(dh * u, g), dh * F.silu(g)
        e5m2 = torch.float8_e5m2
        return (
            *cast_transpose(dg, g_scale, g_amax, e5m2, True, transpose),
            *cast_transpose(du, u_scale, u_amax, e5m2, True, transpose),
        )

    def gelu_cast_transpose(a, scale, amax, update_amax):
        return cast_transpose(F.gelu(a), scale, amax, torch.float8_e4m3fn, update_amax)

    def gelu_backward_cast_transpose(dh, a, scale, amax):
        da = torch.ops.aten.gelu_backward(dh, a)
        return (*cast_transpose(da, scale, amax, torch.float8_e5m2, True), da.sum(0, dtype=torch.float32))

    return types.SimpleNamespace(
        cast_transpose=cast_transpose,
        swiglu_cast_transpose=swiglu_cast_transpose,
        swiglu_backward_cast_transpose=swiglu_backward_cast_transpose,
        gelu_cast_transpose=gelu_cast_transpose,
        gelu_backward_cast_transpose=gelu_backward_cast_transpose,
    )


def test_a_faulty_triton_cast_is_named_and_the_native_linear_falls_back_to_pytorch_casts(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(casts, "kernels", fake_kernels())
    assert casts.triton_casts_fault(cpu) == ""
    monkeypatch.setattr(casts, "kernels", fake_kernels("swiglu"))
    assert casts.triton_casts_fault(cpu) == "the FP8 copy of SwiGLU's output"
    monkeypatch.setattr(casts, "kernels", fake_kernels("transpose"))
    fault = casts.triton_casts_fault(cpu)
    assert fault == "the transposed copy of 512x1024 torch.float32 cast to torch.float8_e4m3fn"
    monkeypatch.setattr(casts, "kernels", fake_kernels("alone"))  # (frozen weights: no transposed copies)
    assert (
        casts.triton_casts_fault(cpu)
        == "the lone copy of 512x1024 torch.bfloat16 cast to torch.float8_e4m3fn"
    )
    monkeypatch.setattr(casts, "kernels", fake_kernels("packed"))  # (FP8_MLP_ACTIVATIONS's backward)
    assert casts.triton_casts_fault(cpu) == "SwiGLU's backward from e4m3 codes"
    # a kernel that raises (fails to build, say) is a fault too: PyTorch's casts, the error named
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    broken = types.SimpleNamespace(cast_transpose=lambda *a: (_ for _ in ()).throw(RuntimeError("no sm_90")))
    monkeypatch.setattr(casts, "kernels", broken)
    monkeypatch.setattr(casts, "triton_casts_fault", lambda device: broken.cast_transpose())
    assert casts.choose_casts("auto") == (
        False,
        "PyTorch (the Triton casts failed on this GPU: RuntimeError: no sm_90)",
    )
    # on a GPU (pretended): the check runs with the native linear's setup, and a fault means PyTorch's casts
    monkeypatch.setattr(casts, "triton_casts_fault", lambda device: fault)
    model = nn.Module()
    model.layers = nn.Sequential(nn.Linear(64, 32))
    description = apply_fp8(model, Fp8Settings("native")).description
    assert f"casts in PyTorch (the Triton kernel got {fault} wrong on this GPU)" in description
    assert model.layers[0].triton is False
    # FP8_CASTS=pytorch: no check, PyTorch's casts, said so
    monkeypatch.setattr(casts, "triton_casts_fault", lambda device: pytest.fail("checked"))
    model.layers = nn.Sequential(nn.Linear(64, 32))
    assert (
        "casts in PyTorch (FP8_CASTS=pytorch)"
        in apply_fp8(model, Fp8Settings("native", casts="pytorch")).description
    )


def test_native_fp8_fuses_the_mlps_the_benchmark_names_keeping_parameter_names():
    """`MlpLayout`: the named MLP modules become `FusedFp8MLP`s with the same children (parameter names and
    objects unchanged); other modules and the heads keep their linears."""
    from training.bert.model import FeedForward

    model = BertForPackedPretraining(
        BertShape(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, vocab_size=128
        )
    )
    before = dict(model.named_parameters())
    fp8 = apply_fp8(model, Fp8Settings("native", fuse_mlp=MlpLayout(FeedForward, up="up", down="down")))
    assert "8 linear layers" in fp8.description and "2 MLPs fused" in fp8.description
    assert all(type(layer.ffn) is FusedFp8MLP for layer in model.layers)
    assert type(model.layers[0].qkv) is Fp8Linear and type(model.mlm_transform) is nn.Linear
    after = dict(model.named_parameters())
    assert after.keys() == before.keys() and all(after[k] is before[k] for k in before)


def _tiny_fp8_llama(fp8: bool, stored: bool = False):
    from training.llama import parallel
    from training.llama.build import FP8_MLP, RunSpec, build_model
    from training.llama.model import LlamaShape

    shape = LlamaShape(
        num_layers=4,
        hidden_size=128,
        ffn_hidden_size=256,
        num_heads=4,
        num_kv_heads=2,
        vocab_size=1024,
        max_seq_length=64,
        rope_scaling=None,
    )
    settings = Fp8Settings("native", fuse_mlp=FP8_MLP)
    torch.manual_seed(0)
    features = parallel.Features(fp8=settings if fp8 else None)
    model, _ = build_model(RunSpec(shape, features, attention="sdpa"), torch.device("cpu"), None)
    return model


def _gradients(model, calibrated: bool) -> dict[str, torch.Tensor]:
    from training.fp8 import calibrate
    from training.llama.model import cross_entropy

    tokens = torch.randint(0, 1024, (4, 65), generator=torch.Generator().manual_seed(1))

    def forward_backward():
        with torch.autocast("cpu", torch.bfloat16):
            cross_entropy(model(tokens[:, :-1]), tokens[:, 1:]).backward()

    if calibrated:
        assert calibrate(model, forward_backward)
        assert all(p.grad is None for p in model.parameters())  # the calibration's gradients are dropped
        assert not calibrate(model, forward_backward)  # once
    forward_backward()
    return {n: p.grad.float() for n, p in model.named_parameters() if "layers" in n and "proj" in n}


def test_calibration_keeps_the_first_steps_gradients():
    """Delayed scaling's first step casts with scale 1, so small e5m2 gradients underflow
    and every block below the last gets a wrong gradient (here up to 97% off the bf16 one); measured scales
    (`training.fp8.calibrate`) leave FP8's own rounding (about 12% here)."""
    reference = _gradients(_tiny_fp8_llama(fp8=False), calibrated=False)

    def worst(grads):
        return max(float((grads[n] - reference[n]).norm() / reference[n].norm()) for n in reference)

    assert worst(_gradients(_tiny_fp8_llama(fp8=True), calibrated=False)) > 0.5
    assert worst(_gradients(_tiny_fp8_llama(fp8=True), calibrated=True)) < 0.2


def test_calibration_records_the_amaxes_and_restores_the_random_state():
    from training.fp8 import calibrate, needs_calibration

    model = _tiny_fp8_llama(fp8=True)
    linear = model.layers[0].self_attn.q_proj
    seen = {}

    def record(module, args, out):
        seen.setdefault("x", args[0].detach().abs().amax())

    linear.register_forward_hook(record)
    tokens = torch.randint(0, 1024, (2, 17))
    state = torch.get_rng_state()
    assert needs_calibration(model)

    def forward_backward():
        torch.rand(3)  # a dropout's draw: undone after the pass
        with torch.autocast("cpu", torch.bfloat16):
            model(tokens).float().pow(2).mean().backward()

    calibrate(model, forward_backward)
    assert torch.equal(torch.get_rng_state(), state)
    assert not needs_calibration(model)
    assert float(linear.x_amax) == float(linear.x_amax_next) == pytest.approx(float(seen["x"]), rel=1e-6)
    assert 0 < float(linear.g_amax) < casts.E5M2_MAX


def test_calibration_recomputes_every_block():
    """The calibration pass runs eagerly in bf16, where a kept block saves more than twice what its compiled
    FP8 forward does (3.25 GiB against 1.41 for a 70B LoRA block on an H200: this one pass set the run's
    peak). So it recomputes every block: what it saves for the backward is about the blocks' inputs, far
    less than the same pass without recompute, and the blocks are kept again after it."""
    from training.fp8 import calibrate
    from training.llama.checkpointing import recompute_every_block
    from training.llama.model import cross_entropy

    tokens = torch.randint(0, 1024, (2, 65), generator=torch.Generator().manual_seed(1))

    def saved_bytes(model, pass_through_calibrate: bool) -> int:
        total = [0]

        def pack(t):
            total[0] += t.numel() * t.element_size()
            return t

        def forward_backward():
            with (
                torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
                torch.autocast("cpu", torch.bfloat16),
            ):
                cross_entropy(model(tokens[:, :-1]), tokens[:, 1:]).backward()

        if pass_through_calibrate:
            assert calibrate(model, forward_backward, recompute_every_block(model))
        else:
            forward_backward()
        return total[0]

    model = _tiny_fp8_llama(fp8=True)
    assert not any(block.recompute for block in model.layers)
    kept = saved_bytes(_tiny_fp8_llama(fp8=False), pass_through_calibrate=False)
    calibrating = saved_bytes(model, pass_through_calibrate=True)
    assert calibrating < kept / 2, (calibrating, kept)
    assert not any(block.recompute or block.random for block in model.layers)


def test_local_data_unwraps_torchaos_fp8_all_gather_weight():
    """torchao's FP8 all-gather wraps each weight in `WeightWithDynamicFloat8CastTensor`, a wrapper subclass
    with no storage of its own (`data_ptr()` 0): our Triton AdamW, handed it, read address 0 (the illegal
    memory access of `ours-torchao` on 4 x H200). `local_data` gives the tensor inside, and an in-place
    update through it is the weight's."""
    pytest.importorskip("torchao")
    from torchao.float8.float8_training_tensor import LinearMMConfig
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

    from training.fp8.gather import local_data

    inner = torch.randn(8, 4)
    weight = nn.Parameter(WeightWithDynamicFloat8CastTensor(inner, LinearMMConfig(), torch.float8_e4m3fn))
    assert weight.data_ptr() == 0  # what a kernel would have read
    assert local_data(weight) is inner and local_data(weight).data_ptr() != 0
    local_data(weight).add_(1.0)
    assert torch.equal(weight._tensor, inner)
    plain = torch.randn(3)
    assert local_data(plain) is plain


def test_fast_accumulation_is_for_the_forward_gemms_only(monkeypatch):
    """FP8_FAST_ACCUM=1 (`Fp8Settings.fast_accum`): the forward GEMMs of the native linear and the fused MLP
    ask cuBLASLt for fast accumulation, the input and weight gradients' GEMMs do not (Transformer Engine's
    fprop / dgrad / wgrad split); off, none does. (The CPU's FP8 GEMM takes the flag, computing the
    same.)"""
    calls = []
    scaled_mm = torch._scaled_mm

    def recording(*args, use_fast_accum=False, **kwargs):
        calls.append(use_fast_accum)
        return scaled_mm(*args, use_fast_accum=use_fast_accum, **kwargs)

    monkeypatch.setattr(torch, "_scaled_mm", recording)
    torch.manual_seed(0)
    for fast in (False, True):
        base = {
            "up": nn.Linear(64, 96, bias=False),
            "gate": nn.Linear(64, 96, bias=False),
            "down": nn.Linear(96, 64, bias=False),
        }
        lin = {n: Fp8Linear.from_linear(m, fast_accum=fast) for n, m in base.items()}
        mlp, single = (
            FusedFp8MLP("up", "down", "gate", lin),
            Fp8Linear.from_linear(nn.Linear(64, 32), fast_accum=fast),
        )
        x = torch.randn(16, 64, requires_grad=True)
        with torch.autocast("cpu", torch.bfloat16):
            calls.clear()
            y = mlp(x) + single(x).sum()
            forward = list(calls)
            calls.clear()
        y.float().sum().backward()
        assert forward == [fast] * 4 and calls == [False] * 8, (fast, forward, calls)


def test_the_fp8_gemms_compute_the_same_under_cpu_autocast():
    """The CPU emulates `torch._scaled_mm` by a float32 matmul of the scaled operands, which bf16 autocast
    would run in bf16: the native linear and fused MLP compute the same bits with autocast (one process's
    step) as without (FSDP2's bf16 parameters), forward and backward."""
    torch.manual_seed(0)
    base = {
        "up": nn.Linear(64, 96, bias=False),
        "gate": nn.Linear(64, 96, bias=False),
        "down": nn.Linear(96, 64, bias=False),
    }
    single, x = nn.Linear(64, 32), torch.randn(16, 64)
    results = []
    for on in (False, True):
        lin = {n: Fp8Linear.from_linear(copy.deepcopy(m)) for n, m in base.items()}
        mlp, linear = FusedFp8MLP("up", "down", "gate", lin), Fp8Linear.from_linear(copy.deepcopy(single))
        xi = x.clone().requires_grad_()
        with torch.autocast("cpu", torch.bfloat16, enabled=on):
            y = mlp(xi).float().sum() + linear(xi).float().square().sum()
            y.backward()
        grads = [xi.grad, *(p.grad for p in [*mlp.parameters(), *linear.parameters()])]
        results.append([y.detach(), *grads])
    for off, on in zip(*results):
        assert torch.equal(off, on)
