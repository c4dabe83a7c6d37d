"""Training data for the catalog workloads: digits images, a byte-level text corpus, synthetic inputs.

Every batch is a pure function of (seed, iteration), so a job resumed from a checkpoint sees the
same data order. Batches are built with shape-static tensor ops only (no ``.tolist()``, no boolean
indexing), so the fake-tensor estimate runs the very same code and sees the same allocations. Batches are built on the
CPU; the training job moves them to its device.

- Images: scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes), resized with
  bilinear interpolation to ``image_size`` batch by batch and repeated to 3 channels for the ResNets.
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


def _real_tensors():
    """Context in which tensors are real even inside the estimate's FakeTensorMode, so cached
    datasets are real data that later real runs in the same process can use."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    return unset_fake_temporarily()


def _generator(seed: int, iteration: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + iteration)


@lru_cache(maxsize=1)
def digits_images() -> tuple[torch.Tensor, torch.Tensor]:
    """All digits images, standardised to mean 0 and unit variance: X shape (1797, 1, 8, 8)
    float32, y shape (1797,) int64 in 0..9 (about 470 KB; batches are resized on the fly)."""
    images, target = _digits_arrays()
    with _real_tensors():
        x = torch.tensor(images, dtype=torch.float32).unsqueeze(1)
        return (x - x.mean()) / x.std(), torch.tensor(target, dtype=torch.int64)


def _digits_arrays():
    """Note [Digits without importing scikit-learn]
    ``sklearn.datasets.load_digits`` reads the CSV that scikit-learn bundles
    (``sklearn/datasets/data/digits.csv.gz``: 1,797 rows of 64 pixels and the label), but importing
    scikit-learn pulls in scipy and its array-API layer, once the largest single cost of a ResNet
    estimate (docs/benchmarks.md, "The CPU estimate: how fast"). This reads the same file the same way (gzip, ``np.loadtxt``,
    comma-delimited; images (1797, 8, 8) float64, target (1797,) int) without executing the
    package; tests/workloads checks the arrays equal ``load_digits()``'s. Where the file is not
    where scikit-learn keeps it, ``load_digits`` is called after all."""
    import gzip
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")  # locates the package; does not import it
    roots = list(spec.submodule_search_locations or []) if spec else []
    csv = next((p for p in (Path(r) / "datasets" / "data" / "digits.csv.gz" for r in roots) if p.is_file()), None)
    if csv is None:
        from sklearn.datasets import load_digits

        d = load_digits()
        return d.images, d.target
    with gzip.open(csv, mode="rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int, copy=False)


def image_batches(params: dict, channels: int, classes: int = 10) -> Callable[[int], Batch]:
    """``make_batch(i) -> {"pixel_values": (B, C, S, S) float32, "labels": (B,) int64}``."""
    bs, size, seed = params["batch_size"], params["image_size"], params["seed"]
    if params["data"] == "synthetic":
        def synthetic(i: int) -> Batch:
            g = _generator(seed, i)
            return {"pixel_values": torch.randn(bs, channels, size, size, generator=g),
                    "labels": torch.randint(0, classes, (bs,), generator=g)}
        return synthetic
    x, y = digits_images()

    def real(i: int) -> Batch:
        idx = torch.randint(0, len(y), (bs,), generator=_generator(seed, i)) if bs > len(y) else \
            torch.randperm(len(y), generator=_generator(seed, i))[:bs]
        images = x[idx]
        if size != 8:
            images = torch.nn.functional.interpolate(images, size=(size, size), mode="bilinear", align_corners=False)
        return {"pixel_values": images.expand(-1, channels, -1, -1).contiguous(), "labels": y[idx]}
    return real


@lru_cache(maxsize=4)
def corpus_tokens(path: str) -> torch.Tensor:
    """The file's bytes as a (n,) uint8 tensor. Raises FileNotFoundError / ValueError if too short."""
    data = Path(path).read_bytes()
    if len(data) < 1024:
        raise ValueError(f"corpus {path}: only {len(data)} bytes; need at least 1024")
    with _real_tensors():
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
            starts = torch.randint(0, len(tokens) - seq, (bs, 1), generator=g)
            ids = tokens[starts + torch.arange(seq)].long()  # (B, T) windows; no data-dependent shapes
        if not masked:
            return {"input_ids": ids, "labels": ids.clone()}
        r = torch.rand(bs, seq, generator=g)
        chosen = r < 0.15
        labels = torch.where(chosen, ids, torch.full_like(ids, -100))
        inputs = torch.where(r < 0.12, torch.full_like(ids, MASK_TOKEN), ids)
        swap = chosen & (r >= 0.12) & (r < 0.135)
        inputs = torch.where(swap, torch.randint(0, BYTE_VOCAB, (bs, seq), generator=g), inputs)
        return {"input_ids": inputs, "labels": labels}
    assert vocab > MASK_TOKEN
    return make


def preload(params: dict, corpus_path: Path | None) -> None:
    """Load the cached datasets a workload's batches read (digits images, corpus bytes) now, so a
    profiling run can do it before binding the job to the allocator."""
    if params.get("data") != "real":
        return
    if "image_size" in params:
        digits_images()
    if corpus_path is not None:
        corpus_tokens(str(corpus_path))
