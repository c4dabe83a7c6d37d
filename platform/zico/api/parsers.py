"""The API's JSON body parser: DRF's JSONParser with a nesting-depth limit, so a deeply nested body is a 400.

A body nested ~1000 levels or more made ``json.loads`` raise RecursionError, which DRF does not catch (it
catches ValueError only), so such a request was a 500 before any view code ran. This parser turns it into a
400 "JSON parse error: nesting too deep", and also refuses bodies that parse but nest deeper than
``MAX_JSON_DEPTH`` (code further on — schema validation, JSON encoding for PostgreSQL — recurses too).
"""
from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_JSON_DEPTH = 64  # levels of arrays/objects; no request body of ours needs more than a handful


def json_depth_exceeds(value, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when ``value`` (parsed JSON: dict/list/scalars) nests arrays/objects more than ``limit`` levels.

    Walks iteratively (no recursion), so any depth can be checked.
    """
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class DepthLimitedJSONParser(JSONParser):
    """``rest_framework.parsers.JSONParser`` that raises ParseError (400) for bodies nested too deep."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error: nesting too deep") from None
        if json_depth_exceeds(data):
            raise ParseError(f"JSON parse error: nesting too deep (more than {MAX_JSON_DEPTH} levels)")
        return data
