from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls)]
urlpatterns += [path("surface/", include(("tests.support.surface_urls", "surface")))]
urlpatterns += [path("metrics/", include("django_semaphore.metrics.urls"))]
