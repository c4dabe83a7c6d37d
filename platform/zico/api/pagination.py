"""Pagination of every API list: DRF's limit/offset, with both numbers bounded.

Without bounds a request such as ``?offset=99999999999999999999`` reached PostgreSQL as an OFFSET
beyond bigint and failed with a 500 (found by tests/fuzz). Now ``limit`` is at most ``max_limit`` and an
``offset`` past ``MAX_OFFSET`` is treated as ``MAX_OFFSET``: an empty page, as DRF answers any offset
past the end.
"""
from rest_framework.pagination import LimitOffsetPagination

MAX_OFFSET = 2**53  # far beyond any table here; well inside PostgreSQL's bigint OFFSET


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    max_limit = 1000  # rows per page at most (the default page is settings.REST_FRAMEWORK["PAGE_SIZE"])

    def get_offset(self, request) -> int:
        return min(super().get_offset(request), MAX_OFFSET)
