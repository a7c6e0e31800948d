"""The shop's background work: price refreshes that call the supplier through the ``/prices/`` view's semaphore.

The supplier allows three calls at once, whoever makes them. ``@limit_task``
takes the same ``"supplier"`` permits as ``@semaphore("supplier")`` on the
view, so web processes and workers together never make a fourth; a task that
finds all three taken is retried a little later instead of holding a worker.
"""

from __future__ import annotations

import time

from celery import shared_task

from django_semaphore.celery import limit_task

from .catalogue import MAX_SECONDS, PRODUCTS


# acks_late: a worker that dies mid-call has the message delivered again; its permit
# comes back within the lease. max_retries=None: a busy or paused supplier is waited out.
@shared_task(acks_late=True, max_retries=None)
@limit_task("supplier")
def refresh_supplier_prices(seconds: float = 1.0) -> dict[str, str]:
    """Today's prices, fetched from the supplier off the request path."""
    time.sleep(min(max(seconds, 0.0), MAX_SECONDS))  # the supplier's API call
    return {product.sku: product.price for product in PRODUCTS}
