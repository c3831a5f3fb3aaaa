"""QSGD as published (Alistarh et al., NeurIPS 2017; `leakbench.fl.qsgd`): per bucket of d entries, the
bucket's 2-norm times sign times a level in {0, 1/s, …, 1} drawn without bias; zeros and signs kept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from test_defences_update import _defended

from leakbench.cell.spec import cell_columns, cell_id, spec_dict, spec_from_dict
from leakbench.core.errors import ConfigError
from leakbench.core.settings import build_config
from leakbench.fl import Client
from leakbench.fl.qsgd import QSGD, QSGDConfig, qsgd
from leakbench.fl.quantise import QuantiseConfig, UniformQuantise
from leakbench.harness.suite import load_suite


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("levels", [1, 4, 256])
def test_qsgd_keeps_exact_zeros_and_signs(client: Client, levels: int) -> None:
    """A ReLU victim's gradient has exact zeros (units off): QSGD shares them as zeros, and every non-zero
    entry keeps its sign or becomes 0 (level 0), never the opposite sign."""
    plain, q = _defended(client), _defended(client, QSGD(QSGDConfig(levels=levels)))
    assert any((g == 0).any() for g in plain.gradients.values())
    for name, g in plain.gradients.items():
        shared = q.gradients[name]
        assert (shared[g == 0] == 0).all(), name
        assert (torch.sign(shared) * torch.sign(g) >= 0).all(), name


def test_uniform_quantise_does_not_keep_zeros(client: Client) -> None:
    """What the rename is for: zero is no level of the uniform rounding, so exact zeros become ±Δ/2."""
    plain, q = _defended(client), _defended(client, UniformQuantise(QuantiseConfig(bits=4)))
    name = next(n for n, g in plain.gradients.items() if (g == 0).any())
    assert (q.gradients[name][plain.gradients[name] == 0] != 0).all()


@pytest.mark.parametrize("norm", ["l2", "max"])
def test_each_bucket_shares_its_scale_times_levels(norm: str) -> None:
    """Buckets are d consecutive entries of the flattened tensor (the last one shorter); every shared
    entry is ±scale·l/s with l one of the two levels around |v_i|/scale·s."""
    g = torch.randn(3, 7, generator=_gen(1), dtype=torch.float64)
    g[0, 2] = 0.0
    levels, d = 5, 4
    q = qsgd(g, levels, d, _gen(), norm).reshape(-1)
    for start in range(0, g.numel(), d):
        v, shared = g.reshape(-1)[start:start + d], q[start:start + d]
        scale = v.norm() if norm == "l2" else v.abs().max()
        position = v.abs() / scale * levels
        level = shared.abs() / scale * levels
        torch.testing.assert_close(level, level.round(), rtol=0, atol=1e-9)  # a level l/s of this bucket's scale
        assert ((level.round() == position.floor()) | (level.round() == position.floor() + 1)).all()
    assert q[2] == 0


def test_the_whole_tensor_is_one_bucket_at_d_0() -> None:
    g = torch.tensor([3.0, -4.0, 0.0, 0.0])
    q = qsgd(g, 1, 0, _gen())  # s = 1: each entry is 0 or ±‖g‖₂ = ±5
    assert set(q.abs().tolist()) <= {0.0, 5.0} and q[2:].eq(0).all()
    assert qsgd(torch.zeros(5), 4, 2, _gen()).eq(0).all()


def test_qsgd_is_unbiased() -> None:
    """The mean over 20,000 draws (one row each, one bucket per row) is within 5 standard errors of v: each
    draw's error is at most one step scale/s, so its std is at most scale/(2s)."""
    v = torch.tensor([0.7, -0.2, 0.05, 0.0, -1.3, 0.4], dtype=torch.float64)
    rows, levels = 20_000, 2
    q = qsgd(v.repeat(rows, 1), levels, v.numel(), _gen())
    bound = 5 * float(v.norm()) / (2 * levels) / rows**0.5
    assert (q.mean(0) - v).abs().max() <= bound
    assert not torch.equal(q[0], q[1])  # the draws are random, not a fixed rounding


def test_qsgd_draws_from_the_client_seed(client: Client) -> None:
    defence = QSGD(QSGDConfig(levels=2))
    first, again = _defended(client, defence), _defended(client, defence)
    other = _defended(Client(client.model, client.batch, 1, client.threat), defence)
    assert all(torch.equal(first.gradients[n], again.gradients[n]) for n in first.gradients)
    assert not torch.equal(first.gradients["body.0.weight"], other.gradients["body.0.weight"])
    assert first.kind == "fedsgd+qsgd"


def test_label_and_columns() -> None:
    assert QSGD(QSGDConfig()).label() == "qsgd s=256 d=512"
    assert QSGD(QSGDConfig(levels=4, bucket=128, norm="max")).label() == "qsgd s=4 d=128 norm=max"
    assert QSGD(QSGDConfig(levels=16)).columns() == {"qsgd_levels": 16, "qsgd_bucket": 512, "qsgd_norm": "l2"}


@pytest.mark.parametrize("settings,message", [
    ({"levels": 0}, "levels"), ({"levels": 2**24 + 1}, "levels"), ({"bucket": -1}, "bucket"),
    ({"norm": "l1"}, "norm"),
])
def test_bad_settings_are_refused_in_one_line(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        build_config(QSGDConfig, settings, "key")
    assert "\n" not in str(info.value)


def test_a_suite_level_builds_cells(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text('name = "q"\ndataset = "embedded"\nattacks = ["ig"]\nbatch_sizes = [2]\n'
                                     'width = 32\ndepth = 3\ndefences = ["none", { name = "qsgd", levels = 4, '
                                     'bucket = 128 }]\n')
    none, defended = load_suite(tmp_path / "s.toml").cells
    assert cell_id(defended) != cell_id(none) and spec_from_dict(spec_dict(defended)) == defended
    assert cell_columns(defended)["defence"] == "qsgd s=4 d=128"
