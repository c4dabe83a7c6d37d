"""Model builders for the catalog: each turns validated params into a model, a batch source and a loss.

Models come from HF transformers configs with random initialisation (no weight downloads):
ResNet-18/-50 (``ResNetConfig``, He et al. 2016 layouts), BERT-base (``BertConfig`` defaults: 12
layers, hidden 768, vocab 30,522), GPT-2 small (``GPT2Config`` defaults: 12 layers, hidden 768,
vocab 50,257, 1,024 positions). The text models keep their real vocabulary sizes, so memory matches
the published models, but read byte-level tokens (ids 0..256). Two small models serve fast tests.

A builder is ``build_x(params, data_dir) -> WorkloadParts``; params were validated by the catalog.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from zico_workloads import data
from zico_workloads.catalog import ParamsError
from zico_workloads.corpus import DEFAULT_CORPUS, ensure_corpus


@dataclass
class WorkloadParts:
    """What a training job needs from a workload.

    model: the module (on CPU, fp32; the job moves it).
    make_batch: ``i -> dict of CPU tensors`` for iteration i (deterministic in seed and i).
    compute_loss: ``(model, batch) -> (loss, stats)``; ``stats`` holds ``correct``/``count``
        tensors for classifiers, nothing for LMs.
    """

    model: nn.Module
    make_batch: Callable[[int], data.Batch]
    compute_loss: Callable[[nn.Module, data.Batch], tuple[torch.Tensor, dict[str, torch.Tensor]]]


def _classify(logits_of: Callable[[nn.Module, torch.Tensor], torch.Tensor]):
    def compute(model: nn.Module, batch: data.Batch):
        logits = logits_of(model, batch["pixel_values"])
        loss = nn.functional.cross_entropy(logits.float(), batch["labels"])
        correct = (logits.detach().argmax(-1) == batch["labels"]).sum()
        return loss, {"correct": correct, "count": torch.tensor(len(batch["labels"]))}
    return compute


def _lm_loss(model: nn.Module, batch: data.Batch):
    return model(input_ids=batch["input_ids"], labels=batch["labels"]).loss, {}


def preload_data(params: dict, data_dir: str | Path | None) -> None:
    """Load (and cache) the workload's dataset before the job is built; see ``data.preload``."""
    data.preload(params, _corpus_path(params, data_dir) if "corpus" in params else None)


def _corpus_path(params: dict, data_dir: str | Path | None) -> Path | None:
    if params["data"] == "synthetic":
        return None
    if data_dir is None:
        raise ParamsError("corpus", "real text data needs a data directory (or use data='synthetic')")
    if params["corpus"] == DEFAULT_CORPUS:
        return ensure_corpus(data_dir)
    root = Path(data_dir).resolve()
    path = (root / params["corpus"]).resolve()
    if root not in path.parents:  # checked again here: the data directory may have changed since submission
        raise ParamsError("corpus", "resolves outside the data directory")
    if not path.is_file():
        raise ParamsError("corpus", f"no such file {params['corpus']!r} under the data directory")
    return path


def _check_seq(params: dict, limit: int, name: str) -> None:
    if params["seq_len"] > limit:
        raise ParamsError("seq_len", f"{params['seq_len']} exceeds {name}'s {limit} positions")


# -- image classifiers ---------------------------------------------------------------------
class DigitsCNN(nn.Sequential):
    """conv(1->16, 3x3) - ReLU - maxpool 2 - conv(16->32, 3x3) - ReLU - maxpool 2 - linear(32*(S/4)^2 -> 10)
    for S x S single-channel images."""

    def __init__(self, image_size: int) -> None:
        side = image_size // 4
        super().__init__(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(32 * side * side, 10),
        )


def build_digits_cnn(params: dict, data_dir=None) -> WorkloadParts:
    return WorkloadParts(DigitsCNN(params["image_size"]), data.image_batches(params, channels=1),
                         _classify(lambda m, x: m(x)))


def _resnet(params: dict, depths: list[int], layer_type: str, hidden: list[int]) -> WorkloadParts:
    from transformers import ResNetConfig, ResNetForImageClassification

    cfg = ResNetConfig(depths=depths, layer_type=layer_type, hidden_sizes=hidden, embedding_size=64, num_labels=10)
    model = ResNetForImageClassification(cfg)
    return WorkloadParts(model, data.image_batches(params, channels=3),
                         _classify(lambda m, x: m(pixel_values=x).logits))


def build_resnet18(params: dict, data_dir=None) -> WorkloadParts:
    return _resnet(params, [2, 2, 2, 2], "basic", [64, 128, 256, 512])


def build_resnet50(params: dict, data_dir=None) -> WorkloadParts:
    return _resnet(params, [3, 4, 6, 3], "bottleneck", [256, 512, 1024, 2048])


# -- language models ---------------------------------------------------------------------
def build_bert_base(params: dict, data_dir=None) -> WorkloadParts:
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig()
    _check_seq(params, cfg.max_position_embeddings, "BERT-base")
    return WorkloadParts(BertForMaskedLM(cfg),
                         data.token_batches(params, _corpus_path(params, data_dir), True, cfg.vocab_size),
                         _lm_loss)


def _gpt2(params: dict, data_dir, cfg) -> WorkloadParts:
    from transformers import GPT2LMHeadModel

    _check_seq(params, cfg.n_positions, "this GPT-2")
    return WorkloadParts(GPT2LMHeadModel(cfg),
                         data.token_batches(params, _corpus_path(params, data_dir), False, cfg.vocab_size),
                         _lm_loss)


def build_gpt2_small(params: dict, data_dir=None) -> WorkloadParts:
    from transformers import GPT2Config

    return _gpt2(params, data_dir, GPT2Config())


def build_tiny_lm(params: dict, data_dir=None) -> WorkloadParts:
    from transformers import GPT2Config

    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=data.MASK_TOKEN + 1, bos_token_id=0, eos_token_id=0,
                     n_positions=max(256, params["seq_len"]))
    return _gpt2(params, data_dir, cfg)
