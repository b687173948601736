"""Image data sets for the torch backend: a UTKFace-style folder, and 8×8 digits with a sensitive
attribute. Both return an :class:`ImageDataset`, a :class:`pfair.datasets.Dataset` whose rows are
flattened images (so :class:`pfair.Federation` splits them into silos like any table) and whose
``input_shape`` gives the shape one row is reshaped to (``(C, H, W)``). Nothing is downloaded.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pfair.datasets._base import Dataset, split_indices

__all__ = ["ImageDataset", "load_image_folder", "load_digits_fair", "UTK_AGE_BINS", "UTK_RACES", "age_class"]

#: Lower edges of the 9 age classes of UTKFace (years): 0–2, 3–9, 10–19, 20–29, 30–39, 40–49,
#: 50–59, 60–69, 70+. Our choice of bins for "the paper's 9 age classes" (see docs/deep.md).
UTK_AGE_BINS: tuple = (0, 3, 10, 20, 30, 40, 50, 60, 70)
#: UTKFace's race codes 0..4.
UTK_RACES: tuple = ("White", "Black", "Asian", "Indian", "Others")
UTK_GENDERS: tuple = ("Male", "Female")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
_UTK_NAME = re.compile(r"^(\d+)_(\d+)_(\d+)_")


@dataclass(frozen=True, eq=False, repr=False)
class ImageDataset(Dataset):
    """A :class:`~pfair.datasets.Dataset` of flattened images; ``X_*[i].reshape(input_shape)`` is
    image i, channels first."""

    input_shape: tuple = ()

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", input_shape={tuple(self.input_shape)})"

    def images(self, split: str = "train") -> np.ndarray:
        """The images of a split, ``(n, *input_shape)``."""
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        X = self.X_train if split == "train" else self.X_test
        return X.reshape((X.shape[0], *self.input_shape))


def _age_names(bins: Sequence[int]) -> list[str]:
    names = [f"{lo}-{hi - 1}" for lo, hi in zip(bins[:-1], bins[1:])]
    return names + [f"{bins[-1]}+"]


def age_class(age: Any, bins: Sequence[int] = UTK_AGE_BINS) -> np.ndarray:
    """Index of each age's class: the last ``bins[c] <= age``."""
    return np.searchsorted(np.asarray(bins), np.asarray(age), side="right") - 1


def _split_checked(y: np.ndarray, s: np.ndarray, k: int, group_names: Sequence[str], test_size: float,
                   seed: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    train, test = split_indices(len(y), test_size, seed, strata=y * k + s)
    for split, idx in (("train", train), ("test", test)):
        counts = np.bincount(s[idx], minlength=k)
        empty = [group_names[r] for r in range(k) if counts[r] == 0]
        if empty:
            raise ValueError(f"{what}: group(s) {empty} have no records in the {split} split (test_size={test_size}, "
                             f"seed={seed}); add images of those groups or change the split")
    return train, test


def _standardise(X_train: np.ndarray, X_test: np.ndarray, channels: int) -> None:
    """Per-channel standardisation with the training split's mean and std (in place)."""
    n_tr = X_train.shape[0]
    tr = X_train.reshape(n_tr, channels, -1)
    mean = tr.mean(axis=(0, 2))
    std = tr.std(axis=(0, 2))
    std[~(std > 0)] = 1.0
    for X in (X_train, X_test):
        v = X.reshape(X.shape[0], channels, -1)
        v -= mean[None, :, None]
        v /= std[None, :, None]


def _read_npy(path: Path, size: int, channels: int) -> np.ndarray:
    """An image from ``.npy`` (H×W, H×W×C or C×H×W; uint8 in 0..255 or float in [0, 1]), resized to
    size × size by nearest neighbour, as ``(channels, size, size)`` float in [0, 1]."""
    a = np.load(path, allow_pickle=False)
    if a.ndim == 2:
        a = a[None]
    elif a.ndim == 3 and a.shape[-1] in (1, 3, 4) and a.shape[0] not in (1, 3, 4):
        a = np.moveaxis(a, -1, 0)
    if a.ndim != 3:
        raise ValueError(f"{path}: a .npy image must be H×W, H×W×C or C×H×W, got shape {a.shape}")
    integer = np.issubdtype(a.dtype, np.integer)
    a = a[:3].astype(np.float64)
    if integer:
        a /= 255.0
    if a.shape[0] == 1 and channels == 3:
        a = np.repeat(a, 3, axis=0)
    elif a.shape[0] == 3 and channels == 1:
        a = (0.299 * a[0] + 0.587 * a[1] + 0.114 * a[2])[None]
    rows = (np.arange(size) * a.shape[1] // size)
    cols = (np.arange(size) * a.shape[2] // size)
    return a[:, rows][:, :, cols]


def _read_image(path: Path, size: int, channels: int) -> np.ndarray:
    if path.suffix.lower() == ".npy":
        return _read_npy(path, size, channels)
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow is installed with matplotlib
        raise ImportError(f"reading {path.suffix} images needs Pillow (pip install pillow); without it, store the "
                          "images as .npy arrays (H×W×C uint8) with the same file names") from None
    with Image.open(path) as im:
        im = im.convert("L" if channels == 1 else "RGB").resize((size, size), Image.BILINEAR)
        a = np.asarray(im, dtype=np.float64) / 255.0
    return a[None] if a.ndim == 2 else np.moveaxis(a, -1, 0)


def load_image_folder(path: Any, *, image_size: int = 32, label: str = "age", sensitive: str = "race",
                      age_bins: Sequence[int] = UTK_AGE_BINS, grayscale: bool = False, standardize: bool = True,
                      test_size: float = 0.25, seed: int = 0, limit: int | None = None) -> ImageDataset:
    """Load a UTKFace-style folder: files named ``age_gender_race_date.jpg`` (UTKFace's
    ``[age]_[gender]_[race]_[date&time].jpg``, also ``*.jpg.chip.jpg``; gender 0 male, 1 female;
    race 0 White, 1 Black, 2 Asian, 3 Indian, 4 Others).

    Parameters
    ----------
    path : the folder (not searched recursively).
    image_size : images are resized to ``image_size × image_size`` (bilinear; memory is
        8·n·C·image_size² bytes: 580 MB for UTKFace's 23,705 images at 32 pixels in colour).
    label : ``"age"`` (default; 9 classes by ``age_bins``: 0–2, 3–9, 10–19, …, 60–69, 70+) or
        ``"gender"``.
    sensitive : ``"race"`` (default; 5 groups, in UTKFace's code order) or ``"gender"``.
    age_bins : lower edges of the age classes (increasing, starting at 0).
    grayscale : one channel instead of three.
    standardize : standardise each channel with the training split's mean and std (else [0, 1]).
    test_size, seed : the reproducible train/test split, stratified by (label, group).
    limit : read only the first ``limit`` files (sorted by name), for quick experiments.

    Files are read with Pillow (``.jpg``, ``.jpeg``, ``.png``, ``.bmp``); ``.npy`` arrays (H×W,
    H×W×C or C×H×W, uint8 or float in [0, 1]) need only NumPy and are resized by nearest
    neighbour. Files whose names do not parse (UTKFace has a few without a race field) are
    skipped with a warning. ``attrs_*`` hold the raw ``age``, ``gender``, ``race`` and ``file``.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise ValueError(f"path={str(path)!r} is not a folder; pass the folder that holds the UTKFace images")
    if label not in ("age", "gender"):
        raise ValueError(f"label={label!r} is not supported; choose 'age' or 'gender'")
    if sensitive not in ("race", "gender"):
        raise ValueError(f"sensitive={sensitive!r} is not supported; choose 'race' or 'gender'")
    if label == sensitive:
        raise ValueError("label and sensitive must differ")
    if isinstance(image_size, bool) or not isinstance(image_size, int) or image_size < 1:
        raise ValueError(f"image_size must be an integer >= 1 (pixels per side), got {image_size!r}")
    bins = [int(b) for b in age_bins]
    if len(bins) < 2 or bins[0] != 0 or any(b >= c for b, c in zip(bins, bins[1:])):
        raise ValueError(f"age_bins must be increasing lower edges starting at 0 with at least 2 classes, got {bins}")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES + (".npy",))
    meta, bad = [], []
    for p in files:
        mt = _UTK_NAME.match(p.name)
        if mt is None:
            bad.append(p.name)
            continue
        age, gender, race = (int(v) for v in mt.groups())
        if gender > 1 or race > 4:
            bad.append(p.name)
            continue
        meta.append((p, age, gender, race))
    if bad:
        warnings.warn(f"{len(bad)} file(s) in {folder} do not follow age_gender_race_date.ext (with gender 0/1 and "
                      f"race 0..4) and were skipped, e.g. {bad[:3]}", stacklevel=2)
    if limit is not None:
        meta = meta[: int(limit)]
    if not meta:
        raise ValueError(f"path={str(path)!r} holds no image named age_gender_race_date.jpg (or .png, .npy); is it "
                         "the UTKFace folder?")
    channels = 1 if grayscale else 3
    X = np.empty((len(meta), channels * image_size * image_size), dtype=np.float64)
    for i, (p, *_rest) in enumerate(meta):
        X[i] = _read_image(p, image_size, channels).ravel()
    ages = np.array([m[1] for m in meta])
    genders = np.array([m[2] for m in meta], dtype=np.int64)
    races = np.array([m[3] for m in meta], dtype=np.int64)
    if label == "age":
        y, label_names = age_class(ages, bins).astype(np.int64), _age_names(bins)
    else:
        y, label_names = genders, list(UTK_GENDERS)
    if sensitive == "race":
        s, group_names = races, list(UTK_RACES)
    else:
        s, group_names = genders, list(UTK_GENDERS)
    k = len(group_names)
    train, test = _split_checked(y, s, k, group_names, test_size, seed, f"path={str(path)!r}")
    X_train, X_test = X[train], X[test]
    if standardize:
        _standardise(X_train, X_test, channels)
    attrs = pd.DataFrame({"age": ages, "gender": genders, "race": races, "file": [m[0].name for m in meta]})
    names = [f"c{c}_y{r}_x{q}" for c in range(channels) for r in range(image_size) for q in range(image_size)]
    return ImageDataset(
        name="utkface", X_train=X_train, y_train=y[train], s_train=s[train], X_test=X_test, y_test=y[test],
        s_test=s[test], feature_names=names, label_names=label_names, sensitive_name=sensitive,
        group_names=group_names, attrs_train=attrs.iloc[train].reset_index(drop=True),
        attrs_test=attrs.iloc[test].reset_index(drop=True), input_shape=(channels, image_size, image_size),
    )


def load_digits_fair(*, n_groups: int = 3, label: str = "digit", test_size: float = 0.25,
                     seed: int = 0) -> ImageDataset:
    """scikit-learn's bundled 8×8 handwritten digits (1,797 images; Alpaydin and Kaynak, UCI
    "Optical Recognition of Handwritten Digits", 1998) with a sensitive attribute, for CPU-sized
    CNN tests. Offline: the data ship with scikit-learn.

    * **s = ink mass group**: the image's total ink (sum of its 64 pixel values) cut at its
      quantiles into ``n_groups`` equal-frequency groups over the whole set (3: ``light``,
      ``medium``, ``heavy``; otherwise ``ink_q1`` … ``ink_qk``). Thick-stroke writers form the
      heavy group; ink mass also depends on the digit (a 1 has little, an 8 or 0 much), so a
      classifier's predictions differ across groups and the fairness penalty has work to do.
      Note that s is a function of the image, so this data set exercises the mechanics and the
      penalty; it is not a realistic privacy scenario (whoever sees an image knows its s).
    * **y**: ``"digit"`` (10 classes), ``"parity"`` (even, odd) or ``"large"`` (0–4, 5–9).
    * **X**: pixels scaled to [0, 1] (``/16``), flattened; ``input_shape = (1, 8, 8)``.

    The split is the reproducible stratified 3:1 split of :mod:`pfair.datasets`; ``attrs_*`` hold
    the raw ``digit`` and ``ink``.
    """
    try:  # lazy: scikit-learn's data sets for this one example only
        from sklearn.datasets import load_digits
    except ImportError:  # pragma: no cover
        raise ImportError("load_digits_fair needs scikit-learn (pip install scikit-learn)") from None
    if isinstance(n_groups, bool) or not isinstance(n_groups, int) or not 2 <= n_groups <= 10:
        raise ValueError(f"n_groups must be an integer in 2..10, got {n_groups!r}")
    if label not in ("digit", "parity", "large"):
        raise ValueError(f"label={label!r} is not supported; choose 'digit', 'parity' or 'large'")
    raw = load_digits()
    images = raw.images.astype(np.float64)  # n × 8 × 8, values 0..16
    digit = raw.target.astype(np.int64)
    ink = images.reshape(len(images), -1).sum(axis=1)
    edges = np.quantile(ink, np.arange(1, n_groups) / n_groups)
    s = np.searchsorted(edges, ink, side="right").astype(np.int64)
    group_names = ["light", "medium", "heavy"] if n_groups == 3 else [f"ink_q{r + 1}" for r in range(n_groups)]
    if label == "digit":
        y, label_names = digit, [str(v) for v in range(10)]
    elif label == "parity":
        y, label_names = digit % 2, ["even", "odd"]
    else:
        y, label_names = (digit >= 5).astype(np.int64), ["0-4", "5-9"]
    train, test = _split_checked(y, s, n_groups, group_names, test_size, seed, "load_digits_fair")
    X = images.reshape(len(images), -1) / 16.0
    attrs = pd.DataFrame({"digit": digit, "ink": ink})
    return ImageDataset(
        name="digits_fair", X_train=X[train], y_train=y[train], s_train=s[train], X_test=X[test], y_test=y[test],
        s_test=s[test], feature_names=[f"px{r}_{c}" for r in range(8) for c in range(8)], label_names=label_names,
        sensitive_name="ink", group_names=group_names, attrs_train=attrs.iloc[train].reset_index(drop=True),
        attrs_test=attrs.iloc[test].reset_index(drop=True), input_shape=(1, 8, 8),
    )
