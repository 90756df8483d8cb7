"""training.fp4: the 4-bit formats bit for bit against hand-computed blocks and torchao, the emulated GEMM,
the linear's healing, and a short training run against bf16."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, unpack_uint4
from torchao.prototype.mx_formats.mx_tensor import MXTensor
from torchao.prototype.mx_formats.nvfp4_tensor import nvfp4_quantize, per_tensor_amax_to_scale

from training.fp4 import Fp4Settings, apply_fp4, formats, gemm
from training.fp4.linear import Fp4Linear, Fp4Recipe
from training.fp8 import Fp8Settings

CPU = torch.device("cpu")


def test_e2m1_rounds_to_nearest_even_and_saturates():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0, -0.25, -2.9, 0.3])
    # ties: 0.25 between 0 and 0.5 goes to 0 (even), 5 between 4 and 6 to 4; beyond 6: 6
    want = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, -0.0, -3.0, 0.5]
    assert formats.round_e2m1(x).tolist() == want


def block(*values: float, size: int = 32) -> torch.Tensor:
    return torch.tensor([list(values) + [0.0] * (size - len(values))])


def test_mxfp4_scale_is_the_ocp_exponent_and_elements_saturate():
    # amax 7: 2^(floor(log2 7) - 2) = 1, so 7 saturates to 6
    assert formats.mxfp4_scale_exponent(block(7.0, 1.0)).item() == 0
    assert formats.mxfp4(block(7.0, 1.0))[0, :2].tolist() == [6.0, 1.0]
    # amax 1: scale 2^-2; 0.3 / 0.25 = 1.2 rounds to 1, 0.1 / 0.25 = 0.4 to 0.5
    assert formats.mxfp4_scale_exponent(block(1.0, 0.3, 0.1)).item() == -2
    assert formats.mxfp4(block(1.0, 0.3, 0.1))[0, :3].tolist() == [1.0, 0.25, 0.125]
    # amax 0.75: floor(log2 0.75) = -1, scale 2^-3, 0.75 / 0.125 = 6 exactly; -0.2 / 0.125 = -1.6 to -1.5
    assert formats.mxfp4(block(0.75, -0.2))[0, :2].tolist() == [0.75, -0.1875]
    # a zero block: the smallest exponent, every element zero
    assert formats.mxfp4_scale_exponent(block()).item() == -127
    assert formats.mxfp4(block()).abs().sum().item() == 0


def test_mxfp4_is_torchaos_mx_tensor_bit_for_bit():
    torch.manual_seed(0)
    x = torch.randn(64, 256) * torch.exp(torch.randn(64, 1) * 3)
    theirs = MXTensor.to_mx(x, torch.float4_e2m1fn_x2, 32).dequantize(torch.float32)
    assert torch.equal(formats.mxfp4(x), theirs)


def test_nvfp4_two_level_scale_by_hand():
    # tensor amax 2688 = 448 x 6: S = 1. Block 1: amax 12, scale e4m3(12 / 6) = 2, 5 / 2 = 2.5 ties to 2.
    # Block 2: amax 1, 1 / 6 = 0.1667 rounds in e4m3 (step 2^-6 in [0.125, 0.25)) to 0.171875; 1 / 0.171875
    # = 5.82 rounds to 6, 0.2 / 0.171875 = 1.16 to 1.
    x = torch.zeros(1, 48)
    x[0, 0], x[0, 1], x[0, 16], x[0, 17], x[0, 32] = 12.0, 5.0, 1.0, 0.2, 2688.0
    values, s_dec = formats.nvfp4(x)
    assert s_dec.item() == 1.0
    assert values[0, :2].tolist() == [12.0, 4.0]
    assert values[0, 16:18].tolist() == [6 * 0.171875, 0.171875]
    # a zero block stays zero (its scale 0)
    y = torch.zeros(1, 32)
    y[0, 0] = 3.0
    assert formats.nvfp4(y)[0][0, 16:].abs().sum().item() == 0


def test_nvfp4_is_torchaos_where_its_block_scales_are_normal_and_parts_below():
    torch.manual_seed(0)
    x = torch.randn(128, 256)
    elements, decode, _ = formats.nvfp4_parts(x)
    scales, packed = nvfp4_quantize(x, 16, per_tensor_amax_to_scale(x.abs().amax()))
    theirs = f4_unpacked_to_f32(unpack_uint4(packed)).reshape(elements.shape)
    normal = scales.float() > 2**-6  # torchao clamps a block scale at E4M3's smallest normal
    assert normal.float().mean() > 0.9
    assert torch.equal(decode.squeeze(-1)[normal], scales.float()[normal])
    assert torch.equal(elements[normal], theirs[normal])
    # a small block beside a large one: TE's scale is subnormal (0.01 / 6 x 1 = 0.00167 -> 2^-9)
    y = torch.zeros(1, 32)
    y[0, 0], y[0, 16] = 2688.0, 0.01
    _, decode, _ = formats.nvfp4_parts(y)
    their_scales, _ = nvfp4_quantize(y, 16, per_tensor_amax_to_scale(y.abs().amax()))
    assert decode[0, 1, 0].item() == 2**-9 and their_scales[0, 1].float().item() == 2**-6


def test_nvfp4_2d_tiles_quantize_a_weight_and_its_transpose_alike():
    torch.manual_seed(1)
    w = torch.randn(48, 64)
    rows, _ = formats.nvfp4(w, two_d=True)
    cols, _ = formats.nvfp4(w.t(), two_d=True)
    assert torch.equal(rows.t(), cols)
    assert not torch.equal(formats.nvfp4(w)[0].t(), formats.nvfp4(w.t())[0])  # 1-D blocks differ


def test_stochastic_rounding_stays_on_the_neighbours_and_is_unbiased():
    g = torch.Generator().manual_seed(0)
    n = 40_000
    out = formats.round_e2m1_stochastic(torch.full((n,), 0.75), g)
    assert set(out.unique().tolist()) == {0.5, 1.0}
    # a Bernoulli(1/2) choice between 0.5 and 1: the mean's standard deviation is 0.25 / sqrt(n); 5 of them
    assert abs(out.mean().item() - 0.75) < 5 * 0.25 / n**0.5
    assert formats.round_e2m1_stochastic(torch.tensor([9.0, -6.0]), g).tolist() == [6.0, -6.0]


def test_hadamard_is_orthonormal_so_rotated_operands_keep_the_product():
    for signs in (None, formats.RHT_SIGNS):
        h = formats.hadamard(signs)
        assert torch.equal(h @ h.t(), torch.eye(16))  # entries +-1/4: the products and sums are exact


def test_the_emulated_gemm_is_exact_on_values_the_formats_hold():
    """Operands already on the grids (E2M1 elements times a power of two a block) quantize to themselves;
    their products have at most 4 significant bits and the sums of 64 stay exact in float32, so the
    emulated GEMM equals the float64 product exactly."""
    g = torch.Generator().manual_seed(2)
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    a = grid[torch.randint(0, 8, (8, 64), generator=g)] * torch.where(
        torch.rand(8, 64, generator=g) < 0.5, -1, 1
    )
    b = grid[torch.randint(0, 8, (16, 64), generator=g)]
    a[:, ::16], b[:, ::16] = 6.0, 6.0  # each block's amax 6: scale 1 (MX); x 448: S 1, block scales 448 (NV)
    exact = a.double() @ b.double().t()
    assert torch.equal(gemm.mxfp4_gemm(a, b, False, gemm.EMULATED).double(), exact)
    assert torch.equal(gemm.nvfp4_gemm(a * 448, b * 448, gemm.EMULATED, {}, {}).double(), exact * 448**2)


class Blocks(nn.Module):
    """Two `layers.N` linears and a head, the names the FP4 swap takes (the head stays in bf16)."""

    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, 64), nn.Linear(64, 64)])
        self.head = nn.Linear(64, 8)

    def forward(self, x):
        return self.head(torch.relu(self.layers[1](torch.relu(self.layers[0](x)))))


def train(recipe: Fp4Recipe | None, steps: int, healing_iter: int | None = None) -> list[float]:
    torch.manual_seed(0)
    model = Blocks()
    fp4 = None
    if recipe is not None:
        fp4 = apply_fp4(model, Fp4Settings(recipe, healing_iter), Fp8Settings(backend="native"), CPU)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(1)
    data = torch.randn(64, 64, generator=g)
    target = torch.randint(0, 8, (64,), generator=g)
    losses = []
    for index in range(steps):
        if fp4 is not None and fp4.heals_before(index):
            fp4.heal()
            from training.fp8 import calibrate

            with torch.autocast("cpu", torch.bfloat16):
                calibrate(model, lambda: nn.functional.cross_entropy(model(data).float(), target).backward())
        with torch.autocast("cpu", torch.bfloat16):
            loss = nn.functional.cross_entropy(model(data).float(), target)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("recipe", [Fp4Recipe("mxfp4", mxfp4_hadamard=True), Fp4Recipe("nvfp4")])
def test_fp4_with_healing_trains_like_bf16(recipe):
    """12 steps, healed to FP8 after 6. The tolerance: a 4-bit element errs by up to a sixth of its block's
    largest value (E2M1's widest step, 2, over its maximum 6, halved), so a step's gradient and the loss
    part from bf16's by percents, not by the learning they do: both must lose over a third of the initial
    loss's distance to the end of the bf16 run, and end within 10% of bf16's loss."""
    ref = train(None, 12)
    fp4 = train(recipe, 12, healing_iter=6)
    assert fp4[0] == pytest.approx(ref[0], rel=0.1)
    assert fp4[-1] < fp4[0] - (ref[0] - ref[-1]) / 3
    assert fp4[-1] == pytest.approx(ref[-1], rel=0.1)


def test_healing_switches_to_fp8_and_warmup_runs_in_fp8():
    model = Blocks()
    settings = Fp4Settings(Fp4Recipe("nvfp4"), healing_iter=2, warmup_in_fp8=True)
    fp4 = apply_fp4(model, settings, Fp8Settings(backend="native"), CPU)
    linears = [m for m in model.modules() if isinstance(m, Fp4Linear)]
    assert len(linears) == 2 and fp4.linear_precision == "nvfp4"
    assert "for numerics, not speed" in fp4.description
    with fp4.fp8_for_warmup():
        assert not any(m.in_fp4 for m in linears)
    assert all(m.in_fp4 and m.calibrated for m in linears)
    assert [fp4.heals_before(i) for i in range(4)] == [False, False, True, True]
    fp4.heal()
    assert not fp4.heals_before(3) and not any(m.in_fp4 or m.calibrated for m in linears)
    never = apply_fp4(Blocks(), Fp4Settings(healing_iter=0), Fp8Settings(backend="native"), CPU)
    assert never.linear_precision == "fp8"


def test_the_llama_settings_name_the_vendors_variables():
    from training.llama2_70b_lora.config import LoraConfig

    base = {"DATADIR": "/data", "MINIBS": "1", "LR": "4e-4", "INIT_CHECKPOINT": "none"}
    amd = {"FP4": "True", "FP4_RECIPE": "mxfp4", "HEALING_ITER": "340", "NVTE_MXFP4_USE_HADAMARD": "1"}
    fp4 = LoraConfig.from_env({**base, **amd, "HEALING_PRECISION": "FP8_DS"}).run_spec().features.fp4
    assert fp4.recipe == Fp4Recipe("mxfp4", mxfp4_hadamard=True) and fp4.healing_iter == 340
    nv = {"FP4": "True", "FP4_RECIPE": "nvfp4", "NVTE_NVFP4_DISABLE_RHT": "1"}
    nv["NVTE_NVFP4_DISABLE_2D_QUANTIZATION"] = "1"
    recipe = LoraConfig.from_env({**base, **nv}).run_spec().features.fp4.recipe
    assert recipe == Fp4Recipe("nvfp4", nvfp4_rht=False, nvfp4_2d=False, nvfp4_stochastic=True)
    with pytest.raises(Exception, match="FP4_RECIPE='int4' is not one of mxfp4, nvfp4"):
        LoraConfig.from_env({**base, "FP4": "True", "FP4_RECIPE": "int4"})
