"""The workload catalog: which training workloads exist and which parameters each accepts.

Torch-free and Django-free: the web side (forms, REST API) validates job params with this module,
and the worker side builds the job from the same entries (``zico_workloads.training``).

A workload is a *description*: key, title, task, a JSON Schema for its parameters and their
defaults, plus ``builder``, the dotted ``"module:function"`` of the torch-side factory that
builds its model and data. Parameters are plain JSON values and can never name code: the
schema admits no extra keys, enumerations fix every choice, and a corpus path must be
relative and resolve under the configured data directory.

Admins (not tenants) may register further workloads through the Python entry-point group
``zico.workloads``: each entry point resolves to a :class:`Workload` or a zero-argument callable
returning one (see docs/curves.md, "Registering a workload").
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "zico.workloads"
TASKS = ("image-classification", "masked-lm", "causal-lm")


class UnknownWorkload(ValueError):
    """No workload has this key; the message names the key and the known keys."""

    def __init__(self, key: object):
        self.key = key
        super().__init__(f"unknown workload {key!r}; known: {', '.join(w.key for w in list_workloads())}")


class ParamsError(ValueError):
    """Job params are invalid. ``field`` names the offending parameter (or ``"params"``)."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class Workload:
    """One catalog entry.

    Attributes:
        key: stable identifier used in job specs, e.g. ``"resnet50"``.
        title: human name for forms and pages.
        task: one of ``TASKS``.
        param_schema: JSON Schema (draft 2020-12) of the params object; ``additionalProperties``
            is false so a typo is an error, not silently ignored.
        defaults: values filled in for params the user leaves out.
        builder: ``"module:function"`` of the torch-side factory (never taken from user input).
        estimate_corrections: per device type (``"cpu"``, ``"cuda"``), ``{"scale": s,
            "offset_bytes": b}`` applied to this workload's fake-tensor estimates
            (``bytes' = s * bytes + b``), once measured against real runs; see docs/curves.md.
    """

    key: str
    title: str
    task: str
    param_schema: dict[str, Any]
    defaults: dict[str, Any]
    builder: str
    description: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)
    estimate_corrections: dict[str, dict[str, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description for the API and the web form (no builder path)."""
        return {
            "key": self.key,
            "title": self.title,
            "task": self.task,
            "description": self.description,
            "param_schema": copy.deepcopy(self.param_schema),
            "defaults": dict(self.defaults),
        }


# -- parameter schemas --------------------------------------------------------------------
_COMMON = {
    "batch_size": {"type": "integer", "minimum": 1, "maximum": 4096, "description": "samples per iteration"},
    "iterations": {"type": "integer", "minimum": 1, "maximum": 10_000_000, "description": "training iterations"},
    "lr": {"type": "number", "exclusiveMinimum": 0, "maximum": 10, "description": "learning rate"},
    "precision": {"enum": ["fp32", "bf16"], "description": "fp32, or bf16 autocast around the forward pass"},
    "optimizer": {"enum": ["sgd", "adamw"], "description": "SGD (momentum 0.9) or AdamW"},
    "seed": {"type": "integer", "minimum": 0, "maximum": 2**31 - 1, "description": "random seed"},
    "data": {"enum": ["real", "synthetic"], "description": "real data, or random inputs for throughput runs"},
}
_IMAGE = {"image_size": {"type": "integer", "minimum": 8, "maximum": 1024, "description": "square side, pixels"}}
_TEXT = {
    "seq_len": {"type": "integer", "minimum": 8, "maximum": 8192, "description": "tokens per sample"},
    "corpus": {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "description": "text file, relative to the data directory",
    },
}


def _schema(extra: dict[str, Any], title: str) -> dict[str, Any]:
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        "type": "object",
        "properties": {**_COMMON, **extra},
        "additionalProperties": False,
    }


def _image(key: str, title: str, builder: str, defaults: dict[str, Any], description: str) -> Workload:
    base = {"iterations": 100, "lr": 0.1, "precision": "fp32", "optimizer": "sgd", "seed": 0, "data": "real"}
    return Workload(key, title, "image-classification", _schema(_IMAGE, title), {**base, **defaults},
                    builder, description)


def _text(key: str, title: str, task: str, builder: str, defaults: dict[str, Any], description: str,
          max_seq_len: int = 8192) -> Workload:
    text = {**_TEXT, "seq_len": {**_TEXT["seq_len"], "maximum": max_seq_len}}
    base = {"iterations": 100, "lr": 1e-3, "precision": "fp32", "optimizer": "adamw", "seed": 0,
            "data": "real", "corpus": "corpus/python-docs.txt"}
    return Workload(key, title, task, _schema(text, title), {**base, **defaults}, builder, description)


_M = "zico_workloads.models"
_BUILTIN: tuple[Workload, ...] = (
    _image("digits-cnn", "Digits CNN (small, fast tests)", f"{_M}:build_digits_cnn",
           {"batch_size": 64, "image_size": 16, "iterations": 150, "lr": 0.05},
           "A two-convolution network on scikit-learn's 8x8 handwritten digits, resized."),
    _image("resnet18", "ResNet-18", f"{_M}:build_resnet18",
           {"batch_size": 32, "image_size": 224},
           "ResNet-18 (HF transformers ResNetConfig, random init) on digits images resized to RGB."),
    _image("resnet50", "ResNet-50", f"{_M}:build_resnet50",
           {"batch_size": 32, "image_size": 224},
           "ResNet-50 (HF transformers ResNetConfig, random init) on digits images resized to RGB."),
    _text("bert-base", "BERT-base masked LM", "masked-lm", f"{_M}:build_bert_base",
          {"batch_size": 8, "seq_len": 128, "lr": 1e-4},
          "BERT-base (110M parameters, random init) masked-LM on a byte-level text corpus.", 512),
    _text("gpt2-small", "GPT-2 small causal LM", "causal-lm", f"{_M}:build_gpt2_small",
          {"batch_size": 8, "seq_len": 256, "lr": 3e-4},
          "GPT-2 small (124M parameters, random init) causal LM on a byte-level text corpus.", 1024),
    _text("tiny-lm", "Tiny GPT causal LM (small, fast tests)", "causal-lm", f"{_M}:build_tiny_lm",
          {"batch_size": 16, "seq_len": 64, "lr": 3e-3, "iterations": 60},
          "A 2-layer GPT-2-style model on a byte-level text corpus; learns in seconds on CPU."),
)


def _plugin_workloads() -> list[Workload]:
    """Workloads registered by admins under the ``zico.workloads`` entry-point group.

    A plugin that fails to load or returns something else than a Workload is logged and
    skipped, so one broken plugin cannot take the catalog down.
    """
    found: list[Workload] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
            if callable(obj) and not isinstance(obj, Workload):
                obj = obj()
        except Exception:  # noqa: BLE001 - a plugin's own error must not break the catalog
            log.exception("workload entry point %s failed to load; skipped", ep.name)
            continue
        if not isinstance(obj, Workload):
            log.error("workload entry point %s gave %s, not a Workload; skipped", ep.name, type(obj).__name__)
            continue
        found.append(obj)
    return found


def list_workloads() -> list[Workload]:
    """Built-in workloads, then admin-registered ones; a plugin may not replace a built-in key."""
    out = list(_BUILTIN)
    seen = {w.key for w in out}
    for w in _plugin_workloads():
        if w.key in seen:
            log.error("workload entry point reuses key %r; skipped", w.key)
            continue
        seen.add(w.key)
        out.append(w)
    return out


def get_workload(key: str) -> Workload:
    """The workload with this key. Raises UnknownWorkload (a ValueError) naming the key."""
    for w in list_workloads():
        if w.key == key:
            return w
    raise UnknownWorkload(key)


def validate_params(key: str, params: dict[str, Any] | None, data_dir: str | Path | None = None) -> dict[str, Any]:
    """Check ``params`` against the workload's schema; return a new dict with defaults filled in
    and whole-number floats of integer parameters (``8.0``, JSON's ``1e2``) made ints.

    Args:
        key: a catalog key.
        params: the user's JSON object (``None`` means all defaults).
        data_dir: the configured data directory; when given, a ``corpus`` must exist under it.
    Raises:
        UnknownWorkload: ``key`` is not in the catalog.
        ParamsError: with ``.field`` the offending parameter (``"params"`` when the object
            itself is wrong) and a human message.
    """
    workload = get_workload(key)
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ParamsError("params", f"expected a JSON object, got {type(params).__name__}")
    props = workload.param_schema.get("properties", {})
    for name in params:
        if name not in props:
            raise ParamsError(str(name), f"unknown parameter for {key}; allowed: {', '.join(sorted(props))}")
    merged = {**workload.defaults, **params}
    validator = jsonschema.Draft202012Validator(workload.param_schema)
    errors = sorted(validator.iter_errors(merged), key=lambda e: (list(e.path), e.message))
    if errors:
        err = errors[0]
        name = str(err.path[0]) if err.path else "params"
        raise ParamsError(name, _user_message(err))
    # JSON Schema counts 8.0 as an integer; the job needs an int (slicing, tensor sizes, seeds)
    for name, spec in props.items():
        if spec.get("type") == "integer" and isinstance(merged.get(name), float):
            merged[name] = int(merged[name])
    if "corpus" in merged:
        merged["corpus"] = _check_corpus(merged["corpus"], data_dir)
    return merged


_JSON_TYPE_WORDS = {"integer": "an integer", "number": "a number", "string": "a string", "boolean": "true or false",
                   "object": "a JSON object", "array": "a JSON array", "null": "null"}


def _json_text(value: Any, limit: int = 40) -> str:
    """``value`` as the user wrote it in JSON (``true``, ``null``, ``"big"``), shortened to ``limit`` chars."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _user_message(err: jsonschema.ValidationError) -> str:
    """A jsonschema error phrased for users, in JSON words: "expected an integer, got true" rather than
    jsonschema's Python-worded "True is not of type 'integer'"; other validators keep jsonschema's message."""
    got = _json_text(err.instance)
    if err.validator == "type":
        types = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        return f"expected {' or '.join(_JSON_TYPE_WORDS.get(t, t) for t in types)}, got {got}"
    if err.validator == "enum":
        return f"expected one of {', '.join(_json_text(v) for v in err.validator_value)}; got {got}"
    bounds = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}
    if err.validator in bounds:
        return f"must be {bounds[err.validator]} {err.validator_value}, got {got}"
    if err.validator in ("minLength", "maxLength"):
        word = "at least" if err.validator == "minLength" else "at most"
        return f"must be {word} {err.validator_value} characters long, got {len(err.instance)}"
    return err.message


def _check_corpus(value: str, data_dir: str | Path | None) -> str:
    """A corpus path is relative, stays under the data directory, and (if known) exists there."""
    if "\\" in value or "\x00" in value:
        raise ParamsError("corpus", "use '/' separators and no control characters")
    p = PurePosixPath(value)
    if p.is_absolute() or ".." in p.parts:
        raise ParamsError("corpus", "must be a relative path inside the data directory (no '/' start, no '..')")
    if data_dir is not None:
        root = Path(data_dir).resolve()
        full = (root / p).resolve()
        if root != full and root not in full.parents:
            raise ParamsError("corpus", "resolves outside the data directory")
        if not full.is_file():
            raise ParamsError("corpus", f"no such file {value!r} under the data directory")
    return str(p)
