"""A site whose view holds its permit until the test kills the gunicorn worker serving it."""

import time

from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()  # Django is set up before the view's module-level decorator runs

from django.http import HttpRequest, HttpResponse  # noqa: E402
from django.urls import path  # noqa: E402

from django_semaphore.decorators import semaphore  # noqa: E402


@semaphore("held")
def hold(request: HttpRequest) -> HttpResponse:
    time.sleep(300)  # until the worker is killed
    return HttpResponse("done")


urlpatterns = [path("hold/", hold)]
