"""Training workloads and the curve sources both sides use, importing neither Django, Celery nor ``workers``.

* :mod:`.catalog` — the torch-free catalog: workloads, their JSON schemas and defaults, plugins by entry point
  (the web form, the REST API and the worker validate job params with it);
* :mod:`.corpus` — the built-in text corpus;
* :mod:`.models`, :mod:`.data`, :mod:`.training` — the torch-side models, data and training-job API (these import
  torch; the catalog and the estimate cache's reads do not);
* :mod:`.curves` — the CPU estimate with fake tensors and its cache, the snapshot import and the trace -> curve step.
"""
