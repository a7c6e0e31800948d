"""``path("metrics/", include("django_semaphore.metrics.urls"))``: the Prometheus endpoint (views.py)."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "django_semaphore_metrics"
urlpatterns = [path("", views.metrics, name="metrics")]
