"""ConvParams, layout triples and the float64 references."""

import pytest
import torch

from instance_factory.layouts import all_layouts, parse_layout
from instance_factory.problem import ConvParams
from instance_factory.reference import ref_conv_bwd_data, ref_conv_bwd_weight, ref_conv_fwd, rel_error


def test_ck_argument_order_and_keywords():
    p = ConvParams(2, 1, 128, 256, 128, (3, 3), (71, 71), (2, 2), (1, 1), (1, 1), (1, 1))
    q = ConvParams(ndim=2, G=1, N=128, K=256, C=128, filter=(3, 3), input=(71, 71), stride=(2, 2),
                   dilation=(1, 1), left_pad=(1, 1), right_pad=(1, 1))
    assert p == q
    assert p.output == (36, 36)
    assert p.flops() == 2 * 128 * 256 * 128 * 36 * 36 * 9


@pytest.mark.parametrize("kwargs, match", [
    (dict(ndim=4), "ndim"),
    (dict(G=0), "G must be a positive"),
    (dict(filter=(3,)), "filter has 1 entries"),
    (dict(stride=(0, 1)), "stride must be positive"),
    (dict(left_pad=(-1, 0)), "left_pad must be >= 0"),
    (dict(input=(2, 2), filter=(5, 5)), "output lengths"),
])
def test_bad_params_raise_clear_errors(kwargs, match):
    base = dict(ndim=2, G=1, N=1, K=1, C=1, filter=(3, 3), input=(8, 8), stride=(1, 1), dilation=(1, 1),
                left_pad=(0, 0), right_pad=(0, 0))
    base.update(kwargs)
    with pytest.raises(ValueError, match=match):
        ConvParams(**base)


def test_key_roundtrip_and_order():
    p = ConvParams(3, 2, 4, 5, 6, (1, 2, 3), (7, 8, 9), (1, 2, 1), (2, 1, 1), (0, 1, 2), (2, 1, 0))
    assert p.key() == "3d-g2-n4-k5-c6-f1x2x3-i7x8x9-s1x2x1-d2x1x1-l0x1x2-r2x1x0"
    assert ConvParams.from_key(p.key()) == p
    with pytest.raises(ValueError, match="not a ConvParams key"):
        ConvParams.from_key("garbage")


def test_layout_table_and_shapes():
    names = {lt.name for lt in all_layouts()}
    assert "NHWGC/GKYXC/NHWGK" in names and "NGCDHW/GKCZYX/NGKDHW" in names and "GNWC/GKXC/GNWK" in names
    assert len(names) == 12
    p = ConvParams(2, 3, 2, 5, 4, (3, 3), (9, 8), (2, 2), (1, 1), (1, 1), (1, 1))
    lt = parse_layout("NHWGC/GKYXC/NHWGK")
    assert lt.shape("input", p) == (2, 9, 8, 3, 4)
    assert lt.shape("weight", p) == (3, 5, 3, 3, 4)
    assert lt.shape("output", p) == (2, 5, 4, 3, 5)
    assert parse_layout("NGCHW/GKCYX/NGKHW").shape("weight", p) == (3, 5, 4, 3, 3)
    with pytest.raises(ValueError, match="3D layout but the problem has ndim=2"):
        parse_layout("NDHWGC/GKZYXC/NDHWGK", 2)
    with pytest.raises(ValueError, match="unknown layout"):
        parse_layout("NCHW/KCYX/NKHW")


@pytest.mark.parametrize("lt", all_layouts(), ids=lambda lt: lt.name)
def test_references_are_adjoint(lt):
    """<fwd(x, w), dy> = <x, bwd_data(dy, w)> = <w, bwd_weight(x, dy)> for every layout."""
    sp = {1: 1, 2: 2, 3: 3}[lt.ndim]
    p = ConvParams(lt.ndim, 2, 2, 3, 2, (3,) * sp, (6,) * sp, (2,) * sp, (1,) * sp, (1,) * sp, (0,) * sp)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(lt.shape("input", p), generator=g)
    w = torch.randn(lt.shape("weight", p), generator=g)
    dy = torch.randn(lt.shape("output", p), generator=g)
    y = ref_conv_fwd(x, w, p, lt.name)
    a = (y * dy.double()).sum()
    b = (x.double() * ref_conv_bwd_data(dy, w, p, lt.name)).sum()
    c = (w.double() * ref_conv_bwd_weight(x, dy, p, lt.name)).sum()
    assert torch.allclose(a, b) and torch.allclose(a, c)


def test_rel_error_never_passes_nan():
    ref = torch.ones(4, dtype=torch.float64)
    out = ref.clone()
    out[1] = float("nan")
    assert rel_error(out, ref) == float("inf")
    assert rel_error(ref.float(), ref) == 0.0
