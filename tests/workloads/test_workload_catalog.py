"""Catalog tests: listing, lookup, parameter validation (fields named), corpus path safety and
admin-registered entry-point workloads."""
import sys
import textwrap

import pytest

from zico_workloads.catalog import (
    ParamsError,
    UnknownWorkload,
    Workload,
    get_workload,
    list_workloads,
    validate_params,
)

REQUIRED_KEYS = {"digits-cnn", "resnet18", "resnet50", "bert-base", "gpt2-small"}


def test_it_lists_the_required_workloads_with_schemas_and_valid_defaults():
    workloads = {w.key: w for w in list_workloads()}
    assert REQUIRED_KEYS <= set(workloads)
    for w in workloads.values():
        assert w.param_schema["type"] == "object"
        assert w.param_schema["additionalProperties"] is False
        # the defaults alone form valid params
        assert validate_params(w.key, {}) == {**w.defaults}
        assert "builder" not in w.to_dict()


def test_it_fills_defaults_and_keeps_user_values():
    out = validate_params("resnet50", {"batch_size": 4, "image_size": 64})
    assert out["batch_size"] == 4 and out["image_size"] == 64
    assert out["optimizer"] == get_workload("resnet50").defaults["optimizer"]


def test_it_names_an_unknown_key():
    with pytest.raises(UnknownWorkload, match="'vgg99'") as exc:
        get_workload("vgg99")
    assert isinstance(exc.value, ValueError)


@pytest.mark.parametrize(
    "params, field",
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": "8"}, "batch_size"),
        ({"batch_size": True}, "batch_size"),
        ({"lr": -1}, "lr"),
        ({"precision": "fp16"}, "precision"),
        ({"optimizer": "lamb"}, "optimizer"),
        ({"seq_len": 100_000}, "seq_len"),
        ({"seq_len": 2048}, "seq_len"),  # beyond GPT-2 small's 1,024 positions
        ({"builder": "os:system"}, "builder"),
        ({"image_size": 32}, "image_size"),  # not a parameter of a language model
        ({"corpus": "/etc/passwd"}, "corpus"),
        ({"corpus": "corpus/../../secret.txt"}, "corpus"),
        ({"corpus": "a\\b.txt"}, "corpus"),
    ],
)
def test_it_rejects_bad_params_naming_the_field(params, field):
    with pytest.raises(ParamsError) as exc:
        validate_params("gpt2-small", params)
    assert exc.value.field == field
    assert field in str(exc.value)


def test_it_rejects_a_non_object():
    with pytest.raises(ParamsError) as exc:
        validate_params("digits-cnn", ["batch_size", 4])
    assert exc.value.field == "params"


def test_corpus_must_exist_under_the_data_dir(tmp_path):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.txt").write_text("hello")
    outside = tmp_path.parent / "outside.txt"
    outside.write_text("x")
    (tmp_path / "corpus" / "link.txt").symlink_to(outside)
    assert validate_params("tiny-lm", {"corpus": "corpus/a.txt"}, data_dir=tmp_path)["corpus"] == "corpus/a.txt"
    with pytest.raises(ParamsError, match="no such file"):
        validate_params("tiny-lm", {"corpus": "corpus/b.txt"}, data_dir=tmp_path)
    with pytest.raises(ParamsError, match="outside the data directory"):
        validate_params("tiny-lm", {"corpus": "corpus/link.txt"}, data_dir=tmp_path)


def test_admins_register_workloads_through_entry_points(tmp_path, monkeypatch):
    (tmp_path / "zico_plugin_demo.py").write_text(textwrap.dedent("""
        from zico_workloads.catalog import Workload
        def make():
            return Workload("demo-mlp", "Demo MLP", "image-classification",
                            {"type": "object", "properties": {"batch_size": {"type": "integer"}},
                             "additionalProperties": False},
                            {"batch_size": 3}, "zico_plugin_demo:build")
        def broken():
            raise RuntimeError("boom")
    """))
    dist = tmp_path / "zico_plugin_demo-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zico-plugin-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[zico.workloads]\ndemo = zico_plugin_demo:make\nbad = zico_plugin_demo:broken\n"
        "clash = zico_plugin_demo:clash\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    keys = [w.key for w in list_workloads()]
    assert "demo-mlp" in keys and keys.count("demo-mlp") == 1
    assert validate_params("demo-mlp", {}) == {"batch_size": 3}
    with pytest.raises(ParamsError):
        validate_params("demo-mlp", {"batch_size": "x"})
    sys.modules.pop("zico_plugin_demo", None)
