"""A URLconf whose only view takes more weight than its semaphore allows (for E012)."""

from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views import View

from django_semaphore.decorators import semaphore


@semaphore("reports", weight=4)
def too_heavy(request: HttpRequest) -> HttpResponse:
    return HttpResponse("never")


@method_decorator(semaphore("reports", weight=5), name="get")
class TooHeavy(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")


urlpatterns = [path("heavy/", too_heavy), path("heavy-again/", too_heavy), path("cbv/", TooHeavy.as_view())]
