"""The claims checker (benchmarks/claims.py, `make claims`): a claim outside its tolerance fails.

Only the checker is tested here; re-measuring the claims is `make claims` (minutes, real data).
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, load_benchmark

claims = load_benchmark("claims")

ENTRY = '''
[[claims]]
doc = "docs/x.md"
quote = "cpa on two embedded images"
attack = "cpa"
setting = { dataset = "embedded", batch_size = 2, width = 32, depth = 2, seed = 0 }
metric = "psnr_mean"
value = {value}
tolerance = {tolerance}
'''


def _entry(value: float, tolerance: float) -> str:
    return ENTRY.replace("{value}", repr(value)).replace("{tolerance}", repr(tolerance))


def _claim(value: float = 20.0, tolerance: float = 0.1):
    return claims.Claim(doc="d", quote="q", attack="cpa", setting={}, metric="psnr_mean", value=value,
                        tolerance=tolerance)


def test_a_claim_outside_its_tolerance_fails() -> None:
    claim = _claim()
    assert claim.holds(20.05) and claim.holds(19.95)
    assert not claim.holds(20.2) and not claim.holds(19.85)
    assert not claim.holds(None) and not claim.holds(math.nan) and not claim.holds(math.inf)
    assert claim.line(20.2).startswith("FAIL") and claim.line(20.0).startswith("ok")


def test_malformed_claims_files_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "claims.toml"
    path.write_text(_entry(1.0, 0.1).replace('metric = "psnr_mean"\n', ""))
    with pytest.raises(ValueError, match="missing"):
        claims.load_claims(path)
    path.write_text(_entry(1.0, -1.0))
    with pytest.raises(ValueError, match="negative"):
        claims.load_claims(path)
    path.write_text("")
    with pytest.raises(ValueError, match="no"):
        claims.load_claims(path)


@pytest.mark.slow
def test_main_fails_on_a_wrong_claim_and_passes_on_the_measured_one(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "claims.toml"
    path.write_text(_entry(1.0, 0.1))
    measured = claims.measure(claims.load_claims(path)[0], None)
    assert claims.main([str(path)]) == 1 and "FAIL" in capsys.readouterr().out
    path.write_text(_entry(measured, 1e-6))
    assert claims.main([str(path)]) == 0 and "1 of 1 claims hold" in capsys.readouterr().out


def test_shipped_claims_are_quoted_in_their_docs() -> None:
    for claim in claims.load_claims(REPO_ROOT / "docs" / "claims.toml"):
        digits = max(0, -math.floor(math.log10(claim.tolerance)))
        assert f"{claim.value:.{digits}f}" in (REPO_ROOT / claim.doc).read_text(), claim.quote
