"""``python -m workers ...`` is ``python -m workers.bootstrap ...``: start one device worker."""
from workers.bootstrap import main

main()
