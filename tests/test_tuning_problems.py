"""Problem sets: every shipped set loads, expansion, deterministic disjoint shards, extraction by hooks."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn as nn

from instance_factory.problem import ConvParams
from instance_factory.tuning.extract import extract_convs, extract_model, wav2vec2_conv_layers
from instance_factory.tuning.problem_sets import (
    Problem,
    expand_problem_set,
    list_problem_sets,
    load_problem_set,
    parse_shard,
    shard_split,
)

REQUIRED_SETS = {"quickstart", "resnet50", "resnext50_32x4d", "mobilenet_v2", "r3d_18", "wav2vec2"}


def test_shipped_sets_load_and_expand():
    assert REQUIRED_SETS <= set(list_problem_sets())
    ndims = {}
    for name in REQUIRED_SETS:
        ps = load_problem_set(name)
        probs = expand_problem_set(ps)
        assert probs, name
        assert {p.dtype for p in probs} == {"bf16", "fp16"}
        assert {p.op for p in probs} == {"conv_bwd_data", "conv_bwd_weight"}
        assert len({p.key for p in probs}) == len(probs)
        ndims[name] = {p.params.ndim for p in probs}
    assert ndims["r3d_18"] == {3} and ndims["wav2vec2"] == {1} and ndims["quickstart"] == {1, 2, 3}
    r50 = load_problem_set("resnet50")
    assert all(e["params"].N == 128 for e in r50["problems"])
    assert sum(e["count"] for e in r50["problems"]) == 53  # resnet50 has 53 convs
    conv1 = r50["problems"][0]
    assert conv1["params"].C == 3 and conv1["passes"] == ["conv_bwd_weight"]  # no data grad of images
    mb = load_problem_set("mobilenet_v2")
    assert any(e["params"].C == 1 and e["params"].K == 1 and e["params"].G > 1 for e in mb["problems"])
    rx = load_problem_set("resnext50_32x4d")
    assert any(e["params"].G == 32 for e in rx["problems"])
    qs = load_problem_set("quickstart")
    assert any(e["params"].G > 1 and e["params"].C == 1 for e in qs["problems"])  # depthwise
    assert max(e["params"].numel("input") for e in qs["problems"]) <= 2048  # interpreter-sized


def test_expand_filters_and_layouts():
    probs = expand_problem_set("quickstart", dtypes=["fp16"], passes=["data"], layout=["nhwgc", "ngchw"])
    assert {p.op for p in probs} == {"conv_bwd_data"} and {p.dtype for p in probs} == {"fp16"}
    assert {p.layout for p in probs if p.params.ndim == 2} == {"NHWGC/GKYXC/NHWGK", "NGCHW/GKYXC/NGKHW"}
    only2d = expand_problem_set("quickstart", dtypes=["bf16"], layout="NHWGC/GKYXC/NHWGK")
    assert only2d and {p.params.ndim for p in only2d} == {2}
    assert Problem.from_key(probs[0].key) == probs[0]


@pytest.mark.parametrize("n", [1, 2, 3, 7])
def test_shards_are_disjoint_deterministic_and_cover(n):
    probs = expand_problem_set("resnet50")
    shards = [shard_split(probs, (i, n)) for i in range(n)]
    keys = [{p.key for p in s} for s in shards]
    assert sum(len(k) for k in keys) == len(probs)
    assert set().union(*keys) == {p.key for p in probs}
    assert max(len(s) for s in shards) - min(len(s) for s in shards) <= 1  # balanced
    assert [p.key for p in shard_split(list(reversed(probs)), f"{n - 1}/{n}")] == [p.key for p in shards[-1]]


def test_parse_shard_errors():
    assert parse_shard("1/4") == (1, 4) and parse_shard(None) == (0, 1)
    for bad in ("4/4", "x", "1/0", "-1/2"):
        with pytest.raises(ValueError):
            parse_shard(bad)


@pytest.mark.filterwarnings("ignore:Using padding='same'")
def test_extract_by_hooks_dedupes_and_marks_the_input_conv():
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1),
        nn.Conv2d(16, 16, 3, padding="same", groups=16),  # depthwise
        nn.Conv2d(16, 16, 3, padding="same", groups=16),  # the same problem again
        nn.Conv2d(16, 32, 2, padding="same", groups=4),  # even "same": the extra pad goes right
        nn.Conv2d(32, 8, 3, padding=1, padding_mode="reflect"),
    )
    with torch.device("meta"):
        x = torch.empty(4, 3, 9, 9)
    ents = extract_convs(model.to("meta"), x)
    assert len(ents) == 4
    first, dw, even, refl = ents
    assert first["passes"] == ["conv_bwd_weight"] and first["count"] == 1
    assert ConvParams(**{k: first[k] for k in ("ndim", "G", "N", "K", "C", "filter", "input", "stride",
                                                "dilation", "left_pad", "right_pad")}).output == (5, 5)
    assert dw["count"] == 2 and dw["G"] == 16 and dw["C"] == 1 and dw["K"] == 1 and "passes" not in dw
    assert even["left_pad"] == [0, 0] and even["right_pad"] == [1, 1] and even["G"] == 4 and even["K"] == 8
    assert refl["input"] == [7, 7] and refl["left_pad"] == [0, 0]  # pre-padded by torch


def test_wav2vec2_builtin_model():
    ents = extract_model(lambda: wav2vec2_conv_layers("base"), (1, 16000), 2)
    assert [e["filter"][0] for e in ents] == [10, 3, 3, 3, 3, 2, 2, 128]
    assert ents[0]["passes"] == ["conv_bwd_weight"]
    assert ents[-1]["G"] == 16 and ents[-1]["C"] == 48 and ents[-1]["input"] == [49]


def test_torchvision_missing_is_a_clear_error():
    try:
        import torchvision  # noqa: F401
    except Exception:
        from instance_factory.tuning.extract import extract_torchvision

        with pytest.raises(ImportError, match="pip install torchvision"):
            extract_torchvision("resnet50", 2)
    else:
        pytest.skip("torchvision is installed")
