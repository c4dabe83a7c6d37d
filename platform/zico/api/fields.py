"""Serializer fields of the API that are stricter than DRF's: an integer field that takes JSON integers only, a
seconds field that takes positive JSON numbers only, and a JSON field whose form-field text is parsed under the
body's nesting limit.

DRF's ``IntegerField`` coerces: ``"1000"`` and ``1e3`` (a JSON float) both become 1000, and a value beyond
Python's float range (``1e30``) reads "A valid integer is required.". Byte counts and priorities are
integers; a string or a float in a JSON body is a client bug worth naming.
"""
from __future__ import annotations

import json
import math

from django.http import QueryDict
from rest_framework import serializers

from zico_contracts.oom import readable_reason

INT64_MAX = 2**63 - 1  # PostgreSQL bigint, the column type of every byte count


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (not a string, float or boolean); DRF's min_value/max_value checks apply as usual.

    Form-encoded bodies (QueryDict) carry only strings, so there a string of decimal digits is read as usual.
    Errors name the value's JSON type: "expected an integer, got the string '1000'", "... got the number
    1000.0"; a number no bigint can hold (integer or float, e.g. 1e30) reads "out of range", naming the field's own
    bound when it has one ("out of range: 1e+20 is more than 100").
    """

    def _from_form(self) -> bool:
        return isinstance(getattr(self.root, "initial_data", None), QueryDict)

    def to_internal_value(self, data):
        if isinstance(data, bool):
            raise serializers.ValidationError(f"expected an integer, got {str(data).lower()}")
        if isinstance(data, (int, float)) and not -INT64_MAX - 1 <= data <= INT64_MAX:
            if self.max_value is not None and data > self.max_value:  # the field's own bound, not the int64 one
                raise serializers.ValidationError(f"out of range: {data:g} is more than {self.max_value}")
            if self.min_value is not None and data < self.min_value:
                raise serializers.ValidationError(f"out of range: {data:g} is less than {self.min_value}")
            raise serializers.ValidationError(f"out of range: {data:g} does not fit a 64-bit integer "
                                              f"(at most {INT64_MAX})")
        if isinstance(data, float):
            raise serializers.ValidationError(f"expected an integer, got the number {data!r}")
        if isinstance(data, str) and self._from_form():
            return super().to_internal_value(data)
        if not isinstance(data, int):
            kind = {dict: "object", list: "array"}.get(type(data), type(data).__name__)
            what = f"the string {data[:40]!r}" if isinstance(data, str) else f"a JSON {kind}"
            raise serializers.ValidationError(f"expected an integer, got {what}")
        return super().to_internal_value(data)


class SecondsField(serializers.FloatField):
    """A positive, finite JSON number of seconds (an integer or a float; not a string or boolean; a string of
    digits in a form body). Errors name what came: "expected a positive number of seconds, got the string '3'",
    "... got -1"."""

    def to_internal_value(self, data):
        if isinstance(data, str) and isinstance(getattr(self.root, "initial_data", None), QueryDict):
            try:
                data = float(data)
            except ValueError:
                pass
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            kind = {dict: "an object", list: "an array", bool: str(data).lower()}.get(type(data))
            what = f"the string {data[:40]!r}" if isinstance(data, str) else kind or type(data).__name__
            raise serializers.ValidationError(f"expected a positive number of seconds, got {what}")
        if not math.isfinite(data) or data <= 0 or data > INT64_MAX:
            raise serializers.ValidationError(f"expected a positive number of seconds, got {data!r}")
        return float(data)


class ReasonField(serializers.CharField):
    """A stored reason for people (read-only): an allocator out-of-memory report kept as a Python dict repr,
    ``(allocator: {...})`` (how device workers wrote it), is given as a sentence (zico_contracts.oom)."""

    def to_representation(self, value):
        return readable_reason(super().to_representation(value))


class FormJSONField(serializers.JSONField):
    """A JSON value; in a multipart or form body, whose fields are text, it is JSON text, parsed here under the JSON
    body's nesting limit (zico.api.parsers): text nested too deep is a 400 naming the field, where DRF's own
    parse raised RecursionError (a 500)."""

    def to_internal_value(self, data):
        if not getattr(data, "is_json_string", False):  # DRF marks the text of a form field so
            return super().to_internal_value(data)
        from .parsers import MAX_JSON_DEPTH, json_depth_exceeds

        try:
            value = json.loads(data)
        except RecursionError:
            raise serializers.ValidationError("not valid JSON: nesting too deep") from None
        except ValueError as exc:
            raise serializers.ValidationError(f"not valid JSON: {exc}") from None
        if json_depth_exceeds(value):
            raise serializers.ValidationError(f"not valid JSON: nesting too deep (more than {MAX_JSON_DEPTH} levels)")
        return value
