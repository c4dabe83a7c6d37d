"""ParamsError messages speak JSON to users ("expected an integer, got true"), not jsonschema's Python words
("True is not of type 'integer'")."""
import pytest

from zico_workloads.catalog import ParamsError, validate_params


@pytest.mark.parametrize("params, field, message", [
    ({"batch_size": True}, "batch_size", "expected an integer, got true"),
    ({"batch_size": "8"}, "batch_size", 'expected an integer, got "8"'),
    ({"batch_size": None}, "batch_size", "expected an integer, got null"),
    ({"batch_size": [8]}, "batch_size", "expected an integer, got [8]"),
    ({"lr": "fast"}, "lr", 'expected a number, got "fast"'),
    ({"batch_size": 0}, "batch_size", "must be >= 1, got 0"),
    ({"lr": 0}, "lr", "must be > 0, got 0"),
    ({"precision": "fp16"}, "precision", 'expected one of "fp32", "bf16"; got "fp16"'),
])
def test_a_type_or_range_error_is_phrased_in_json_words(params, field, message):
    with pytest.raises(ParamsError) as exc:
        validate_params("digits-cnn", params)
    assert exc.value.field == field
    assert exc.value.message == message
    assert "True" not in str(exc.value) and "None" not in str(exc.value)


def test_a_whole_number_float_is_taken_as_the_integer_it_is_and_a_fraction_refused():
    params = validate_params("tiny-lm", {"batch_size": 4.0, "seq_len": 1e2, "seed": 7.0, "lr": 1.0})
    assert (params["batch_size"], params["seq_len"], params["seed"]) == (4, 100, 7)
    assert all(type(params[k]) is int for k in ("batch_size", "seq_len", "seed"))
    assert type(params["lr"]) is float  # a number parameter stays what it was
    with pytest.raises(ParamsError) as exc:
        validate_params("tiny-lm", {"batch_size": 4.5})
    assert exc.value.field == "batch_size"
