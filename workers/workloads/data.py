"""Training data for the catalog workloads: digits images, a byte-level text corpus, synthetic inputs.

Every batch is a pure function of (seed, iteration), so a job resumed from a checkpoint sees the
same data order, and an estimate sees the same shapes as the real run. Batches are built on the
CPU; the training job moves them to its device.

- Images: scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes), resized with
  bilinear interpolation to ``image_size`` and repeated to 3 channels for the ResNets.
- Text: the bytes of a UTF-8 text file (token id = byte value, 0..255), random windows of
  ``seq_len`` tokens. Masked LM follows BERT's recipe (Devlin et al. 2019, sec. 3.1): 15 % of
  positions are predicted; of those 80 % become the mask token, 10 % a random byte, 10 % stay.
- Synthetic: random inputs of the same shapes, for throughput runs.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Callable

import torch

Batch = dict[str, torch.Tensor]
MASK_TOKEN = 256  # first id after the 256 byte values
BYTE_VOCAB = 256


def _generator(seed: int, iteration: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + iteration)


@lru_cache(maxsize=8)
def digits_images(image_size: int, channels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """All digits images resized: X shape (1797, channels, image_size, image_size) float32,
    standardised to mean 0 and unit variance; y shape (1797,) int64 in 0..9."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    if image_size != 8:
        x = torch.nn.functional.interpolate(x, size=(image_size, image_size), mode="bilinear", align_corners=False)
    x = (x - x.mean()) / x.std()
    return x.expand(-1, channels, -1, -1).contiguous(), torch.tensor(d.target, dtype=torch.int64)


def image_batches(params: dict, channels: int, classes: int = 10) -> Callable[[int], Batch]:
    """``make_batch(i) -> {"pixel_values": (B, C, S, S) float32, "labels": (B,) int64}``."""
    bs, size, seed = params["batch_size"], params["image_size"], params["seed"]
    if params["data"] == "synthetic":
        def synthetic(i: int) -> Batch:
            g = _generator(seed, i)
            return {"pixel_values": torch.randn(bs, channels, size, size, generator=g),
                    "labels": torch.randint(0, classes, (bs,), generator=g)}
        return synthetic
    x, y = digits_images(size, channels)

    def real(i: int) -> Batch:
        idx = torch.randint(0, len(y), (bs,), generator=_generator(seed, i)) if bs > len(y) else \
            torch.randperm(len(y), generator=_generator(seed, i))[:bs]
        return {"pixel_values": x[idx], "labels": y[idx]}
    return real


@lru_cache(maxsize=4)
def corpus_tokens(path: str) -> torch.Tensor:
    """The file's bytes as a (n,) uint8 tensor. Raises FileNotFoundError / ValueError if too short."""
    data = Path(path).read_bytes()
    if len(data) < 1024:
        raise ValueError(f"corpus {path}: only {len(data)} bytes; need at least 1024")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def token_batches(params: dict, corpus_path: Path | None, masked: bool, vocab: int) -> Callable[[int], Batch]:
    """``make_batch(i) -> {"input_ids": (B, T) int64, "labels": (B, T) int64}``.

    Causal LM: labels equal the inputs (the model shifts them). Masked LM: labels are -100 where
    nothing is predicted. ``corpus_path`` is None for synthetic data.
    """
    bs, seq, seed = params["batch_size"], params["seq_len"], params["seed"]
    tokens = corpus_tokens(str(corpus_path)) if corpus_path is not None else None
    if tokens is not None and len(tokens) <= seq + 1:
        raise ValueError(f"corpus {corpus_path}: {len(tokens)} bytes is shorter than seq_len {seq}")

    def make(i: int) -> Batch:
        g = _generator(seed, i)
        if tokens is None:
            ids = torch.randint(0, BYTE_VOCAB, (bs, seq), generator=g)
        else:
            starts = torch.randint(0, len(tokens) - seq, (bs,), generator=g)
            ids = torch.stack([tokens[s:s + seq] for s in starts.tolist()]).long()
        if not masked:
            return {"input_ids": ids, "labels": ids.clone()}
        r = torch.rand(bs, seq, generator=g)
        chosen = r < 0.15
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        inputs = ids.clone()
        inputs[chosen & (r < 0.12)] = MASK_TOKEN
        swap = chosen & (r >= 0.12) & (r < 0.135)
        inputs[swap] = torch.randint(0, BYTE_VOCAB, (int(swap.sum()),), generator=g)
        return {"input_ids": inputs, "labels": labels}
    assert vocab > MASK_TOKEN
    return make
