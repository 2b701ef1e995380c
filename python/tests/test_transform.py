"""Train-time transforms from Python: fixed-shape crop batches, the same crops however the batches
are spread over DataLoader workers, and clear errors for bad transform options."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Dict

import numpy as np
import pytest
import torch

import shardtool
import shardtool.torch

from conftest import samples


def _by_key(batches: object) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for b in batches:  # type: ignore[attr-defined]
        img = np.asarray(b["image"])
        for i, k in enumerate(b["key"]):
            assert k not in out, f"{k} twice"
            out[k] = hashlib.sha256(img[i].tobytes()).hexdigest()
    return out


@pytest.mark.parametrize("kind", ["tar_var", "packed"])
def test_crops_make_fixed_batches(datasets: Dict[str, Path], kind: str) -> None:
    loader = shardtool.Loader(
        datasets[kind], batch_size=8, transform="random-resized-crop:12", flip=True, output="numpy"
    )
    n = 0
    for b in loader:
        img = b["image"]
        assert isinstance(img, np.ndarray)
        assert img.dtype == np.uint8 and img.shape == (len(b["key"]), 12, 12, 3)
        n += len(b["key"])
    assert n == samples(datasets[kind])


def test_center_crop_is_deterministic_and_differs_from_random(datasets: Dict[str, Path]) -> None:
    def run(transform: str, epoch: int) -> Dict[str, str]:
        return _by_key(
            shardtool.Loader(
                datasets["tar_var"], batch_size=8, transform=transform, epoch=epoch, output="numpy"
            )
        )

    centre = run("center-crop:16", 0)
    assert run("center-crop:16", 1) == centre  # no randomness in an evaluation crop
    rrc0 = run("random-resized-crop:16", 0)
    assert run("random-resized-crop:16", 0) == rrc0
    assert run("random-resized-crop:16", 1) != rrc0  # a new epoch draws new crops
    assert rrc0 != centre


def test_dataloader_workers_get_the_same_crops(datasets: Dict[str, Path]) -> None:
    opts = dict(batch_size=4, seed=3, transform="random-resized-crop:16", flip=True)
    direct = _by_key(shardtool.Loader(datasets["tar_var"], output="numpy", workers=1, **opts))
    ds = shardtool.torch.IterableDataset(shardtool.Loader(datasets["tar_var"], **opts))
    dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert _by_key(dl) == direct


def _sizes(dataset: Path, **options: object) -> Dict[str, tuple]:
    return {
        k: tuple(img.shape[:2])
        for b in shardtool.Loader(dataset, batch_size=8, output="numpy", **options)  # type: ignore[arg-type]
        for k, img in zip(b["key"], b["image"])
    }


def test_resize_gives_the_shorter_side_and_truncates_the_longer_as_torchvision(
    datasets: Dict[str, Path],
) -> None:
    stored = _sizes(datasets["tar_var"])
    resized = _sizes(datasets["tar_var"], transform="resize:10")
    assert resized.keys() == stored.keys()
    halves = 0
    for k, (h, w) in stored.items():
        # torchvision's Resize(10): the longer side is int(10 * long / short), truncated.
        short, long = min(h, w), max(h, w)
        want = (10, int(10 * long / short)) if h <= w else (int(10 * long / short), 10)
        assert resized[k] == want, (k, h, w)
        halves += (10 * long / short) % 1 >= 0.5
    assert halves, "no size where rounding and truncating differ"


def test_max_pixels_caps_what_a_record_decodes_to(datasets: Dict[str, Path]) -> None:
    stored = _sizes(datasets["tar_var"])
    largest = max(h * w for h, w in stored.values())
    assert _sizes(datasets["tar_var"], max_pixels=largest) == stored
    with pytest.raises(shardtool.CorruptRecordError, match=f"limit of {largest - 1} pixels"):
        _sizes(datasets["tar_var"], max_pixels=largest - 1)
    kept = _sizes(datasets["tar_var"], max_pixels=largest - 1, skip_corrupt=True)
    assert kept == {k: s for k, s in stored.items() if s[0] * s[1] < largest}
    with pytest.raises(ValueError, match="max_pixels"):
        shardtool.Loader(datasets["tar_var"], batch_size=4, max_pixels=0)


@pytest.mark.parametrize(
    "options, says",
    [
        (dict(transform="random-resized-crop"), "needs a size"),
        (dict(transform="rotate:3"), "expected none"),
        (dict(transform="center-crop:8,ratio=3"), "(0, 1]"),
        (dict(flip=True), "flip needs a crop"),
        (dict(decode=False, transform="center-crop:8"), "decode=False"),
    ],
)
def test_bad_transforms_raise_value_error(
    datasets: Dict[str, Path], options: Dict[str, object], says: str
) -> None:
    with pytest.raises(ValueError, match=None) as e:
        next(iter(shardtool.Loader(datasets["tar"], batch_size=4, **options)))  # type: ignore[arg-type]
    assert says in str(e.value)


def test_transform_must_be_a_string(datasets: Dict[str, Path]) -> None:
    with pytest.raises(TypeError):
        shardtool.Loader(datasets["tar"], batch_size=4, transform=224)  # type: ignore[arg-type]


def test_crop_boxes_and_flips_come_with_the_batch(datasets: Dict[str, Path]) -> None:
    ds = datasets["tar_var"]
    stored = _sizes(ds)

    def run(**options: object) -> Dict[str, tuple]:
        return {
            k: (img, box, flipped)
            for b in shardtool.Loader(ds, batch_size=8, output="numpy", transform="random-resized-crop:12", **options)  # type: ignore[arg-type]
            for k, img, box, flipped in zip(b["key"], b["image"], b["crop_box"], b["crop_flipped"])
        }

    plain, mirrored = run(), run(flip=True)
    assert plain.keys() == mirrored.keys() == stored.keys()
    assert not any(v[2] for v in plain.values())
    assert 0 < sum(bool(v[2]) for v in mirrored.values()) < len(mirrored)
    for k, (img, box, flipped) in mirrored.items():
        h, w = stored[k]
        x, y, bw, bh = box.tolist()
        assert 0 <= x and 0 <= y and x + bw <= w + 1e-3 and y + bh <= h + 1e-3, (k, box, h, w)
        # The flip is drawn apart from the box: the same box, and the image mirrored where
        # crop_flipped says so.
        np.testing.assert_array_equal(plain[k][1], box)
        np.testing.assert_array_equal(img, plain[k][0][:, ::-1] if flipped else plain[k][0])
    # An evaluation crop's box is the centred square, as torch tensors for output="torch".
    for b in shardtool.Loader(ds, batch_size=8, transform="center-crop:12,ratio=0.5"):
        assert b["crop_box"].dtype == torch.float32 and b["crop_box"].shape == (len(b["key"]), 4)
        assert b["crop_flipped"].dtype == torch.bool and not b["crop_flipped"].any()
        for k, box in zip(b["key"], b["crop_box"].tolist()):
            h, w = stored[k]
            side = 0.5 * min(h, w)
            assert box == pytest.approx([(w - side) / 2, (h - side) / 2, side, side])
    # Without a crop there are no boxes.
    assert "crop_box" not in next(iter(shardtool.Loader(ds, batch_size=8, transform="resize:10")))
