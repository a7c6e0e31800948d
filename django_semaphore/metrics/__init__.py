"""The metrics face: what reaches the tools operators already watch.

- ``urls.py`` / ``views.py``: the Prometheus endpoint
  (``path("metrics/", include("django_semaphore.metrics.urls"))``), the text
  exposition format 0.0.4, for staff who may view the dashboard or a bearer
  token (``SEMAPHORE_METRICS_TOKEN``);
- ``otel.py``: the OpenTelemetry instruments, recording whenever the API is
  importable (the ``otel`` extra) and the site set a MeterProvider;
- ``reading.py``: what both read from Redis at scrape or collection time,
  bounded in cost however many semaphores and partitions there are;
- ``partitions.py``: a keyed semaphore's partitions in it, a fixed number
  under their keys (core/series.py keeps which) and the rest as ``other``;
- ``prometheus.py``: that reading in the text format;
- ``names.py``: the instruments' names, units and attributes (the contract);
- ``conf.py`` and ``checks.py``: its settings and their check (E021, W008).

The engine counts each acquire's and each permit's end in the process
(core/tally.py) and writes the counts to Redis in batches; this face only
reads. Nothing below it imports it.
"""
