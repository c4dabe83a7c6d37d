"""``manage.py`` commands of the jobs app (``curve``)."""
