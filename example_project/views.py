"""Views of the example site, each showing one way to guard expensive work."""

import time

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render

from django_semaphore import SemaphoreFull, get_semaphore


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "home.html")


def export_report(request: HttpRequest) -> HttpResponse:
    """A slow export: at most four run at once across every process and host."""
    try:
        with get_semaphore("reports") as permit:
            time.sleep(float(request.GET.get("seconds", "2")))
            return JsonResponse({"report": "done", "fence": permit.fence})
    except SemaphoreFull as full:
        response = JsonResponse({"error": "busy, try again"}, status=503)
        response["Retry-After"] = str(full.retry_after)
        return response
