from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DjangoSemaphoreConfig(AppConfig):
    name = "django_semaphore"
    verbose_name = _("Semaphores")
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .metrics import otel

        otel.install()  # the OpenTelemetry instruments, when the API is installed (the `otel` extra)
