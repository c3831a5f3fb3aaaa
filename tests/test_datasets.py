"""Dataset loaders: shapes, ranges, determinism, and one-line errors for bad input."""

from __future__ import annotations

import gzip
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from leakbench.core.errors import DatasetError
from leakbench.datasets import DATASETS, ImageDataset, list_datasets, load_dataset, loaders, sample_batch

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _check_contract(ds: ImageDataset, shape: tuple[int, int, int], num_classes: int) -> None:
    assert ds.images.dtype == torch.float32
    assert ds.labels.dtype == torch.int64
    assert ds.images.ndim == 4 and ds.image_shape == shape
    assert ds.labels.shape == (len(ds),)
    assert float(ds.images.min()) >= 0.0 and float(ds.images.max()) <= 1.0
    assert ds.num_classes == num_classes
    assert int(ds.labels.min()) >= 0 and int(ds.labels.max()) < num_classes


def test_all_loaders_registered() -> None:
    names = {name for name, _ in list_datasets()}
    assert {"embedded", "digits", "mnist", "tinyimagenet", "imagefolder", "cifar10"} <= names
    assert all(description for _, description in list_datasets())


# --------------------------------------------------------------------------- embedded


def test_embedded_contract_and_cache() -> None:
    ds = load_dataset("embedded")
    _check_contract(ds, (3, 32, 32), ds.num_classes)
    assert ds.num_classes >= 2 and len(ds) > 300
    assert set(ds.labels.tolist()) == set(range(ds.num_classes))
    assert load_dataset("embedded") is ds  # cached in memory
    assert load_dataset("embedded", image_size=32) is ds


def test_embedded_has_all_six_photos() -> None:
    ds = load_dataset("embedded")
    assert ds.num_classes == loaders.EMBEDDED_PHOTOS == 6
    assert set(ds.labels.tolist()) == set(range(6))


@pytest.fixture
def without_skimage(monkeypatch: pytest.MonkeyPatch):
    """scikit-image made unimportable (as in a wheel installed without it); the embedded cache emptied
    before and after, so neither this test nor the next sees the other's dataset."""
    for name in ("skimage", "skimage.data"):
        monkeypatch.setitem(sys.modules, name, None)
    loaders._embedded_cached.cache_clear()
    yield
    loaders._embedded_cached.cache_clear()


def test_embedded_refuses_without_scikit_image(without_skimage) -> None:
    with pytest.raises(DatasetError, match=r"scikit-image.*pip install scikit-image") as info:
        load_dataset("embedded")
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_run_without_scikit_image_is_one_line_and_writes_nothing(without_skimage, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from leakbench.cli import main

    suite = tmp_path / "mini.toml"
    suite.write_text('name = "mini"\ndataset = "embedded"\nattacks = ["cpa"]\nbatch_sizes = [2]\n')
    code = main(["run", str(suite), "--out", str(tmp_path / "res"), "--reports", str(tmp_path / "rep")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("leakbench: error: embedded:"), err
    assert "pip install scikit-image" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mini.toml"]


def test_embedded_patches_are_distinct_and_not_flat() -> None:
    ds = load_dataset("embedded")
    flat = ds.images.flatten(1)
    assert torch.unique(flat, dim=0).shape[0] == len(ds)
    assert float(flat.std(dim=1).min()) >= loaders.EMBEDDED_MIN_STD


def test_embedded_image_size() -> None:
    ds = load_dataset("embedded", image_size=16)
    _check_contract(ds, (3, 16, 16), ds.num_classes)
    assert len(ds) > len(load_dataset("embedded"))


@pytest.mark.parametrize("size", [0, -4, 100_000, 2.5, True])
def test_bad_image_size(size: object) -> None:
    with pytest.raises(DatasetError):
        load_dataset("embedded", image_size=size)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- digits


def test_digits_contract() -> None:
    ds = load_dataset("digits")
    _check_contract(ds, (1, 8, 8), 10)
    assert len(ds) == 1797
    assert float(ds.images.max()) == 1.0
    assert load_dataset("digits", image_size=8).image_shape == (1, 8, 8)
    with pytest.raises(DatasetError, match="8"):
        load_dataset("digits", image_size=32)


# --------------------------------------------------------------------------- sample_batch


def test_sample_batch_is_deterministic() -> None:
    ds = load_dataset("digits")
    a, b, c = sample_batch(ds, 8, seed=1), sample_batch(ds, 8, seed=1), sample_batch(ds, 8, seed=2)
    assert a.indices == b.indices and torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    assert a.indices != c.indices
    assert len(set(a.indices)) == 8
    assert torch.equal(a.images, ds.images[list(a.indices)])


# --------------------------------------------------------------------------- imagefolder


def _write_png(path: Path, seed: int, size: tuple[int, int], mode: str = "RGB") -> None:
    rng = np.random.default_rng(seed)
    channels = {"RGB": 3, "RGBA": 4}.get(mode)
    shape = (size[1], size[0]) if channels is None else (size[1], size[0], channels)
    Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=None).save(path)


@pytest.fixture()
def image_folder(tmp_path: Path) -> Path:
    (tmp_path / "b_dogs").mkdir()
    (tmp_path / "a_cats").mkdir()
    _write_png(tmp_path / "a_cats" / "one.png", 0, (40, 30))
    _write_png(tmp_path / "a_cats" / "two.PNG", 1, (50, 50), mode="RGBA")
    _write_png(tmp_path / "b_dogs" / "grey.png", 2, (20, 64), mode="L")
    Image.new("RGB", (64, 48), (200, 10, 10)).save(tmp_path / "b_dogs" / "red.JPG")
    (tmp_path / "b_dogs" / "notes.txt").write_text("not an image")
    return tmp_path


def test_imagefolder_loads(image_folder: Path) -> None:
    ds = load_dataset("imagefolder", data_root=image_folder)
    _check_contract(ds, (3, 32, 32), 2)
    assert len(ds) == 4
    assert ds.labels.tolist() == [0, 0, 1, 1]
    red = ds.images[3]
    assert float(red[0].mean()) > 0.7 and float(red[1].mean()) < 0.1
    assert load_dataset("imagefolder", data_root=image_folder, image_size=16).image_shape == (3, 16, 16)


def test_imagefolder_unreadable_file(image_folder: Path) -> None:
    bad = image_folder / "a_cats" / "broken.jpg"
    bad.write_bytes(b"this is not a jpeg")
    with pytest.raises(DatasetError, match=r"broken\.jpg"):
        load_dataset("imagefolder", data_root=image_folder)


def test_imagefolder_bad_roots(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no class subfolders"):
        load_dataset("imagefolder", data_root=tmp_path)
    (tmp_path / "empty_class").mkdir()
    with pytest.raises(DatasetError, match="empty_class"):
        load_dataset("imagefolder", data_root=tmp_path)
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset("imagefolder", data_root=tmp_path / "nope")
    with pytest.raises(DatasetError):
        load_dataset("imagefolder", data_root=None)


# --------------------------------------------------------------------------- mnist (synthetic IDX)


def _idx_bytes(magic: int, array: np.ndarray) -> bytes:
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    return header + array.astype(np.uint8).tobytes()


def _write_mnist(raw: Path, n: int = 5, gz: bool = True) -> tuple[np.ndarray, np.ndarray]:
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = np.arange(n, dtype=np.uint8) % 10
    for stem, data in (("t10k-images-idx3-ubyte", _idx_bytes(2051, images)),
                       ("t10k-labels-idx1-ubyte", _idx_bytes(2049, labels))):
        if gz:
            (raw / f"{stem}.gz").write_bytes(gzip.compress(data))
        else:
            (raw / stem).write_bytes(data)
    return images, labels


@pytest.mark.parametrize("gz", [True, False])
def test_mnist_synthetic_idx_and_root_forms(tmp_path: Path, gz: bool) -> None:
    images, labels = _write_mnist(tmp_path / "MNIST" / "raw", gz=gz)
    for root in (tmp_path, tmp_path / "MNIST", tmp_path / "MNIST" / "raw"):
        ds = load_dataset("mnist", data_root=root)
        _check_contract(ds, (1, 28, 28), 10)
        assert ds.labels.tolist() == labels.tolist()
        assert torch.allclose(ds.images[:, 0] * 255.0, torch.from_numpy(images).float(), atol=1e-3)
    assert load_dataset("mnist", data_root=tmp_path, image_size=32).image_shape == (1, 32, 32)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda raw: (raw / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x01" + b"\x00" * 8)),
        lambda raw: (raw / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00")),
        lambda raw: (raw / "t10k-images-idx3-ubyte.gz").write_bytes(
            gzip.decompress((raw / "t10k-images-idx3-ubyte.gz").read_bytes())[:-7]),
        lambda raw: (raw / "t10k-images-idx3-ubyte.gz").write_bytes(b"\x1f\x8b not really gzip"),
        lambda raw: (raw / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx_bytes(2049, np.zeros(3)))),
        lambda raw: (raw / "t10k-labels-idx1-ubyte.gz").unlink(),
    ],
    ids=["wrong-magic", "short", "truncated", "bad-gzip", "count-mismatch", "no-labels"],
)
def test_mnist_corrupt_idx(tmp_path: Path, corrupt) -> None:
    raw = tmp_path / "MNIST" / "raw"
    _write_mnist(raw)
    corrupt(raw)
    with pytest.raises(DatasetError, match="mnist"):
        load_dataset("mnist", data_root=tmp_path)


def test_mnist_missing_root(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset("mnist", data_root=tmp_path / "missing")
    with pytest.raises(DatasetError, match="t10k-images"):
        load_dataset("mnist", data_root=tmp_path)


def test_mnist_failed_download_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.datasets

    def no_network(*args: object, **kwargs: object) -> None:
        raise RuntimeError("Error downloading:\n<urlopen error [Errno -2] Name or service not known>")

    monkeypatch.setattr(loaders, "DEFAULT_CACHE_ROOT", tmp_path)
    monkeypatch.setattr(torchvision.datasets, "MNIST", no_network)
    with pytest.raises(DatasetError, match="--data-root") as info:
        load_dataset("mnist")
    assert "\n" not in str(info.value)


# --------------------------------------------------------------------------- tinyimagenet / cifar10 errors


def test_tinyimagenet_missing(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="does not exist"):
        load_dataset("tinyimagenet", data_root=tmp_path / "missing")
    with pytest.raises(DatasetError, match=r"wnids\.txt"):
        load_dataset("tinyimagenet", data_root=tmp_path)
    with pytest.raises(DatasetError):
        load_dataset("tinyimagenet", data_root=None)
    folder = tmp_path / "tiny-imagenet-200"
    (folder / "val" / "images").mkdir(parents=True)
    (folder / "wnids.txt").write_text("n01\nn02\n")
    with pytest.raises(DatasetError, match=r"val_annotations\.txt"):
        load_dataset("tinyimagenet", data_root=tmp_path)
    (folder / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn02\t0\t0\t8\t8\n")
    with pytest.raises(DatasetError, match=r"val_0\.JPEG"):
        load_dataset("tinyimagenet", data_root=tmp_path)
    Image.new("L", (64, 64), 128).save(folder / "val" / "images" / "val_0.JPEG", format="JPEG")
    ds = load_dataset("tinyimagenet", data_root=folder)
    _check_contract(ds, (3, 64, 64), 2)
    assert ds.labels.tolist() == [1]


def test_cifar10_empty_root_fails_fast(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="cifar-10-batches-py"):
        load_dataset("cifar10", data_root=tmp_path)
    (tmp_path / "cifar-10-batches-py").mkdir()  # present but empty: torchvision's check fails
    with pytest.raises(DatasetError, match="cifar10"):
        load_dataset("cifar10", data_root=tmp_path)


def test_cifar10_conversion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torchvision.datasets

    class FakeCIFAR10:
        def __init__(self, root: str, train: bool, download: bool) -> None:
            assert Path(root) == tmp_path and not train and not download
            self.data = np.full((3, 32, 32, 3), 255, dtype=np.uint8)
            self.data[:, :, :, 1] = 0
            self.targets = [0, 9, 4]

    (tmp_path / "cifar-10-batches-py").mkdir()
    monkeypatch.setattr(torchvision.datasets, "CIFAR10", FakeCIFAR10)
    ds = load_dataset("cifar10", data_root=tmp_path / "cifar-10-batches-py")
    _check_contract(ds, (3, 32, 32), 10)
    assert ds.labels.tolist() == [0, 9, 4]
    assert float(ds.images[:, 0].min()) == 1.0 and float(ds.images[:, 1].max()) == 0.0
    assert load_dataset("cifar10", data_root=tmp_path, image_size=16).image_shape == (3, 16, 16)


def _cifar10_folder(root: Path) -> Path:
    """A tiny CIFAR-10 training folder: two PNG images per class (one 40×40, fitted to 32), class k's pixels k·20."""
    for k, name in enumerate(loaders.CIFAR10_CLASSES):
        (root / "train" / name).mkdir(parents=True)
        Image.new("RGB", (32, 32), (k * 20, 0, 255)).save(root / "train" / name / "0000.png")
        Image.new("RGB", (40, 40), (k * 20, 0, 255)).save(root / "train" / name / "0001.png")
    return root


def test_cifar10_training_folder_is_decoded_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """train/<class>/ loads in class order, through a decoded cache file the next load reads instead of the images;
    a changed image is decoded again."""
    monkeypatch.setattr(loaders, "DEFAULT_CACHE_ROOT", tmp_path / "cache")
    root = _cifar10_folder(tmp_path / "cifar10")
    loaders._cifar10_folder_cached.cache_clear()
    ds = load_dataset("cifar10", data_root=root)
    _check_contract(ds, (3, 32, 32), 10)
    assert ds.labels.tolist() == [k for k in range(10) for _ in range(2)]
    assert torch.allclose(ds.images[::2, 0, 0, 0], torch.arange(10) * 20 / 255.0)
    assert len(list((tmp_path / "cache" / loaders.DECODED_DIR).glob("cifar10-*.npz"))) == 1
    loaders._cifar10_folder_cached.cache_clear()

    def refuse(*args: object) -> None:
        raise AssertionError("decoded again")
    monkeypatch.setattr(loaders, "_decode_cifar10", refuse)
    again = load_dataset("cifar10", data_root=root / "train")  # the train folder itself
    assert torch.equal(again.images, ds.images) and torch.equal(again.labels, ds.labels)
    assert load_dataset("cifar10", data_root=root, image_size=16).image_shape == (3, 16, 16)
    Image.new("RGB", (32, 32), (0, 0, 0)).save(root / "train" / "truck" / "0002.png")
    loaders._cifar10_folder_cached.cache_clear()
    with pytest.raises(AssertionError, match="decoded again"):
        load_dataset("cifar10", data_root=root)
    loaders._cifar10_folder_cached.cache_clear()


def test_cifar10_says_what_it_looks_for(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"train\S*/<class>/\*\.jpg .*cifar-10-batches-py"):
        load_dataset("cifar10", data_root=tmp_path)
    (tmp_path / "train" / "airplane").mkdir(parents=True)  # not the ten classes
    with pytest.raises(DatasetError, match="expected"):
        load_dataset("cifar10", data_root=tmp_path)


@pytest.mark.slow
def test_cifar10_training_split_real(shared_data: Path) -> None:
    """The shared CIFAR-10 training JPEGs: 50,000 images, 5,000 per class; its partition's test part is 5,000."""
    from leakbench.datasets import partition

    if not (shared_data / "cifar10" / "train").is_dir():
        pytest.skip("no cifar10/train in the shared data")
    ds = load_dataset("cifar10", data_root=shared_data / "cifar10")
    _check_contract(ds, (3, 32, 32), 10)
    assert ds.labels.bincount().tolist() == [5000] * 10
    parts = partition(ds)
    assert (len(parts.attack), len(parts.test), len(parts.train)) == (5000, 5000, 40000)
    assert parts.test[:5].tolist() == [7, 9, 24, 27, 37]  # docs: the fixed test part


# --------------------------------------------------------------------------- real data (skipped without it)


@pytest.fixture(scope="module")
def tinyimagenet() -> ImageDataset:
    if not (SHARED_DATA / "tiny-imagenet-200" / "wnids.txt").is_file():
        pytest.skip(f"no TinyImageNet under {SHARED_DATA}")
    return load_dataset("tinyimagenet", data_root=SHARED_DATA)


def test_mnist_real_data() -> None:
    if not (SHARED_DATA / "MNIST" / "raw").is_dir():
        pytest.skip(f"no MNIST under {SHARED_DATA}")
    ds = load_dataset("mnist", data_root=SHARED_DATA)
    _check_contract(ds, (1, 28, 28), 10)
    assert len(ds) == 10_000
    assert set(ds.labels.tolist()) == set(range(10))
    assert sample_batch(ds, 4, seed=0).images.shape == (4, 1, 28, 28)


@pytest.mark.slow
def test_tinyimagenet_real_data(tinyimagenet: ImageDataset) -> None:
    ds = tinyimagenet
    _check_contract(ds, (3, 64, 64), 200)
    assert len(ds) == 10_000
    assert torch.bincount(ds.labels, minlength=200).tolist() == [50] * 200
    assert load_dataset("tinyimagenet", data_root=SHARED_DATA / "tiny-imagenet-200") is ds


def test_tinyimagenet_greyscale_became_rgb(tinyimagenet: ImageDataset) -> None:
    images = tinyimagenet.images
    grey = ((images[:, 0] == images[:, 1]) & (images[:, 1] == images[:, 2])).flatten(1).all(dim=1)
    assert int(grey.sum()) >= 1  # the README counts 168 greyscale files; they load as 3 equal channels


def test_registry_entries_are_callables() -> None:
    for entry in DATASETS.entries():
        assert callable(entry.factory)
