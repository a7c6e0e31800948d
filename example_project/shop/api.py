"""The JSON API. These views carry no decorator: ``SemaphoreMiddleware`` guards all of
``/api/`` from settings (per client address and site-wide), except the health check."""

from __future__ import annotations

import time

from django.http import Http404, HttpRequest, JsonResponse

from .catalogue import BY_SKU, PRODUCTS, work_seconds


def products(request: HttpRequest) -> JsonResponse:
    time.sleep(work_seconds(request, 0.3))
    return JsonResponse({"products": [product.as_dict() for product in PRODUCTS]})


def product(request: HttpRequest, sku: str) -> JsonResponse:
    time.sleep(work_seconds(request, 0.3))
    if sku not in BY_SKU:
        raise Http404("No such product")
    return JsonResponse(BY_SKU[sku].as_dict())


def health(request: HttpRequest) -> JsonResponse:
    """Exempt from every rule: a load balancer must see the site alive while it sheds load."""
    return JsonResponse({"status": "ok"})
