"""The shop's pages, each guarded by the decorator in one of the ways we recommend.

The limits themselves live in ``settings.SEMAPHORES``: a view names its
semaphore, operators tune the numbers (or override them at runtime from the
admin) without touching code.
"""

from __future__ import annotations

import asyncio
import csv
import io
import time
from collections.abc import Iterator

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.http import require_POST

from django_semaphore.decorators import semaphore
from django_semaphore.waiting_room import end_visit

from .catalogue import PRODUCTS, matching, work_seconds
from .tasks import refresh_supplier_prices

INVENTORY_CACHE_KEY = "shop:inventory"
LOAD_DEFAULT_URL = "http://127.0.0.1:8000"
MAX_REFRESHES = 20


def home(request: HttpRequest) -> HttpResponse:
    limits = {name: options["limit"] for name, options in settings.SEMAPHORES.items()}
    base_url = request.build_absolute_uri("/")[:-1]
    # `make load` aims at the demo's default address; elsewhere it needs the URL.
    load = "make load" if base_url == LOAD_DEFAULT_URL else f'make load LOAD_ARGS="--url {base_url}"'
    context = {"limits": limits, "semaphores": settings.SEMAPHORES, "base_url": base_url, "load_command": load}
    return render(request, "shop/home.html", context)


def live(request: HttpRequest) -> HttpResponse:
    """The WebSocket page: sockets of the live consumer (shop/consumers.py), opened one click at a time."""
    context = {"limit": settings.SEMAPHORES["live"]["limit"], "socket_path": "/ws/live/"}
    return render(request, "shop/live.html", context)


@semaphore("reports")
def export_report(request: HttpRequest) -> HttpResponse:
    """Build the sales report: heavy on the database, so only a few run at once, site-wide."""
    time.sleep(work_seconds(request, 1.5))
    response = HttpResponse(content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="sales-report.csv"'
    writer = csv.writer(response)
    writer.writerow(["sku", "name", "units sold"])
    writer.writerows([product.sku, product.name, 10 * index] for index, product in enumerate(PRODUCTS, 1))
    return response


@semaphore("search")  # keyed "user_or_ip" in settings, so the dashboard lists each user's share
def search(request: HttpRequest) -> JsonResponse:
    """Search: each user (or anonymous address) gets two at a time; a third waits briefly in line."""
    query = request.GET.get("q", "")
    time.sleep(work_seconds(request, 0.5))
    return JsonResponse({"query": query, "results": [product.as_dict() for product in matching(query)]})


@semaphore("supplier")
async def supplier_prices(request: HttpRequest) -> JsonResponse:
    """Today's prices from our supplier, whose API allows three calls at once.

    An async view: the decorator waits for its permit on the asyncio client,
    without tying up a thread. The semaphore fails closed (``on_error:
    "deny"``): if Redis is down we would rather answer 503 than risk a fourth
    call and a ban.
    """
    await asyncio.sleep(work_seconds(request, 1.0))  # the supplier's API call
    return JsonResponse({"prices": {product.sku: product.price for product in PRODUCTS}})


@require_POST
def queue_price_refreshes(request: HttpRequest) -> JsonResponse:
    """Queue price refreshes for the Celery worker: their supplier calls share ``/prices/``'s three permits.

    Watch the ``supplier`` semaphore on the dashboard meanwhile: its holders
    are requests (``GET /prices/``) and tasks (``...refresh_supplier_prices[id]``).
    """
    try:
        count = min(max(int(request.POST.get("count", "6")), 1), MAX_REFRESHES)
    except ValueError:
        return JsonResponse({"error": "count must be a whole number"}, status=400)
    seconds = work_seconds(request, 2.0)
    queued = [refresh_supplier_prices.delay(seconds).id for _ in range(count)]
    return JsonResponse({"queued": queued, "seconds": seconds})


@semaphore("downloads")
def download_catalogue(request: HttpRequest) -> StreamingHttpResponse:
    """The catalogue as CSV, streamed row by row.

    The rows are produced while the response is sent, after this function
    has returned; the permit is held until the last row is out and the
    server closes the response.
    """
    delay = work_seconds(request, 2.0) / len(PRODUCTS)

    def rows() -> Iterator[str]:
        yield "sku,name,price\n"
        for product in PRODUCTS:
            time.sleep(delay)  # rendering one row of a large export
            line = io.StringIO()
            csv.writer(line).writerow([product.sku, product.name, product.price])
            yield line.getvalue()

    response = StreamingHttpResponse(rows(), content_type="text/csv")
    response["Content-Disposition"] = 'attachment; filename="catalogue.csv"'
    return response


@method_decorator(semaphore("inventory", block=False), name="dispatch")
class InventoryView(View):
    """Stock levels: one recount at a time; meanwhile everyone gets the last count.

    ``block=False`` runs the view even without a permit and lets it choose:
    here, degrade to a cached answer instead of refusing.
    """

    def get(self, request: HttpRequest) -> JsonResponse:
        if request.semaphore.limited:
            last = cache.get(INVENTORY_CACHE_KEY) or {"counted_at": None, "stock": {}}
            return JsonResponse({**last, "fresh": False})
        time.sleep(work_seconds(request, 1.0))  # counting the warehouse
        counted = {"counted_at": timezone.now().isoformat(), "stock": {product.sku: 12 for product in PRODUCTS}}
        cache.set(INVENTORY_CACHE_KEY, counted, timeout=None)
        return JsonResponse({**counted, "fresh": True})


@semaphore("launch")
def launch(request: HttpRequest) -> HttpResponse:
    """The new lamp's launch page, behind a waiting room: 5 visitors inside at once, the others in line."""
    return render(request, "shop/launch.html", {"limit": settings.SEMAPHORES["launch"]["limit"]})


@require_POST
@semaphore("launch")
def launch_buy(request: HttpRequest) -> HttpResponse:
    """The purchase: the visit ends here (a POST, CSRF-protected), so the next in line is let in at once."""
    end_visit(request)
    return render(request, "shop/launch.html", {"bought": True, "limit": settings.SEMAPHORES["launch"]["limit"]})
